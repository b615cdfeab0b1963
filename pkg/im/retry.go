package im

import (
	"context"
	"errors"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
)

// Ingest hands m to sink, trying again after a failure up to attempts times in all, waiting
// step, 2×step, … between tries. An events.ErrInvalid answer is final (another try would not
// change it) and so is the end of ctx. It returns the last try's error: nil when m is on the
// bus, ErrInvalid for the caller to dead-letter, anything else for the caller to leave the
// platform's delivery unconfirmed.
func Ingest(ctx context.Context, sink Sink, m *events.IMMessage, attempts int, step time.Duration) error {
	var last error
	for attempt := range attempts {
		if attempt > 0 && !Sleep(ctx, time.Duration(attempt)*step) {
			break
		}
		if last = sink.Ingest(ctx, m); last == nil || errors.Is(last, events.ErrInvalid) {
			break
		}
	}
	return last
}

// Sleep waits d or until ctx ends, and reports whether the full d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
