package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Ingest is what the ingest role counts.
type Ingest struct {
	messages *prometheus.CounterVec
	webhook  *prometheus.CounterVec
}

// NewIngest registers the ingest families on r (once per process; nil r gives nil).
func NewIngest(r *Registry) *Ingest {
	return set(r, "ingest", func() (*Ingest, []prometheus.Collector) {
		m := &Ingest{
			messages: counterVec("ingest_messages_total",
				"Inbound IM messages by platform, bot and outcome (accepted, duplicate, rejected, rate_limited, error).",
				"platform", "bot", "outcome"),
			webhook: counterVec("webhook_requests_total",
				"Requests to POST /webhook/{bot} by status code class (2xx, 4xx, 5xx).", "code"),
		}
		return m, []prometheus.Collector{m.messages, m.webhook}
	})
}

// Message counts one inbound message. bot must be a configured bot (never one named by the
// request alone: an unknown bot is counted by WebhookRequest only).
func (m *Ingest) Message(platform, bot, outcome string) {
	if m == nil {
		return
	}
	m.messages.WithLabelValues(platform, bot, outcome).Inc()
}

// WebhookRequest counts one webhook request by its status code.
func (m *Ingest) WebhookRequest(code int) {
	if m == nil {
		return
	}
	m.webhook.WithLabelValues(statusClass(code)).Inc()
}

// Turn is what the turn-worker role counts.
type Turn struct {
	turns     *prometheus.CounterVec
	duration  prometheus.Histogram
	owned     prometheus.Gauge
	takeovers prometheus.Counter
}

// NewTurn registers the turn-worker families on r (once per process; nil r gives nil).
func NewTurn(r *Registry) *Turn {
	return set(r, "turn", func() (*Turn, []prometheus.Collector) {
		m := &Turn{
			turns: counterVec("turns_total", "Finished turns by outcome (completed, failed, cancelled, timeout, iteration_limit).", "outcome"),
			duration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "turn_duration_seconds",
				Help: "From the inbound message's acceptance by ingest to the turn's reply committed.", Buckets: turnBuckets}),
			owned: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "sessions_owned",
				Help: "Sessions whose actor runs in this process (their lease is held here)."}),
			takeovers: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "lease_takeovers_total",
				Help: "Sessions claimed from another turn worker whose lease had ended (a dead or stopped replica)."}),
		}
		return m, []prometheus.Collector{m.turns, m.duration, m.owned, m.takeovers}
	})
}

// Finished counts one finished turn; d > 0 is observed as its duration.
func (m *Turn) Finished(outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.turns.WithLabelValues(outcome).Inc()
	if d > 0 {
		m.duration.Observe(d.Seconds())
	}
}

// Owned adds delta to the sessions owned (+1 when an actor starts, -1 when it ends).
func (m *Turn) Owned(delta int) {
	if m == nil {
		return
	}
	m.owned.Add(float64(delta))
}

// TakeOver counts one session taken over from another replica.
func (m *Turn) TakeOver() {
	if m == nil {
		return
	}
	m.takeovers.Inc()
}

// Tools is what the tool-worker role counts.
type Tools struct {
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewTools registers the tool-worker families on r (once per process; nil r gives nil).
func NewTools(r *Registry) *Tools {
	return set(r, "tools", func() (*Tools, []prometheus.Collector) {
		m := &Tools{
			calls: counterVec("tool_calls_total",
				"Tool calls executed by this tool worker, by tool and outcome (ok, error: the tool's result is an error, interrupted, ...).",
				"tool", "outcome"),
			duration: histogramVec("tool_duration_seconds", "How long a tool call's execution took.", toolBuckets, "tool"),
		}
		return m, []prometheus.Collector{m.calls, m.duration}
	})
}

// Call counts one executed tool call.
func (m *Tools) Call(tool, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.calls.WithLabelValues(tool, outcome).Inc()
	m.duration.WithLabelValues(tool).Observe(d.Seconds())
}

// Outcomes of a send (agentbus_egress_sends_total{outcome}).
const (
	SendSent      = "sent"      // the platform took the part
	SendDuplicate = "duplicate" // already delivered (a redelivery): nothing sent
	SendRetry     = "retry"     // a failure that will be tried again
	SendFailed    = "failed"    // given up: dead-lettered
)

// Egress is what the egress role counts.
type Egress struct {
	sends *prometheus.CounterVec
}

// NewEgress registers the egress families on r (once per process; nil r gives nil).
func NewEgress(r *Registry) *Egress {
	return set(r, "egress", func() (*Egress, []prometheus.Collector) {
		m := &Egress{sends: counterVec("egress_sends_total",
			"Outbound reply parts by platform and outcome (sent, duplicate, retry, failed).", "platform", "outcome")}
		return m, []prometheus.Collector{m.sends}
	})
}

// Send counts one delivery attempt's outcome.
func (m *Egress) Send(platform, outcome string) {
	if m == nil {
		return
	}
	m.sends.WithLabelValues(platform, outcome).Inc()
}

// DeadLetters counts dead-letter records published by any role of the process.
type DeadLetters struct {
	total *prometheus.CounterVec
}

// NewDeadLetters registers agentbus_dead_letters_total on r (once per process; nil r gives nil).
func NewDeadLetters(r *Registry) *DeadLetters {
	return set(r, "dead_letters", func() (*DeadLetters, []prometheus.Collector) {
		m := &DeadLetters{total: counterVec("dead_letters_total",
			"Dead-letter records published (dlq.<role>.<reason>), by role and reason.", "role", "reason")}
		return m, []prometheus.Collector{m.total}
	})
}

// Add counts one dead letter.
func (m *DeadLetters) Add(role, reason string) {
	if m == nil {
		return
	}
	m.total.WithLabelValues(role, reason).Inc()
}
