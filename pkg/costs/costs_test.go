package costs

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/faux"
)

func assistant(provider, model string, reason llm.StopReason, in, out, cacheRead int, cost float64) *llm.Message {
	return &llm.Message{Role: llm.RoleAssistant, Provider: provider, Model: model, StopReason: reason,
		Usage: &llm.Usage{Input: in, Output: out, CacheRead: cacheRead, Cost: llm.UsageCost{Total: cost}}}
}

func TestTracker(t *testing.T) {
	tr := New()
	msgs := []*llm.Message{
		assistant("openai", "gpt-4o", llm.StopReasonStop, 1000, 200, 500, 0.004),
		assistant("openai", "gpt-4o", llm.StopReasonToolUse, 2000, 100, 0, 0.006),
		assistant("openai", "gpt-4o-mini", llm.StopReasonError, 10, 0, 0, 0),
		assistant("local", "qwen3:14b", llm.StopReasonAborted, 300, 20, 0, 0),
		{Role: llm.RoleUser}, // ignored
		nil,                  // ignored
	}
	for _, m := range msgs {
		tr.Record(m)
	}
	tr.Record(&llm.Message{Role: llm.RoleAssistant, Provider: "local", Model: "qwen3:14b", StopReason: llm.StopReasonStop}) // no usage

	want := []Stat{
		{Key: Key{"local", "qwen3:14b"}, Calls: 2, Aborted: 1, Input: 300, Output: 20},
		{Key: Key{"openai", "gpt-4o"}, Calls: 2, Input: 3000, Output: 300, CacheRead: 500, CostUSD: 0.01},
		{Key: Key{"openai", "gpt-4o-mini"}, Calls: 1, Errors: 1, Input: 10},
	}
	got := tr.Snapshot()
	if len(got) != len(want) {
		t.Fatalf("snapshot %+v", got)
	}
	for i := range want {
		g := got[i]
		g.CostUSD = float64(int(g.CostUSD*1e6+0.5)) / 1e6
		if g != want[i] {
			t.Errorf("stat %d = %+v, want %+v", i, g, want[i])
		}
	}
	if p := tr.ByProvider(); len(p) != 2 || p[1].Provider != "openai" || p[1].Calls != 3 || p[1].Input != 3010 {
		t.Errorf("by provider %+v", p)
	}
	if tot := tr.Total(); tot.Calls != 5 || tot.Errors != 1 || tot.Aborted != 1 {
		t.Errorf("total %+v", tot)
	}

	lines := tr.HealthLines()
	if len(lines) != 4 || !strings.Contains(lines[0], "5 calls (1 error), 3.3k in / 320 out tokens, ~$0.0100") {
		t.Errorf("health lines:\n%s", strings.Join(lines, "\n"))
	}
	if !strings.HasPrefix(lines[1], "  openai/gpt-4o: 2 calls, 3.0k in / 300 out (500 cached), ~$0.0100") {
		t.Errorf("most expensive first: %q", lines[1])
	}
	if !strings.HasSuffix(lines[3], "1 call, 10 in / 0 out, ~$0.0000, 1 error") {
		t.Errorf("errors shown: %q", lines[3])
	}
	if l := New().HealthLines(); len(l) != 1 || !strings.Contains(l[0], "no calls") {
		t.Errorf("empty: %v", l)
	}
}

func TestWriteMetrics(t *testing.T) {
	tr := New()
	tr.Record(assistant("router", `we"ird\model`+"\n", llm.StopReasonStop, 5, 7, 0, 0.5))
	var b strings.Builder
	if err := tr.WriteMetrics(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"# HELP agentbus_llm_calls_total LLM calls by provider alias and model.\n# TYPE agentbus_llm_calls_total counter\n",
		`agentbus_llm_calls_total{provider="router",model="we\"ird\\model\n"} 1` + "\n",
		`agentbus_llm_errors_total{provider="router",model="we\"ird\\model\n",reason="error"} 0` + "\n",
		`agentbus_llm_tokens_total{provider="router",model="we\"ird\\model\n",kind="input"} 5` + "\n",
		`agentbus_llm_tokens_total{provider="router",model="we\"ird\\model\n",kind="output"} 7` + "\n",
		`agentbus_llm_cost_usd_total{provider="router",model="we\"ird\\model\n"} 0.5` + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q:\n%s", want, out)
		}
	}
	// Every non-comment line is "name{labels} value".
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(l, "#") && !strings.HasPrefix(l, "agentbus_llm_") {
			t.Errorf("bad line %q", l)
		}
	}
}

func TestWrapRecordsEveryCall(t *testing.T) {
	p := faux.New()
	p.Push(faux.Response{Text: "hello", Usage: &llm.Usage{Input: 10, Output: 2}}, faux.Response{Error: "HTTP 500: boom"})
	tr := New()
	stream := tr.Wrap(p.Stream)
	m := &llm.Model{ID: "f1", API: llm.APIFaux, Provider: "demo", Cost: llm.ModelCost{Input: 1, Output: 2}}
	for i := 0; i < 2; i++ {
		for range stream(context.Background(), m, &llm.Context{Messages: []llm.Message{llm.UserText("hi", 1)}}, nil) {
		}
	}
	s := tr.Snapshot()
	if len(s) != 1 || s[0].Calls != 2 || s[0].Errors != 1 || s[0].Input < 10 {
		t.Fatalf("snapshot %+v", s)
	}
}

func TestConcurrentRecord(t *testing.T) {
	tr := New()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				tr.Record(assistant("p", fmt.Sprint("m", g%2), llm.StopReasonStop, 1, 1, 0, 0))
				_ = tr.HealthLines()
			}
		}(g)
	}
	wg.Wait()
	if tot := tr.Total(); tot.Calls != 1600 || tot.Input != 1600 {
		t.Fatalf("total %+v", tot)
	}
}

func BenchmarkRecord(b *testing.B) {
	tr := New()
	m := assistant("openai", "gpt-4o", llm.StopReasonStop, 1000, 200, 0, 0.01)
	b.ReportAllocs()
	for b.Loop() {
		tr.Record(m)
	}
}
