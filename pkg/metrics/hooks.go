package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of a hook call (agentbus_hook_calls_total{outcome}).
const (
	HookContinue = "continue" // answered continue (or nothing)
	HookModify   = "modify"   // answered modify
	HookBlock    = "block"    // answered block
	HookError    = "error"    // failed: transport error, non-2xx, unreadable answer
	HookTimeout  = "timeout"  // no answer within its timeoutMs
)

var hookBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Hooks is what any role that runs ai.hooks counts (pkg/hooks). Labels: the hook's configured
// name (bounded by the configuration; in-process hooks are "go"), the event and the outcome.
type Hooks struct {
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewHooks registers the hook families on r (once per process; nil r gives nil).
func NewHooks(r *Registry) *Hooks {
	return set(r, "hooks", func() (*Hooks, []prometheus.Collector) {
		m := &Hooks{
			calls: counterVec("hook_calls_total",
				"Hook calls (ai.hooks and in-process hooks), by hook name, event and outcome (continue, modify, block, error, timeout).",
				"hook", "event", "outcome"),
			duration: histogramVec("hook_duration_seconds", "How long a hook call took, answer or failure.", hookBuckets, "hook", "event"),
		}
		return m, []prometheus.Collector{m.calls, m.duration}
	})
}

// Call counts one hook call.
func (m *Hooks) Call(hook, event, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.calls.WithLabelValues(hook, event, outcome).Inc()
	m.duration.WithLabelValues(hook, event).Observe(d.Seconds())
}
