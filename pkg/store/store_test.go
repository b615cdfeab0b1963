package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

func TestOpen(t *testing.T) {
	ctx := context.Background()
	st, err := Open(ctx, startJS(t), ContextBounds{MaxMessages: 50, MaxAge: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if st.Context.bounds != (ContextBounds{MaxMessages: 50, MaxAge: 24 * time.Hour}) {
		t.Fatalf("bounds %+v", st.Context.bounds)
	}
	// Without provisioning, Open says what is missing.
	empty := natstest.New(t, natstest.WithoutProvision())
	if _, err := Open(ctx, empty.JS, ContextBounds{}); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("unprovisioned: %v", err)
	}
}
