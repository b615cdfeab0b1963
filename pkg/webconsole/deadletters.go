package webconsole

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
)

// DeadLetter is one record of DEAD_LETTERS as /deadletters lists it.
type DeadLetter struct {
	Seq        uint64
	Time       time.Time
	Role       string
	Reason     string
	Error      string
	Subject    string // where the original message was
	Stream     string
	Session    string // the session it belongs to, when the record names one
	Deliveries uint64
	Body       string // the original body (clipped)
}

// DeadLetters is the part of a dead-letter store the console uses: list, retry (put the
// original message back where it came from) and discard. Implementations are safe for
// concurrent use; every method reads or writes the bus, never local state.
type DeadLetters interface {
	List(ctx context.Context, limit int) ([]DeadLetter, error)
	Retry(ctx context.Context, seq uint64) error
	Discard(ctx context.Context, seq uint64) error
}

// ErrNoDeadLetter: no dead letter has that sequence (already retried or discarded).
var ErrNoDeadLetter = errors.New("webconsole: no such dead letter")

// streamDeadLetters reads DEAD_LETTERS directly.
type streamDeadLetters struct{ js jetstream.JetStream }

// List returns the newest limit dead letters, newest first.
func (s streamDeadLetters) List(ctx context.Context, limit int) ([]DeadLetter, error) {
	st, err := s.js.Stream(ctx, events.StreamDeadLetters)
	if err != nil {
		return nil, fmt.Errorf("webconsole: open %s: %w", events.StreamDeadLetters, err)
	}
	state := st.CachedInfo().State
	from := state.FirstSeq
	if state.LastSeq >= uint64(limit) && state.LastSeq-uint64(limit)+1 > from {
		from = state.LastSeq - uint64(limit) + 1
	}
	var out []DeadLetter
	err = scan(ctx, s.js, events.StreamDeadLetters, events.PrefixDeadLetter+".>", max(from, 1), time.Time{}, func(m *jetstream.RawStreamMsg) bool {
		out = append(out, toDeadLetter(m))
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Seq > out[j].Seq })
	return out, err
}

func toDeadLetter(m *jetstream.RawStreamMsg) DeadLetter {
	d := DeadLetter{Seq: m.Sequence, Time: m.Time}
	dl, ok := decodeDeadLetter(m)
	if !ok {
		d.Error, d.Body = "undecodable dead letter", clip(string(m.Data), 2000)
		if role, reason, err := events.ParseDeadLetterSubject(m.Subject); err == nil {
			d.Role, d.Reason = role, reason
		}
		return d
	}
	d.Role, d.Reason, d.Error, d.Subject, d.Stream, d.Deliveries = dl.Role, dl.Reason, dl.Error, dl.Subject, dl.Stream, dl.Deliveries
	d.Body = clip(string(dl.Body()), 2000)
	if v := dl.Headers[events.HeaderSession]; len(v) > 0 {
		d.Session = v[0]
	}
	if d.Session == "" {
		d.Session = m.Header.Get(events.HeaderSession)
	}
	if sid, err := events.ParseSessionID(d.Session); err == nil {
		d.Session = sid.Key.String()
	}
	return d
}

func (s streamDeadLetters) get(ctx context.Context, seq uint64) (events.DeadLetter, error) {
	st, err := s.js.Stream(ctx, events.StreamDeadLetters)
	if err != nil {
		return events.DeadLetter{}, err
	}
	m, err := st.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return events.DeadLetter{}, fmt.Errorf("%w: %d", ErrNoDeadLetter, seq)
	}
	if err != nil {
		return events.DeadLetter{}, err
	}
	dl, ok := decodeDeadLetter(m)
	if !ok {
		return dl, fmt.Errorf("webconsole: dead letter %d does not decode", seq)
	}
	return dl, nil
}

// Retry publishes the original body and headers back to the original subject (without its
// Nats-Msg-Id, which the stream's duplicate window would drop; consumers keep their own
// at-most-once records, e.g. egress's receipts), then removes the dead letter.
func (s streamDeadLetters) Retry(ctx context.Context, seq uint64) error {
	dl, err := s.get(ctx, seq)
	if err != nil {
		return err
	}
	if dl.Subject == "" || strings.HasPrefix(dl.Subject, events.PrefixDeadLetter+".") {
		return fmt.Errorf("webconsole: dead letter %d names no subject to retry on", seq)
	}
	msg := &nats.Msg{Subject: dl.Subject, Data: dl.Body(), Header: nats.Header{}}
	for k, v := range dl.Headers {
		if k == nats.MsgIdHdr || strings.HasPrefix(k, "Nats-Expected") {
			continue
		}
		msg.Header[k] = v
	}
	if _, err := s.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("webconsole: retry dead letter %d on %s: %w", seq, dl.Subject, err)
	}
	return s.Discard(ctx, seq)
}

// Discard removes the dead letter.
func (s streamDeadLetters) Discard(ctx context.Context, seq uint64) error {
	st, err := s.js.Stream(ctx, events.StreamDeadLetters)
	if err != nil {
		return err
	}
	if _, err := st.GetMsg(ctx, seq); errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("%w: %d", ErrNoDeadLetter, seq)
	}
	if err := st.DeleteMsg(ctx, seq); err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) || strings.Contains(err.Error(), "not found") {
			return fmt.Errorf("%w: %d", ErrNoDeadLetter, seq)
		}
		return fmt.Errorf("webconsole: discard dead letter %d: %w", seq, err)
	}
	return nil
}
