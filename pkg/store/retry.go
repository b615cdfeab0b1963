package store

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
)

// RetryTransient runs op until it succeeds, ctx ends, or about 20s of attempts have failed:
// a read that timed out while the cluster elects a leader or the machine is overloaded is
// worth another try before a turn is failed for it. Invalid input, a stale writer, and a "not
// found" (the reads retried here confirm it with the stream leader), are not retried.
func RetryTransient(ctx context.Context, op func() error) error {
	wait := 100 * time.Millisecond
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := op()
		if err == nil || errors.Is(err, ErrInvalid) || errors.Is(err, ErrStaleWriter) ||
			errors.Is(err, ErrTooLarge) || errors.Is(err, events.ErrInvalid) ||
			errors.Is(err, jetstream.ErrMsgNotFound) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}
