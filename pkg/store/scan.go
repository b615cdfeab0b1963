package store

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// scanPage is how many messages one batched direct get asks for (a var so tests can page).
var scanPage = 512

// Scan calls fn for every message of stream matching filter (wildcards allowed), in sequence
// order, starting at seq (or, when seq is 0, at the first message stored at or after from; with
// both zero, at the first message), until fn returns false or the stream has no more. It pages
// with batched direct gets (one request per scanPage messages), so it needs no consumer, leaves
// nothing behind on the server and puts no load on the roles' consumers (the console and
// replay read streams with it).
func Scan(ctx context.Context, js jetstream.JetStream, stream, filter string, seq uint64, from time.Time, fn func(*jetstream.RawStreamMsg) bool) error {
	if seq == 0 && from.IsZero() {
		seq = 1
	}
	for {
		opts := []jetstreamext.GetBatchOpt{jetstreamext.GetBatchSubject(filter)}
		if seq > 0 {
			opts = append(opts, jetstreamext.GetBatchSeq(seq))
		} else {
			opts = append(opts, jetstreamext.GetBatchStartTime(from))
		}
		it, err := jetstreamext.GetBatch(ctx, js, stream, scanPage, opts...)
		if err != nil {
			return err
		}
		n := 0
		for m, err := range it {
			if errors.Is(err, jetstreamext.ErrNoMessages) {
				break
			}
			if err != nil {
				return err
			}
			n++
			seq = m.Sequence + 1
			if !fn(m) {
				return nil
			}
		}
		if n < scanPage {
			return ctx.Err()
		}
	}
}
