package natsutil

import (
	"context"
	"sync"
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
	timer := getTimer(time.Until(until))
	defer putTimer(timer)
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

// timers holds stopped timers for AwaitAck: most of a turn's acks are awaited while in flight,
// and a timer is an allocation each (two with its channel). Since Go 1.23 a timer's channel is
// unbuffered and Stop or Reset discard a pending tick, so a pooled timer never delivers a stale
// one to its next user.
var timers sync.Pool

func getTimer(d time.Duration) *time.Timer {
	if t, ok := timers.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

func putTimer(t *time.Timer) {
	t.Stop()
	timers.Put(t)
}
