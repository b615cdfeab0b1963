package webconsole

import (
	"context"
	"strconv"
	"time"

	"github.com/agentbus/agentbus/pkg/dlq"
	"github.com/agentbus/agentbus/pkg/events"
)

// DeadLetter is one record of DEAD_LETTERS as /deadletters lists it.
type DeadLetter struct {
	ID         string
	Seq        uint64
	Time       time.Time
	Role       string
	Reason     string
	Error      string
	Subject    string // where the original message was
	Stream     string
	Session    string // the session key it belongs to, when the record names one
	Turn       string
	Deliveries uint64
	Body       string // the original body (clipped)
	// Retryable says whether Retry can put it back; Why says why not.
	Retryable bool
	Why       string
}

// DeadLetters is the part of a dead-letter store the console uses: list, retry (put the
// original message back where it came from) and discard, by the letter's id. Implementations
// are safe for concurrent use and read and write the bus only. Errors matching dlq.ErrNotFound,
// dlq.ErrNotRetryable and dlq.ErrBadID are shown to the operator as such.
type DeadLetters interface {
	List(ctx context.Context, limit int) ([]DeadLetter, error)
	Retry(ctx context.Context, id string) error
	Discard(ctx context.Context, id string) error
}

// storeDeadLetters is DeadLetters on pkg/dlq: the same operations as `agentbus dlq`.
type storeDeadLetters struct{ s *dlq.Store }

// List returns the newest limit letters, newest first.
func (d storeDeadLetters) List(ctx context.Context, limit int) ([]DeadLetter, error) {
	ls, err := d.s.List(ctx, dlq.Filter{Limit: limit})
	if err != nil {
		return nil, err
	}
	out := make([]DeadLetter, 0, len(ls))
	for i := len(ls) - 1; i >= 0; i-- {
		l := &ls[i]
		seq, _ := strconv.ParseUint(l.ID, 10, 64)
		ok, why := l.Retryable()
		dl := DeadLetter{ID: l.ID, Seq: seq, Time: l.Time, Role: l.Role, Reason: l.Reason, Error: l.Error, Subject: l.Subject,
			Stream: l.Stream, Session: l.Session, Turn: l.Turn, Deliveries: l.Deliveries, Body: clip(string(l.Body), 2000),
			Retryable: ok, Why: why}
		if sid, err := events.ParseSessionID(dl.Session); err == nil {
			dl.Session = sid.Key.String()
		}
		out = append(out, dl)
	}
	return out, nil
}

func (d storeDeadLetters) Retry(ctx context.Context, id string) error {
	_, err := d.s.Retry(ctx, id)
	return err
}

func (d storeDeadLetters) Discard(ctx context.Context, id string) error { return d.s.Discard(ctx, id) }
