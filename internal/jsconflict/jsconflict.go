// Package jsconflict recognises a lost compare-and-set on JetStream, the one check every
// optimistic writer in agentbus retries on.
//
// The server reports such a loss as "wrong last sequence", with error code 10071 on a
// single-replica stream and 10164 on a replicated (R>1) one. nats.go maps both codes for KV
// writes (Create wraps jetstream.ErrKeyExists, Update/Delete/Purge wrap
// jetstream.ErrKeyRevisionMismatch) but has no sentinel for a stream publish with an
// expected last (subject) sequence, so the codes are matched here, once.
package jsconflict

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"
)

// Is reports whether err is a lost compare-and-set: a KV Create of a key that exists, a KV
// Update, Delete or Purge at a stale revision, or a publish whose expected last (subject)
// sequence did not match, on single-server and replicated streams alike. The writer should
// reload and retry (or, when it holds a lease or a fence, stop acting).
func Is(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// ErrTooManyConflicts is Retry's error when every attempt lost its compare-and-set for the
// whole RetryBudget.
var ErrTooManyConflicts = errors.New("too many concurrent updates")

// RetryBudget is how long Retry keeps trying after conflicts.
const RetryBudget = 10 * time.Second

// Retry runs attempt (a read, then a compare-and-set write) until it returns nil or an error
// that is not a lost compare-and-set (returned as it is), backing off with jitter between
// conflicts (5 ms first, at most 250 ms) for up to RetryBudget; then it fails with
// ErrTooManyConflicts, wrapping the last conflict. An immediate retry is not enough: with
// several writers each retry mostly meets another writer's newer revision, and on a cluster the
// read may come from a replica that has not yet seen the write that won, so a tight loop of ten
// tries ran out under load (six concurrent approval rules on a 3-node cluster).
func Retry(ctx context.Context, attempt func() error) error {
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(5*time.Millisecond),
		backoff.WithMaxInterval(250*time.Millisecond), backoff.WithMaxElapsedTime(RetryBudget))
	for {
		err := attempt()
		if err == nil || !Is(err) {
			return err
		}
		d := b.NextBackOff()
		if d == backoff.Stop {
			return fmt.Errorf("%w: %w", ErrTooManyConflicts, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
	}
}
