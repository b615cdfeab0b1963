package models

import (
	"context"
	"testing"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/faux"
)

func BenchmarkScore(b *testing.B) {
	ids := []string{"claude-sonnet-4-5-20250929", "cu/gpt-4o-mini", "qwen3:8b", "mystery-model", "deepseek-r1:70b"}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		Score(ids[i%len(ids)])
		i++
	}
}

func BenchmarkRank100(b *testing.B) {
	base := make([]llm.Model, 0, 100)
	for _, id := range []string{"gpt-4o", "gpt-4o-mini", "o3", "claude-opus-4", "qwen3:14b", "llama3.2:3b", "gemini-2.5-pro", "glm-4-plus", "kimi-k2", "unknown"} {
		for j := 0; j < 10; j++ {
			base = append(base, llm.Model{ID: id + "-" + string(rune('a'+j))})
		}
	}
	ms := make([]llm.Model, len(base))
	b.ReportAllocs()
	for b.Loop() {
		copy(ms, base)
		DefaultTiers.Rank(ms)
	}
}

func BenchmarkResolveHarness(b *testing.B) {
	agent := config.Agent{MaxIterations: 15, MaxTools: 12, ModelHarness: config.ModelHarness{
		ProviderPatterns: map[string]config.Harness{"*": {MaxTools: 10}, "open*": {MaxIterations: 7}},
		Models:           map[string]config.Harness{"openai:gpt-4o": {MaxIterations: 9}},
	}}
	// What the turn worker asks for every turn: resolved each time, and through Harnesses.
	b.Run("ResolveHarness", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ResolveHarness(agent, "openai", "gpt-4o")
		}
	})
	b.Run("Harnesses", func(b *testing.B) {
		hs := NewHarnesses(agent)
		b.ReportAllocs()
		for b.Loop() {
			hs.Resolve("openai", "gpt-4o")
		}
	})
}

// BenchmarkFallbackOverhead streams a scripted 64-delta answer directly and through Fallback
// (no failure): the difference is what the wrapper costs on the happy path.
func BenchmarkFallbackOverhead(b *testing.B) {
	reg, err := NewRegistry(map[string]config.Provider{"demo": {API: llm.APIFaux, Models: []config.ModelEntry{{ID: "f1"}, {ID: "f2"}}}})
	if err != nil {
		b.Fatal(err)
	}
	text := ""
	for i := 0; i < 64; i++ {
		text += "word "
	}
	p := faux.New(faux.WithDeltaSize(5), faux.WithResponder(func(*llm.Context) faux.Response { return faux.Response{Text: text} }))
	m, _ := reg.GetModel("demo", "f1")
	c := &llm.Context{Messages: []llm.Message{llm.UserText("hi", 1)}}
	run := func(b *testing.B, s StreamFunc) {
		b.ReportAllocs()
		for b.Loop() {
			for range s(context.Background(), m, c, nil) {
			}
		}
	}
	b.Run("direct", func(b *testing.B) { run(b, p.Stream) })
	f := NewFallback(FallbackOptions{Registry: reg, Stream: p.Stream})
	b.Run("fallback", func(b *testing.B) { run(b, f.Stream) })
}

func BenchmarkEnvKey(b *testing.B) {
	s := llm.ProviderSettings{API: llm.APIFaux}
	b.ReportAllocs()
	for b.Loop() {
		_ = EnvKey("demo", s)
	}
}
