package loop_test

import (
	"context"
	"encoding/json"
	"github.com/agentbus/agentbus/internal/cputime"
	"testing"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/faux"
	"github.com/agentbus/agentbus/pkg/loop"
)

// The two shapes of issue 2's benchmark, with the faux provider at zero latency and an event
// sink that only counts (a subscriber that does nothing costs nothing extra). Besides ns/op
// (wall time) they report cpu-ns/op, the process CPU time per turn (GC included), which is what
// stays meaningful when other work shares the machine:
//
//	one-step:  user prompt -> one LLM step with a short text reply
//	tool-turn: user prompt -> LLM step with one tool call -> argument validation -> in-process
//	           tool -> toolResult -> second LLM step with a text reply

var benchModel = &llm.Model{ID: "faux-1", API: llm.APIFaux, Provider: "faux", ContextWindow: 32768, MaxTokens: 4096}

var weatherTool = loop.AgentTool{
	Tool: llm.Tool{
		Name:        "weather",
		Description: "Current weather for a city",
		Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"},` +
			`"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city"]}`),
	},
	Label: "Weather",
	Execute: func(_ context.Context, _ string, args map[string]any, _ func(loop.ToolResult)) (loop.ToolResult, error) {
		return loop.TextResult("Sunny, 21 °C in " + args["city"].(string)), nil
	},
}

func runBench(b *testing.B, responder faux.Responder, tools []loop.AgentTool) {
	p := faux.New(faux.WithResponder(responder))
	cfg := &loop.Config{Model: benchModel, StreamFn: p.Stream}
	ac := &loop.AgentContext{SystemPrompt: "You are a helpful assistant.", Tools: tools}
	prompt := []llm.Message{llm.UserText("What is the weather like in Berlin today?", 1)}
	ctx := context.Background()
	events := 0
	emit := func(loop.Event) { events++ }
	b.ReportAllocs()
	cpu := cputime.Process()
	for b.Loop() {
		if _, err := loop.Run(ctx, prompt, ac, cfg, emit); err != nil {
			b.Fatal(err)
		}
	}
	if cpu := cputime.Process() - cpu; cpu > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
	b.ReportMetric(float64(events)/float64(b.N), "events/op")
}

func BenchmarkTurn(b *testing.B) {
	b.Run("one-step", func(b *testing.B) {
		runBench(b, func(*llm.Context) faux.Response { return faux.Response{Text: "Sunny, 21 °C."} }, nil)
	})
	b.Run("tool-turn", func(b *testing.B) {
		call := llm.ToolCall("call_1", "weather", map[string]any{"city": "Berlin", "unit": "celsius"})
		runBench(b, func(c *llm.Context) faux.Response {
			if last := c.Messages[len(c.Messages)-1]; last.Role == llm.RoleToolResult {
				return faux.Response{Text: "It is sunny and 21 °C in Berlin."}
			}
			return faux.Response{ToolCalls: []llm.Content{call}}
		}, []loop.AgentTool{weatherTool})
	})
}

// BenchmarkAgentPrompt is the one-step turn through the stateful Agent (state updates, a
// listener, history kept; the history is reset every iteration so that it does not grow).
func BenchmarkAgentPrompt(b *testing.B) {
	p := faux.New(faux.WithResponder(func(*llm.Context) faux.Response { return faux.Response{Text: "Sunny, 21 °C."} }))
	a := loop.NewAgent(loop.AgentOptions{SystemPrompt: "You are a helpful assistant.", Model: benchModel, Config: loop.Config{StreamFn: p.Stream}})
	events := 0
	a.Subscribe(func(context.Context, loop.Event) { events++ })
	ctx := context.Background()
	b.ReportAllocs()
	cpu := cputime.Process()
	for b.Loop() {
		a.ReplaceMessages(nil)
		if err := a.Prompt(ctx, "What is the weather like in Berlin today?"); err != nil {
			b.Fatal(err)
		}
	}
	if cpu := cputime.Process() - cpu; cpu > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
	b.ReportMetric(float64(events)/float64(b.N), "events/op")
}
