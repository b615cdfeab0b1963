package faux_test

import (
	"context"
	"github.com/agentbus/agentbus/internal/cputime"
	"testing"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/faux"
)

// The responder form is what a benchmark of the agent loop uses: no script to refill.
func benchStream(b *testing.B, r faux.Response, opts ...faux.Option) {
	p := faux.New(append(opts, faux.WithResponder(func(*llm.Context) faux.Response { return r }))...)
	c := userCtx("What is the weather like in Berlin today?")
	ctx := context.Background()
	b.ReportAllocs()
	events := 0
	cpu := cputime.Process()
	for b.Loop() {
		for ev := range p.Stream(ctx, model, c, nil) {
			events++
			_ = ev
		}
	}
	cputime.Report(b, cpu)
	b.ReportMetric(float64(events)/float64(b.N), "events/op")
}

func BenchmarkStreamText(b *testing.B) {
	b.Run("short-1-delta", func(b *testing.B) { benchStream(b, faux.Response{Text: "Sunny, 21 °C."}) })
	b.Run("200B-16-rune-deltas", func(b *testing.B) {
		benchStream(b, faux.Response{Text: "It is sunny in Berlin today with a high of 21 degrees and a light breeze from the west. Perfect weather for a walk along the Spree or a coffee outside — enjoy it while it lasts!"})
	})
}

func BenchmarkStreamToolCall(b *testing.B) {
	call := llm.ToolCall("call_1", "weather", map[string]any{"city": "Berlin", "unit": "celsius"})
	b.Run("default-deltas", func(b *testing.B) { benchStream(b, faux.Response{ToolCalls: []llm.Content{call}}) })
	b.Run("one-delta", func(b *testing.B) {
		benchStream(b, faux.Response{ToolCalls: []llm.Content{call}}, faux.WithToolDeltaSize(0))
	})
}

// Through the registry and llm.Stream's guard (what the loop pays).
func BenchmarkLLMStreamText(b *testing.B) {
	faux.Register(faux.WithResponder(func(*llm.Context) faux.Response { return faux.Response{Text: "Sunny, 21 °C."} }))
	defer llm.UnregisterAPI(llm.APIFaux)
	c := userCtx("What is the weather like in Berlin today?")
	ctx := context.Background()
	b.ReportAllocs()
	cpu := cputime.Process()
	for b.Loop() {
		for range llm.Stream(ctx, model, c, nil) {
		}
	}
	cputime.Report(b, cpu)
}
