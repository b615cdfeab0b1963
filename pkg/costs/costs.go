// Package costs tracks what LLM calls cost, per provider and model (seed CostTracker): calls,
// errors, input/output/cache tokens and the estimated cost in US dollars from llm.Usage.Cost
// (which providers compute from the model's configured prices; a model without prices costs
// 0). It feeds /health (HealthLines) and metrics (WriteMetrics, the Prometheus text format).
//
// A Tracker counts what one process saw since it started. Aggregating across turn workers is
// left to the metrics system (sum by provider, model over instances), which is what the
// Prometheus exposition is for; nothing is persisted on the bus.
package costs

import (
	"context"
	"fmt"
	"io"
	"iter"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/llm"
)

// Key identifies one model at one provider alias.
type Key struct {
	Provider string `json:"provider"`
	Model    string `json:"model"`
}

// Stat is the running total of one Key.
type Stat struct {
	Key
	Calls      int64   `json:"calls"`
	Errors     int64   `json:"errors"`  // StopReason error
	Aborted    int64   `json:"aborted"` // StopReason aborted
	Input      int64   `json:"input"`
	Output     int64   `json:"output"`
	CacheRead  int64   `json:"cacheRead"`
	CacheWrite int64   `json:"cacheWrite"`
	CostUSD    float64 `json:"costUsd"`
}

func (s *Stat) add(o *Stat) {
	s.Calls += o.Calls
	s.Errors += o.Errors
	s.Aborted += o.Aborted
	s.Input += o.Input
	s.Output += o.Output
	s.CacheRead += o.CacheRead
	s.CacheWrite += o.CacheWrite
	s.CostUSD += o.CostUSD
}

// Tracker accumulates Stats. The zero value is not usable; use New. Safe for concurrent use.
type Tracker struct {
	mu    sync.Mutex
	stats map[Key]*Stat
	since time.Time
}

// New returns an empty tracker.
func New() *Tracker { return &Tracker{stats: map[Key]*Stat{}, since: time.Now()} }

// Record counts one finished assistant message (the final message of a stream: done or
// error). Other roles and nil are ignored. Tokens and cost of failed and aborted calls count
// too: they were billed.
func (t *Tracker) Record(msg *llm.Message) {
	if msg == nil || msg.Role != llm.RoleAssistant {
		return
	}
	k := Key{Provider: msg.Provider, Model: msg.Model}
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.stats[k]
	if !ok {
		s = &Stat{Key: k}
		t.stats[k] = s
	}
	s.Calls++
	switch msg.StopReason {
	case llm.StopReasonError:
		s.Errors++
	case llm.StopReasonAborted:
		s.Aborted++
	}
	if u := msg.Usage; u != nil {
		s.Input += int64(u.Input)
		s.Output += int64(u.Output)
		s.CacheRead += int64(u.CacheRead)
		s.CacheWrite += int64(u.CacheWrite)
		s.CostUSD += u.Cost.Total
	}
}

// StreamFunc is the shape of llm.Stream.
type StreamFunc func(ctx context.Context, model *llm.Model, c *llm.Context, opts *llm.StreamOptions) iter.Seq[llm.Event]

// Wrap returns next with every terminal message recorded, so the tracker sees every call,
// fallbacks included (wrap the innermost stream function for per-attempt counts, the outer
// one for per-turn-step counts).
func (t *Tracker) Wrap(next StreamFunc) StreamFunc {
	return func(ctx context.Context, model *llm.Model, c *llm.Context, opts *llm.StreamOptions) iter.Seq[llm.Event] {
		return func(yield func(llm.Event) bool) {
			for ev := range next(ctx, model, c, opts) {
				if ev.Type == llm.EventDone || ev.Type == llm.EventError {
					t.Record(ev.Message)
				}
				if !yield(ev) {
					return
				}
			}
		}
	}
}

// Snapshot returns a copy of every Stat, sorted by provider then model.
func (t *Tracker) Snapshot() []Stat {
	t.mu.Lock()
	out := make([]Stat, 0, len(t.stats))
	for _, s := range t.stats {
		out = append(out, *s)
	}
	t.mu.Unlock()
	slices.SortFunc(out, func(a, b Stat) int {
		if c := strings.Compare(a.Provider, b.Provider); c != 0 {
			return c
		}
		return strings.Compare(a.Model, b.Model)
	})
	return out
}

// ByProvider sums the snapshot per provider (Model empty), sorted by provider.
func (t *Tracker) ByProvider() []Stat {
	sum := map[string]*Stat{}
	for _, s := range t.Snapshot() {
		p, ok := sum[s.Provider]
		if !ok {
			p = &Stat{Key: Key{Provider: s.Provider}}
			sum[s.Provider] = p
		}
		p.add(&s)
	}
	out := make([]Stat, 0, len(sum))
	for _, k := range slices.Sorted(maps.Keys(sum)) {
		out = append(out, *sum[k])
	}
	return out
}

// Total sums every Stat.
func (t *Tracker) Total() Stat {
	var tot Stat
	for _, s := range t.Snapshot() {
		tot.add(&s)
	}
	return tot
}

// HealthLines summarizes usage for /health: a total line, then one line per model (most
// expensive first, then most calls), at most maxHealthModels of them.
func (t *Tracker) HealthLines() []string {
	snap := t.Snapshot()
	if len(snap) == 0 {
		return []string{"LLM usage: no calls yet"}
	}
	var tot Stat
	for i := range snap {
		tot.add(&snap[i])
	}
	lines := []string{fmt.Sprintf("LLM usage since %s: %s (%s), %s in / %s out tokens, ~$%.4f",
		t.since.UTC().Format("2006-01-02 15:04Z"), count(tot.Calls, "call"), count(tot.Errors, "error"), human(tot.Input), human(tot.Output), tot.CostUSD)}
	slices.SortStableFunc(snap, func(a, b Stat) int {
		switch {
		case a.CostUSD != b.CostUSD:
			if a.CostUSD > b.CostUSD {
				return -1
			}
			return 1
		default:
			return int(b.Calls - a.Calls)
		}
	})
	for i, s := range snap {
		if i == maxHealthModels {
			lines = append(lines, fmt.Sprintf("  … %d more models", len(snap)-maxHealthModels))
			break
		}
		l := fmt.Sprintf("  %s/%s: %s, %s in / %s out", s.Provider, s.Model, count(s.Calls, "call"), human(s.Input), human(s.Output))
		if s.CacheRead > 0 {
			l += fmt.Sprintf(" (%s cached)", human(s.CacheRead))
		}
		l += fmt.Sprintf(", ~$%.4f", s.CostUSD)
		if s.Errors > 0 {
			l += ", " + count(s.Errors, "error")
		}
		lines = append(lines, l)
	}
	return lines
}

const maxHealthModels = 10

func human(n int64) string {
	switch {
	case n >= 10_000_000:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1_000_000:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 10_000:
		return fmt.Sprintf("%dk", n/1000)
	case n >= 1000:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

// Metric names of WriteMetrics.
const (
	MetricCalls  = "agentbus_llm_calls_total"
	MetricErrors = "agentbus_llm_errors_total"
	MetricTokens = "agentbus_llm_tokens_total"
	MetricCost   = "agentbus_llm_cost_usd_total"
)

// WriteMetrics writes the counters in the Prometheus text exposition format (version 0.0.4):
//
//	agentbus_llm_calls_total{provider,model}
//	agentbus_llm_errors_total{provider,model,reason="error"|"aborted"}
//	agentbus_llm_tokens_total{provider,model,kind="input"|"output"|"cache_read"|"cache_write"}
//	agentbus_llm_cost_usd_total{provider,model}
func (t *Tracker) WriteMetrics(w io.Writer) error {
	snap := t.Snapshot()
	var b strings.Builder
	family := func(name, help string, rows func()) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s counter\n", name, help, name)
		rows()
	}
	labels := func(s *Stat, extra ...string) string {
		var l strings.Builder
		l.WriteString(`{provider="`)
		l.WriteString(escapeLabel(s.Provider))
		l.WriteString(`",model="`)
		l.WriteString(escapeLabel(s.Model))
		l.WriteByte('"')
		for i := 0; i+1 < len(extra); i += 2 {
			fmt.Fprintf(&l, `,%s="%s"`, extra[i], escapeLabel(extra[i+1]))
		}
		l.WriteByte('}')
		return l.String()
	}
	family(MetricCalls, "LLM calls by provider alias and model.", func() {
		for i := range snap {
			fmt.Fprintf(&b, "%s%s %d\n", MetricCalls, labels(&snap[i]), snap[i].Calls)
		}
	})
	family(MetricErrors, "LLM calls that ended in an error or were aborted.", func() {
		for i := range snap {
			fmt.Fprintf(&b, "%s%s %d\n", MetricErrors, labels(&snap[i], "reason", "error"), snap[i].Errors)
			fmt.Fprintf(&b, "%s%s %d\n", MetricErrors, labels(&snap[i], "reason", "aborted"), snap[i].Aborted)
		}
	})
	family(MetricTokens, "LLM tokens by kind.", func() {
		for i := range snap {
			s := &snap[i]
			for _, kv := range []struct {
				kind string
				n    int64
			}{{"input", s.Input}, {"output", s.Output}, {"cache_read", s.CacheRead}, {"cache_write", s.CacheWrite}} {
				fmt.Fprintf(&b, "%s%s %d\n", MetricTokens, labels(s, "kind", kv.kind), kv.n)
			}
		}
	})
	family(MetricCost, "Estimated LLM cost in US dollars (from configured model prices).", func() {
		for i := range snap {
			fmt.Fprintf(&b, "%s%s %g\n", MetricCost, labels(&snap[i]), snap[i].CostUSD)
		}
	})
	_, err := io.WriteString(w, b.String())
	return err
}

// escapeLabel escapes a label value: backslash, double quote and newline.
func escapeLabel(s string) string {
	if !strings.ContainsAny(s, "\\\"\n") {
		return s
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return r.Replace(s)
}

// count is "1 call", "2 calls".
func count(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
