// Package metrics is agentbus's Prometheus instrumentation (github.com/prometheus/client_golang):
// one Registry per process, with the Go runtime and process collectors and
// agentbus_build_info, and one set of families per role, which the role registers when the
// process runs it (NewIngest, NewTurn, NewLLM, NewTools, NewEgress, ...). docs/observability.md
// lists every family with its meaning.
//
// # Labels
//
// Label values are bounded: platform, bot (configured bots only), provider alias, model id,
// tool name, outcome and reason constants, stream and durable consumer names. Never a session
// key, user id, message id or turn id: those belong in logs and traces.
//
// # Nil is off
//
// Every method of a role's set is safe on a nil receiver and then does nothing, so role
// packages and tests that do not care need no registry.
//
// # Cost
//
// Counting is an atomic add on a child that the set looks up once per label combination
// (the hot label sets are cached); nothing here allocates per event once warm.
package metrics

import (
	"errors"
	"net/http"
	"runtime"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentbus/agentbus/pkg/buildinfo"
)

// Namespace prefixes every family: agentbus_<thing>_<unit>.
const Namespace = "agentbus"

// Outcomes of ingest (agentbus_ingest_messages_total{outcome}).
const (
	IngestAccepted    = "accepted"
	IngestDuplicate   = "duplicate"
	IngestRejected    = "rejected"
	IngestRateLimited = "rate_limited"
	IngestError       = "error"
)

// Outcomes of a turn (agentbus_turns_total{outcome}).
const (
	TurnCompleted = "completed"
	TurnFailed    = "failed"
	TurnCancelled = "cancelled"
	TurnTimeout   = "timeout"
	// TurnIterationLimit: the model still asked for tools when the turn reached its limit of
	// model calls (ai.agent.maxIterations and the model's harness); the user was told so.
	TurnIterationLimit = "iteration_limit"
)

// Outcomes of a model request, a tool call and a send.
const (
	OutcomeOK      = "ok"
	OutcomeError   = "error"
	OutcomeAborted = "aborted"
)

// Registry holds one process's families. The zero value is not usable; use New. Safe for
// concurrent use.
type Registry struct {
	reg *prometheus.Registry

	mu   sync.Mutex
	sets map[string]any // role set by name, so a second replica in one process shares it
}

// New returns a registry with the Go runtime and process collectors and
// agentbus_build_info{version,revision,goversion} = 1.
func New() *Registry {
	r := &Registry{reg: prometheus.NewRegistry(), sets: map[string]any{}}
	r.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	bi := buildinfo.Get()
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "build_info",
		Help: "Always 1; the labels say which build of agentbus this process runs.",
	}, []string{"version", "revision", "goversion"})
	rev := bi.Revision
	if bi.Modified {
		rev += "-modified"
	}
	gov := bi.GoVersion
	if gov == "" {
		gov = runtime.Version()
	}
	info.WithLabelValues(bi.Version, rev, gov).Set(1)
	r.reg.MustRegister(info)
	return r
}

// Gatherer is the registry for promhttp and tests.
func (r *Registry) Gatherer() prometheus.Gatherer { return r.reg }

// Handler serves GET /metrics in the Prometheus text (or OpenMetrics, when asked) format.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{Registry: r.reg, EnableOpenMetrics: true})
}

// Register adds further collectors (a role's own, e.g. a gauge read at scrape time).
func (r *Registry) Register(cs ...prometheus.Collector) error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, r.reg.Register(c))
	}
	return errors.Join(errs...)
}

// set returns the set called name, creating and registering it with mk on first use: a
// process that runs two replicas of a role (AddTurnWorker) counts both in one set.
func set[T any](r *Registry, name string, mk func() (*T, []prometheus.Collector)) *T {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.sets[name]; ok {
		return s.(*T)
	}
	s, cs := mk()
	r.reg.MustRegister(cs...)
	r.sets[name] = s
	return s
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels)
}

func histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, Buckets: buckets}, labels)
}

// Buckets, in seconds. Turns and model calls take seconds to minutes; tools from milliseconds
// (echo, a file read) to minutes (a build in the sandbox).
var (
	turnBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320}
	llmBuckets  = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160}
	toolBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
)

// statusClass is "2xx".."5xx" for an HTTP status.
func statusClass(code int) string {
	switch {
	case code >= 500:
		return "5xx"
	case code >= 400:
		return "4xx"
	case code >= 300:
		return "3xx"
	case code >= 200:
		return "2xx"
	}
	return "1xx"
}
