package natsutil

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// AwaitAck waits for f's ack, at most until until: the async publisher has no ack timeout of
// its own, and an ack lost while a NATS node dies (or the publish itself, buffered in the
// connection) would otherwise leave the caller waiting forever. Callers waiting for several
// acks give them one deadline: a fresh wait per ack made n lost acks cost n waits.
func AwaitAck(ctx context.Context, f jetstream.PubAckFuture, until time.Time) error {
	select { // most acks are in by the time they are awaited: no timer for those
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return err
	default:
	}
	timer := time.NewTimer(time.Until(until))
	defer timer.Stop()
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return err
	case <-timer.C:
		return jetstream.ErrAsyncPublishTimeout
	case <-ctx.Done():
		return ctx.Err()
	}
}
