package llmbus_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/faux"
	"github.com/agentbus/agentbus/pkg/llm/providers/openai"
	"github.com/agentbus/agentbus/pkg/llm/providertest"
	"github.com/agentbus/agentbus/pkg/llmbus"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

var testCost = llm.ModelCost{Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75}

// serve puts p on subject over its own connection and returns a client connection.
func serve(t testing.TB, srv *natstest.Server, subject string, p llm.Provider, opts ...llmbus.ServeOption) *llmbus.Client {
	t.Helper()
	snc, _ := srv.Connect(t)
	s, err := llmbus.Serve(context.Background(), snc, subject, p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	cnc, _ := srv.Connect(t)
	c, err := llmbus.NewClient(cnc, subject)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newServer(t testing.TB) *natstest.Server {
	return natstest.New(t, natstest.WithoutProvision())
}

// TestConformanceOpenAIOverBus runs the whole provider suite, wire scenarios included,
// against a provider on the bus: the openai-completions provider served by llmbus.Serve on a
// real nats-server, called through the llmbus client. The suite's recording HTTP server is
// the OpenAI endpoint; its URL travels in the model's baseUrl, so every request check (image
// data, tool ids, the synthetic orphan result, surrogates) and every HTTP behaviour (401 not
// retried, 429 retried by the served provider, abort mid-stream reaching the HTTP request)
// is checked end to end through the bus.
func TestConformanceOpenAIOverBus(t *testing.T) {
	c := serve(t, newServer(t), "llm.conformance.openai", openai.New())
	providertest.Run(t, providertest.Harness{
		API:      llmbus.API,
		Provider: c,
		Dir:      "../llm/providers/openai/testdata/conformance",
		Model: func(base string) *llm.Model {
			if base != "" {
				base += "/v1"
			}
			return &llm.Model{ID: "gpt-4.1-mini", API: llmbus.API, Provider: "remote", BaseURL: base,
				Input: []string{"text", "image"}, Cost: testCost, ContextWindow: 128000, MaxTokens: 32768}
		},
		StreamsToolArguments: true,
		RequestToolCallIDs:   providertest.OpenAIToolCallIDs,
		ValidToolCallID:      func(id string) bool { return id != "" && len(id) <= 40 },
	})
}

// TestConformanceFauxOverBus runs the suite's scenarios without a wire against the faux
// provider on the bus (thinking, tool calls, empty replies and overflow errors cross it).
func TestConformanceFauxOverBus(t *testing.T) {
	var cur atomic.Value
	cur.Store(providertest.ScenarioText)
	replies := map[string]faux.Response{
		providertest.ScenarioText:     {Text: providertest.WantText},
		providertest.ScenarioThinking: {Thinking: "2+2 is 4.", ThinkingSignature: "sig-1", Text: providertest.WantThinkingText},
		providertest.ScenarioToolCall: {ToolCalls: []llm.Content{llm.ToolCall("", providertest.WantToolName, providertest.WantToolArgs)}},
		providertest.ScenarioTwoToolCalls: {ToolCalls: []llm.Content{
			llm.ToolCall("", providertest.WantToolName, map[string]any{"location": "Paris"}),
			llm.ToolCall("", providertest.WantToolName, map[string]any{"location": "Tokyo"}),
		}},
		providertest.ScenarioEmpty:           {},
		providertest.ScenarioContextOverflow: {Error: "prompt is too long: 213462 tokens > 200000 maximum"},
	}
	p := faux.New(faux.WithResponder(func(*llm.Context) faux.Response { return replies[cur.Load().(string)] }))
	c := serve(t, newServer(t), "llm.conformance.faux", p)
	providertest.Run(t, providertest.Harness{
		API:      llmbus.API,
		Provider: c,
		Model: func(string) *llm.Model {
			return &llm.Model{ID: "faux-1", API: llmbus.API, Provider: "remote", Cost: testCost, ContextWindow: 200000}
		},
		Prepare:              func(_ *testing.T, scenario string) { cur.Store(scenario) },
		StreamsToolArguments: true,
	})
}
