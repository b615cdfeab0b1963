package app

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentbus/agentbus/pkg/tracing"
)

// tracer returns role's tracer provider, configured from the OTEL_* environment (pkg/tracing):
// the no-op provider when no OTLP endpoint is set. Each role of a process has its own, so in
// `agentbus up` a trace shows the roles as the services agentbus-ingest, agentbus-turn-worker,
// ... as it does when they run as separate processes. Its flush is registered before the
// role's stop, so it runs after the role stopped (stops run in reverse order).
func (p *Process) tracer(ctx context.Context, role string) (trace.TracerProvider, error) {
	s, err := tracing.FromEnv()
	if err != nil {
		return nil, err
	}
	tp, err := tracing.New(ctx, s, role)
	if err != nil {
		return nil, err
	}
	if tp.Enabled() {
		p.onStop("traces of "+role, func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, tracing.ShutdownTimeout)
			defer cancel()
			return tp.Shutdown(ctx)
		})
	}
	return tp, nil
}
