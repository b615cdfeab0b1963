package metrics

import (
	"context"
	"encoding/json"
	"iter"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/agentbus/agentbus/pkg/buildinfo"
	"github.com/agentbus/agentbus/pkg/llm"
)

// every returns a registry in which every family has a series: each role's set touched once.
func every(t *testing.T) (*Registry, map[string]*dto.MetricFamily) {
	t.Helper()
	r := New()
	NewIngest(r).Message("webhook", "b1", IngestAccepted)
	NewIngest(r).WebhookRequest(202)
	tm := NewTurn(r)
	tm.Finished(TurnCompleted, time.Second)
	tm.Owned(1)
	tm.TakeOver()
	NewTools(r).Call("bash", OutcomeOK, time.Millisecond)
	NewEgress(r).Send("webhook", SendSent)
	NewDeadLetters(r).Add("egress", "invalid")
	NewHooks(r).Call("moderation", "message.received", HookContinue, time.Millisecond)
	c := NewConsumers(r)
	c.pending.WithLabelValues("SESSION_IN", "turn-workers").Set(0)
	c.ackPending.WithLabelValues("SESSION_IN", "turn-workers").Set(0)
	NewLLM(r).Request(&llm.Model{Provider: "p", ID: "m"}, &llm.Message{Role: llm.RoleAssistant, StopReason: llm.StopReasonStop,
		Usage: &llm.Usage{Input: 3, Output: 2, CacheRead: 1, CacheWrite: 1, Cost: llm.UsageCost{Total: 0.5}}}, time.Second)
	NewLLM(r).Retried("p", "m", llm.RetryRateLimited)
	mfs, err := r.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return r, out
}

// The families table of docs/observability.md is what the code registers (names and types),
// and the Grafana dashboard asks only for families that exist.
func TestDocsAndDashboardMatchTheFamilies(t *testing.T) {
	_, got := every(t)
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "observability.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `(agentbus_[a-z_]+)` \\| (counter|gauge|histogram) \\|")
	documented := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]] = true
		mf := got[m[1]]
		if mf == nil {
			t.Errorf("docs/observability.md lists %s, which is not registered", m[1])
			continue
		}
		if want := strings.ToUpper(m[2]); mf.GetType().String() != want {
			t.Errorf("%s is a %s, the docs say %s", m[1], mf.GetType(), want)
		}
	}
	for name := range got {
		if strings.HasPrefix(name, "agentbus_") && !documented[name] {
			t.Errorf("%s is registered but not in docs/observability.md", name)
		}
	}
	// The table, names and labels.
	for name, labels := range map[string][]string{
		"agentbus_ingest_messages_total":        {"platform", "bot", "outcome"},
		"agentbus_turns_total":                  {"outcome"},
		"agentbus_turn_duration_seconds":        nil,
		"agentbus_llm_requests_total":           {"provider", "model", "outcome"},
		"agentbus_llm_request_duration_seconds": {"provider", "model"},
		"agentbus_llm_tokens_total":             {"provider", "model", "kind"},
		"agentbus_llm_cost_usd_total":           {"provider", "model"},
		"agentbus_llm_retries_total":            {"provider", "model", "reason"},
		"agentbus_tool_calls_total":             {"tool", "outcome"},
		"agentbus_tool_duration_seconds":        {"tool"},
		"agentbus_egress_sends_total":           {"platform", "outcome"},
		"agentbus_dead_letters_total":           {"role", "reason"},
		"agentbus_sessions_owned":               nil,
		"agentbus_consumer_pending_messages":    {"stream", "consumer"},
		"agentbus_lease_takeovers_total":        nil,
		"agentbus_build_info":                   {"version", "revision", "goversion"},
	} {
		mf := got[name]
		if mf == nil {
			t.Errorf("%s not registered", name)
			continue
		}
		var have []string
		for _, lp := range mf.GetMetric()[0].GetLabel() {
			have = append(have, lp.GetName())
		}
		slices.Sort(have)
		want := slices.Clone(labels)
		slices.Sort(want)
		if !slices.Equal(have, want) {
			t.Errorf("%s labels %v, want %v", name, have, want)
		}
	}

	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("deploy/grafana-dashboard.json: %v", err)
	}
	name := regexp.MustCompile(`\b(agentbus_[a-z_]+|process_[a-z_]+|go_[a-z_]+)`)
	used := map[string]bool{}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, n := range name.FindAllString(tg.Expr, -1) {
				base := n
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(n, suf); ok && got[b] != nil && got[b].GetType() == dto.MetricType_HISTOGRAM {
						base = b
					}
				}
				if got[base] == nil {
					t.Errorf("dashboard panel %q asks for %s, which is not registered", p.Title, n)
				}
				used[base] = true
			}
		}
	}
	for n := range documented {
		if !used[n] {
			t.Errorf("the dashboard shows nothing of %s", n)
		}
	}
}

func TestBuildInfo(t *testing.T) {
	_, got := every(t)
	mf := got["agentbus_build_info"]
	if mf == nil || len(mf.GetMetric()) != 1 || mf.GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Fatalf("agentbus_build_info = %v", mf)
	}
	labels := map[string]string{}
	for _, lp := range mf.GetMetric()[0].GetLabel() {
		labels[lp.GetName()] = lp.GetValue()
	}
	if bi := buildinfo.Get(); labels["version"] != bi.Version || labels["goversion"] == "" {
		t.Errorf("build info labels %v, build %+v", labels, bi)
	}
	for _, n := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if got[n] == nil {
			t.Errorf("no %s: the runtime and process collectors are missing", n)
		}
	}
}

// Wrap counts each request once when its stream ends, by how it ended; a caller that stops
// reading early counts as aborted.
func TestLLMWrap(t *testing.T) {
	tests := []struct {
		name    string
		final   *llm.Message
		stop    bool // the caller stops after the first event
		outcome string
	}{
		{"done", &llm.Message{Role: llm.RoleAssistant, StopReason: llm.StopReasonStop, Usage: &llm.Usage{Input: 5, Output: 7}}, false, OutcomeOK},
		{"error", &llm.Message{Role: llm.RoleAssistant, StopReason: llm.StopReasonError}, false, OutcomeError},
		{"aborted", &llm.Message{Role: llm.RoleAssistant, StopReason: llm.StopReasonAborted}, false, OutcomeAborted},
		{"caller stops", nil, true, OutcomeAborted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New()
			m := NewLLM(r)
			stream := m.Wrap(func(ctx context.Context, model *llm.Model, c *llm.Context, o *llm.StreamOptions) iter.Seq[llm.Event] {
				return func(yield func(llm.Event) bool) {
					if !yield(llm.Event{Type: llm.EventStart}) {
						return
					}
					typ := llm.EventDone
					if tt.final.StopReason != llm.StopReasonStop {
						typ = llm.EventError
					}
					yield(llm.Event{Type: typ, Message: tt.final})
				}
			})
			if tt.final == nil {
				tt.final = &llm.Message{StopReason: llm.StopReasonStop}
			}
			for range stream(context.Background(), &llm.Model{Provider: "p", ID: "m"}, &llm.Context{}, nil) {
				if tt.stop {
					break
				}
			}
			mfs, _ := r.Gatherer().Gather()
			var req *dto.MetricFamily
			for _, mf := range mfs {
				if mf.GetName() == "agentbus_llm_requests_total" {
					req = mf
				}
			}
			if req == nil || len(req.GetMetric()) != 1 {
				t.Fatalf("requests: %v", req)
			}
			for _, lp := range req.GetMetric()[0].GetLabel() {
				if lp.GetName() == "outcome" && lp.GetValue() != tt.outcome {
					t.Errorf("outcome %s, want %s", lp.GetValue(), tt.outcome)
				}
			}
		})
	}
}

// Nil sets count nothing and do not panic: roles and tests without a registry.
func TestNilIsOff(t *testing.T) {
	var r *Registry
	NewIngest(r).Message("a", "b", "c")
	NewTurn(r).Finished(TurnFailed, time.Second)
	NewTools(r).Call("x", OutcomeOK, 0)
	NewEgress(r).Send("x", SendSent)
	NewDeadLetters(r).Add("x", "y")
	NewConsumers(r).Watch(context.Background(), nil, []string{"X"}, 0, nil)
	next := func(ctx context.Context, model *llm.Model, c *llm.Context, o *llm.StreamOptions) iter.Seq[llm.Event] {
		return nil
	}
	if NewLLM(r).Wrap(next) == nil {
		t.Fatal("nil LLM set wraps to nil")
	}
}
