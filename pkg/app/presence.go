package app

import (
	"context"
	"log/slog"

	"github.com/nats-io/nuid"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/presence"
)

// announceRoles puts an entry for each role this process runs (but the turn workers, which
// AddTurnWorker announces one by one) into KV presence, so that `agentbus status` and the
// console list it. A role without a bus id of its own gets "<role>-<nuid>".
func (p *Process) announceRoles(ctx context.Context, r Roles, log *slog.Logger) {
	for _, role := range []struct {
		on   bool
		name string
	}{{r.ToolWorker, events.RoleToolWorker}, {r.Egress, events.RoleEgress}, {r.Ingest, events.RoleIngest}} {
		if !role.on {
			continue
		}
		id := p.health.id(role.name)
		if id == "" {
			id = role.name + "-" + nuid.Next()
		}
		p.announce(ctx, role.name, id, log)
	}
}

// announce keeps role's presence entry until the process stops. A bus without the presence
// bucket (provisioned by an older version) only costs the entry: start-up goes on.
func (p *Process) announce(ctx context.Context, role, id string, log *slog.Logger) {
	o := presence.Options{Log: log}
	if role == events.RoleIngest {
		o.Adapters = p.health.adapters
	}
	h, err := presence.Announce(ctx, p.JS, presence.NewRecord(role, id), o)
	if err != nil {
		log.Warn("presence: not announced; agentbus status will not list this replica", "role", role, "id", id, "err", err)
		return
	}
	p.health.mu.Lock()
	if p.health.presence == nil {
		p.health.presence = map[string]func(){}
	}
	p.health.presence[role] = h.Refresh
	p.health.mu.Unlock()
	p.onStop("presence "+role+" "+id, h.Stop)
}
