package metrics

import (
	"context"
	"net/http"
	"testing"

	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/openai"
)

// A model request that the provider's HTTP server answers with 429 and then 503 before it
// streams the answer is retried twice by pkg/llm; LLM.Wrap counts both retries with their
// reason, and the request once, as ok.
func TestLLMRetriesCounted(t *testing.T) {
	statuses := []int{http.StatusTooManyRequests, http.StatusServiceUnavailable}
	srv := fakeopenai.New(t, func(r *fakeopenai.Request) fakeopenai.Reply {
		if r.N <= len(statuses) {
			return fakeopenai.Reply{Status: statuses[r.N-1]}
		}
		return fakeopenai.Reply{Text: "fine"}
	})
	reg := New()
	stream := NewLLM(reg).Wrap(openai.New().Stream)
	model := &llm.Model{ID: "m1", API: llm.APIOpenAICompletions, Provider: "main", BaseURL: srv.BaseURL()}
	var final *llm.Message
	for ev := range stream(context.Background(), model, &llm.Context{Messages: []llm.Message{llm.UserText("hi", 1)}}, &llm.StreamOptions{APIKey: "k"}) {
		if ev.Message != nil {
			final = ev.Message
		}
	}
	if final == nil || final.StopReason != llm.StopReasonStop || final.TextContent() != "fine" {
		t.Fatalf("final message %+v, want the third attempt's answer", final)
	}
	if n := len(srv.Requests()); n != 3 {
		t.Fatalf("%d requests reached the provider, want 3", n)
	}
	want := map[string]float64{llm.RetryRateLimited: 1, llm.RetryServerError: 1, llm.RetryTransport: 0}
	for reason, n := range want {
		if got := value(t, reg, "agentbus_llm_retries_total", map[string]string{"provider": "main", "model": "m1", "reason": reason}); got != n {
			t.Errorf("agentbus_llm_retries_total{reason=%q} = %v, want %v", reason, got, n)
		}
	}
	if got := value(t, reg, "agentbus_llm_requests_total", map[string]string{"provider": "main", "model": "m1", "outcome": OutcomeOK}); got != 1 {
		t.Errorf("agentbus_llm_requests_total{outcome=ok} = %v, want 1 (retries are not requests)", got)
	}
}

// value is the counter of family name whose labels include want (0 when there is none).
func value(t *testing.T, r *Registry, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := r.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
