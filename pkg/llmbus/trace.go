package llmbus

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
)

// TraceHeader is the W3C trace context header a request carries when the caller's ctx holds a
// span (agentbus's "chat <model>" span), so a traced service continues the same trace. It is
// the standard name, not agentbus's own bus header, because the service may be anyone's.
const TraceHeader = "traceparent"

var w3c = propagation.TraceContext{}

// headerCarrier lets the W3C propagator read and write NATS headers under the exact,
// lower-case names the standard uses (nats.Header.Set would canonicalize them).
type headerCarrier nats.Header

func (h headerCarrier) Get(k string) string {
	if v := h[k]; len(v) > 0 {
		return v[0]
	}
	return nats.Header(h).Get(k)
}

func (h headerCarrier) Set(k, v string) { h[k] = []string{v} }

func (h headerCarrier) Keys() []string {
	out := make([]string, 0, len(h))
	for k := range h {
		out = append(out, k)
	}
	return out
}

func injectTrace(ctx context.Context, h nats.Header) { w3c.Inject(ctx, headerCarrier(h)) }

func extractTrace(ctx context.Context, h nats.Header) context.Context {
	if h == nil {
		return ctx
	}
	return w3c.Extract(ctx, headerCarrier(h))
}
