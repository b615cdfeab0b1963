package store

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// Stores bundles the JetStream repositories a role needs.
type Stores struct {
	Sessions *Sessions
	Leases   *Leases
	Context  *ContextLog
	Turns    *TurnLog
}

// Open binds every repository to the provisioned streams and buckets.
func Open(ctx context.Context, js jetstream.JetStream, bounds ContextBounds, opts ...ContextLogOption) (*Stores, error) {
	sessions, err := OpenSessions(ctx, js)
	if err != nil {
		return nil, err
	}
	leases, err := NewLeases(ctx, js)
	if err != nil {
		return nil, err
	}
	cl, err := NewContextLog(ctx, js, bounds, opts...)
	if err != nil {
		return nil, err
	}
	turns, err := NewTurnLog(ctx, js)
	if err != nil {
		return nil, err
	}
	return &Stores{Sessions: sessions, Leases: leases, Context: cl, Turns: turns}, nil
}
