package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/hooks"
	"github.com/agentbus/agentbus/pkg/metrics"
)

// hookRunner returns the ai.hooks runner of one role, on the role's own bus connection (NATS
// hooks are requests from that role's user), plus the in-process hooks of reg (nil:
// hooks.Default(), filled by hooks.Register). It stops after the role (Stop runs steps in
// reverse), waiting a little for notifications under way.
func (p *Process) hookRunner(cfg *config.Config, reg *hooks.Registry, nc *nats.Conn, role string, log *slog.Logger) (*hooks.Runner, error) {
	r, err := hooks.New(cfg.AI.Hooks, hooks.Options{NC: nc, Registry: reg, Metrics: metrics.NewHooks(p.Metrics), Log: log.With("role", role), Role: role})
	if err != nil {
		return nil, err
	}
	p.onStop("hooks of "+role, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return r.Close(ctx)
	})
	return r, nil
}
