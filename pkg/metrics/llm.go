package metrics

import (
	"context"
	"iter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentbus/agentbus/pkg/llm"
)

// LLM counts model requests: what the turn worker (and whatever else calls models in the
// process: compaction, memory flush) asked of which provider alias and model.
type LLM struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	tokens   *prometheus.CounterVec
	cost     *prometheus.CounterVec
	retries  *prometheus.CounterVec
}

// NewLLM registers the model families on r (once per process; nil r gives nil).
func NewLLM(r *Registry) *LLM {
	return set(r, "llm", func() (*LLM, []prometheus.Collector) {
		m := &LLM{
			requests: counterVec("llm_requests_total",
				"Model requests by provider alias, model and outcome (ok, error, aborted); each fallback attempt is one request.",
				"provider", "model", "outcome"),
			duration: histogramVec("llm_request_duration_seconds",
				"From a model request's start to its last event (the whole streamed answer, the provider's own retries included).",
				llmBuckets, "provider", "model"),
			tokens: counterVec("llm_tokens_total",
				"Tokens by provider alias, model and kind (input, output, cache_read, cache_write), as the provider reported them.",
				"provider", "model", "kind"),
			cost: counterVec("llm_cost_usd_total",
				"Estimated cost in US dollars from the model's configured prices (0 for a model without prices).",
				"provider", "model"),
			retries: counterVec("llm_retries_total",
				"Model requests sent again by the provider after a failed attempt, by provider alias, model and reason (rate_limited: 429, server_error: 5xx, transport: no response).",
				"provider", "model", "reason"),
		}
		return m, []prometheus.Collector{m.requests, m.duration, m.tokens, m.cost, m.retries}
	})
}

// StreamFunc is the shape of llm.Stream.
type StreamFunc = func(ctx context.Context, model *llm.Model, c *llm.Context, opts *llm.StreamOptions) iter.Seq[llm.Event]

// Wrap returns next with every request counted when its stream ends (done, error, or the
// caller stopping early, which counts as aborted), and every retry the provider makes of it
// (llm.WithRetryHook) counted in agentbus_llm_retries_total. Wrap the innermost stream
// function to count each fallback attempt. A nil m returns next unchanged.
func (m *LLM) Wrap(next StreamFunc) StreamFunc {
	if m == nil {
		return next
	}
	return func(ctx context.Context, model *llm.Model, c *llm.Context, opts *llm.StreamOptions) iter.Seq[llm.Event] {
		if model != nil {
			provider, id := model.Provider, model.ID
			ctx = llm.WithRetryHook(ctx, func(r llm.Retry) { m.Retried(provider, id, r.Reason) })
		}
		return func(yield func(llm.Event) bool) {
			start := time.Now()
			var final *llm.Message
			defer func() { m.Request(model, final, time.Since(start)) }()
			for ev := range next(ctx, model, c, opts) {
				if ev.Type == llm.EventDone || ev.Type == llm.EventError {
					final = ev.Message
				}
				if !yield(ev) {
					return
				}
			}
		}
	}
}

// Request counts one finished request to model whose final message is msg (nil: the stream
// ended without one, counted as aborted).
func (m *LLM) Request(model *llm.Model, msg *llm.Message, d time.Duration) {
	if m == nil {
		return
	}
	provider, id := "", ""
	if model != nil {
		provider, id = model.Provider, model.ID
	}
	outcome := OutcomeAborted
	if msg != nil {
		if msg.Provider != "" {
			provider = msg.Provider
		}
		if msg.Model != "" {
			id = msg.Model
		}
		switch msg.StopReason {
		case llm.StopReasonError:
			outcome = OutcomeError
		case llm.StopReasonAborted:
		default:
			outcome = OutcomeOK
		}
	}
	m.requests.WithLabelValues(provider, id, outcome).Inc()
	m.duration.WithLabelValues(provider, id).Observe(d.Seconds())
	if msg == nil || msg.Usage == nil {
		return
	}
	u := msg.Usage
	for _, k := range [...]struct {
		kind string
		n    int
	}{{"input", u.Input}, {"output", u.Output}, {"cache_read", u.CacheRead}, {"cache_write", u.CacheWrite}} {
		if k.n > 0 {
			m.tokens.WithLabelValues(provider, id, k.kind).Add(float64(k.n))
		}
	}
	// Always touched, so the series exists (at 0) for a model without prices.
	m.cost.WithLabelValues(provider, id).Add(max(u.Cost.Total, 0))
}

// Retried counts one retry of a request to model id of provider alias provider (reason:
// llm.RetryRateLimited, llm.RetryServerError or llm.RetryTransport).
func (m *LLM) Retried(provider, id, reason string) {
	if m == nil {
		return
	}
	m.retries.WithLabelValues(provider, id, reason).Inc()
}
