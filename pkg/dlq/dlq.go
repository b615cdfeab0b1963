// Package dlq reads and acts on dead letters: the messages a role gave up on, which every role
// publishes as an events.DeadLetter on dlq.<role>.<reason> into the DEAD_LETTERS stream.
//
// A Letter is one such record with its place in DEAD_LETTERS (ID, the stream sequence, in
// decimal) and what it belongs to: the session, turn and trace, and where the original message
// came from (its subject, stream, sequence and headers). List and Get read it; Retry publishes
// the original bytes and headers back to the subject they came from (so the role that gave up
// handles them again, once the cause is fixed) and removes the letter; Discard removes one;
// Purge removes many.
//
// Everything here reads and writes the bus only (an ordered consumer, message gets, publishes
// and message deletes on DEAD_LETTERS): it needs an identity that may delete messages (the
// admin user of `agentbus up`'s data directory, or a deployment's admin).
//
// # Caveats
//
// Not every letter can be retried. An ingest letter holds what a platform sent that could not
// be read as a message; it never was on the bus, so there is nowhere to put it back
// (ErrNotRetryable). An archiver letter's original is still in its stream and was handled by
// every other consumer; publishing it again would deliver it twice, so it is not retried
// either. A retried message gets a new Nats-Msg-Id ("dlq-retry.<letter id>.<original id>") so
// that the stream's dedupe window does not drop it as a copy of the original, while a second
// retry of the same letter within the window is dropped as a copy of the first.
package dlq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
)

// Errors.
var (
	// ErrNotFound: no dead letter has that id (never existed, retried, discarded or aged out).
	ErrNotFound = errors.New("dlq: no such dead letter")
	// ErrNotRetryable: the letter has no bus subject to go back to (see the package Caveats);
	// inspect it with Get and Discard it when done.
	ErrNotRetryable = errors.New("dlq: dead letter cannot be retried")
	// ErrBadID: an id is the decimal DEAD_LETTERS sequence List prints.
	ErrBadID = errors.New("dlq: bad dead letter id")
)

// Letter is one dead letter.
type Letter struct {
	// ID is the letter's DEAD_LETTERS sequence in decimal: what Get, Retry and Discard take.
	ID string `json:"id"`
	// Time is when the role gave up (the dead letter's event time; the stream's time when the
	// event carries none).
	Time time.Time `json:"time"`
	// Role gave up for Reason (the tokens of dlq.<role>.<reason>); Error is the full text.
	Role   string `json:"role"`
	Reason string `json:"reason"`
	Error  string `json:"error"`
	// Session is the session key (or session id "key#epoch") the original belongs to, when it
	// can be told: the letter's envelope, the original's Agentbus-Session header, or its subject.
	Session string `json:"session,omitempty"`
	Turn    string `json:"turn,omitempty"`
	Trace   string `json:"trace,omitempty"`
	// Subject, Stream and Seq locate the original message; Deliveries is how often it was tried.
	// For ingest letters Subject names the source ("telegram/bot1"), not a bus subject.
	Subject    string      `json:"subject"`
	Stream     string      `json:"stream,omitempty"`
	Seq        uint64      `json:"seq,omitempty"`
	Deliveries uint64      `json:"deliveries,omitempty"`
	Headers    nats.Header `json:"headers,omitempty"`
	// Body is the original message's bytes.
	Body []byte `json:"body,omitempty"`
}

// Retryable reports whether Retry can put the letter back, and if not, why.
func (l *Letter) Retryable() (bool, string) {
	switch {
	case l.Role == events.RoleIngest || l.Stream == "" && !busSubject(l.Subject):
		return false, "it came from the platform, not from the bus (nothing to put back; fix the sender or the adapter)"
	case l.Role == events.RoleArchiver:
		return false, "the original is still in " + l.Stream + " and every other consumer has it; retrying would deliver it twice"
	case !busSubject(l.Subject):
		return false, "its subject " + strconv.Quote(l.Subject) + " is not a bus subject"
	}
	return true, ""
}

func busSubject(s string) bool {
	return s != "" && !strings.ContainsAny(s, " \t*>/") && !strings.HasPrefix(s, ".") && !strings.HasSuffix(s, ".") &&
		!strings.Contains(s, "..") && strings.Contains(s, ".")
}

// Filter selects letters; zero fields match everything.
type Filter struct {
	Role   string // the <role> token, e.g. events.RoleEgress
	Reason string // the <reason> token, e.g. events.DLQPoison
	// Session matches a letter whose Session is this key or one of its session ids (key#epoch).
	Session string
	Since   time.Time // letters stored at or after Since
	// Limit keeps the newest Limit letters (0: all).
	Limit int
}

func (f Filter) subject() string {
	tok := func(s string) string {
		if s == "" {
			return "*"
		}
		return events.EncodeToken(s)
	}
	return events.PrefixDeadLetter + "." + tok(f.Role) + "." + tok(f.Reason)
}

func (f Filter) match(l *Letter) bool {
	if f.Session == "" {
		return true
	}
	return l.Session == f.Session || strings.HasPrefix(l.Session, f.Session+"#")
}

// Store reads and acts on DEAD_LETTERS. Safe for concurrent use.
type Store struct {
	js     jetstream.JetStream
	stream jetstream.Stream
}

// Open binds the provisioned DEAD_LETTERS stream.
func Open(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	st, err := js.Stream(ctx, events.StreamDeadLetters)
	if err != nil {
		return nil, fmt.Errorf("dlq: stream %s (are the streams provisioned?): %w", events.StreamDeadLetters, err)
	}
	return &Store{js: js, stream: st}, nil
}

// List returns the letters that match f, oldest first (with f.Limit, the newest f.Limit of
// them). It reads DEAD_LETTERS with an ordered consumer up to the last letter stored when it
// started; ctx bounds the whole read. A record that does not decode as a dead letter is listed
// with Reason and Error saying so, never skipped.
func (s *Store) List(ctx context.Context, f Filter) ([]Letter, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{f.subject()}}
	if !f.Since.IsZero() {
		cfg.DeliverPolicy = jetstream.DeliverByStartTimePolicy
		t := f.Since
		cfg.OptStartTime = &t
	}
	cons, err := s.js.OrderedConsumer(ctx, events.StreamDeadLetters, cfg)
	if err != nil {
		return nil, fmt.Errorf("dlq: read %s: %w", events.StreamDeadLetters, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("dlq: read %s: %w", events.StreamDeadLetters, err)
	}
	var out []Letter
	pending := info.NumPending
	for pending > 0 {
		batch, err := cons.Fetch(int(min(pending, 256)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, fmt.Errorf("dlq: read %s: %w", events.StreamDeadLetters, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			pending = md.NumPending
			l := decode(md.Sequence.Stream, m.Subject(), md.Timestamp, m.Data())
			if f.match(&l) {
				out = append(out, l)
				if f.Limit > 0 && len(out) > 2*f.Limit {
					out = append(out[:0], out[len(out)-f.Limit:]...)
				}
			}
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("dlq: read %s: %w", events.StreamDeadLetters, err)
		}
		if got == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			break // nothing came within the wait: the rest was removed (aged out, purged)
		}
	}
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[len(out)-f.Limit:]
	}
	return out, nil
}

// Get returns the letter with id.
func (s *Store) Get(ctx context.Context, id string) (*Letter, error) {
	seq, err := parseID(id)
	if err != nil {
		return nil, err
	}
	m, err := s.stream.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("dlq: get %s: %w", id, err)
	}
	l := decode(m.Sequence, m.Subject, m.Time, m.Data)
	return &l, nil
}

// Retried says where Retry put a letter back.
type Retried struct {
	Subject string
	Stream  string // the stream that stored it (from the publish ack)
	Seq     uint64 // its sequence there
}

// Retry publishes the letter's original body and headers to the subject it came from (into the
// stream it came from, when the letter names one) and then deletes the letter, so the role
// that gave up handles it again. JetStream control headers of the original (Nats-Expected-*,
// Nats-TTL, ...) are not copied; Nats-Msg-Id is renewed (package Caveats). It fails with
// ErrNotRetryable for a letter that has nowhere to go. If the publish succeeded but the delete
// failed, the error says so and Retried is still returned: do not retry again, Discard it.
func (s *Store) Retry(ctx context.Context, id string) (*Retried, error) {
	l, err := s.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if ok, why := l.Retryable(); !ok {
		return nil, fmt.Errorf("%w: %s: %s", ErrNotRetryable, id, why)
	}
	m := &nats.Msg{Subject: l.Subject, Data: l.Body, Header: nats.Header{}}
	for k, v := range l.Headers {
		if strings.HasPrefix(strings.ToLower(k), "nats-") {
			continue
		}
		m.Header[k] = append([]string(nil), v...)
	}
	m.Header.Set(nats.MsgIdHdr, "dlq-retry."+id+"."+l.Headers.Get(nats.MsgIdHdr))
	var opts []jetstream.PublishOpt
	if l.Stream != "" {
		opts = append(opts, jetstream.WithExpectStream(l.Stream))
	}
	ack, err := s.js.PublishMsg(ctx, m, opts...)
	if err != nil {
		return nil, fmt.Errorf("dlq: retry %s: publish to %s: %w", id, l.Subject, err)
	}
	r := &Retried{Subject: l.Subject, Stream: ack.Stream, Seq: ack.Sequence}
	if err := s.Discard(ctx, id); err != nil && !errors.Is(err, ErrNotFound) {
		return r, fmt.Errorf("dlq: retry %s: published to %s (seq %d) but the letter stays: %w", id, ack.Stream, ack.Sequence, err)
	}
	return r, nil
}

// Discard deletes the letter with id.
func (s *Store) Discard(ctx context.Context, id string) error {
	seq, err := parseID(id)
	if err != nil {
		return err
	}
	if err := s.stream.DeleteMsg(ctx, seq); err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) || errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) {
			return fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		return fmt.Errorf("dlq: discard %s: %w", id, err)
	}
	return nil
}

// Purge deletes every letter that matches f (f.Limit is ignored) and returns how many it
// deleted. Role and Reason alone purge by subject in one request; Session or Since delete the
// matching letters one by one.
func (s *Store) Purge(ctx context.Context, f Filter) (uint64, error) {
	if f.Session == "" && f.Since.IsZero() {
		info, err := s.stream.Info(ctx, jetstream.WithSubjectFilter(f.subject()))
		if err != nil {
			return 0, fmt.Errorf("dlq: purge: %w", err)
		}
		var n uint64
		for _, c := range info.State.Subjects {
			n += c
		}
		var opts []jetstream.StreamPurgeOpt
		if f.Role != "" || f.Reason != "" {
			opts = append(opts, jetstream.WithPurgeSubject(f.subject()))
		}
		if err := s.stream.Purge(ctx, opts...); err != nil {
			return 0, fmt.Errorf("dlq: purge: %w", err)
		}
		return n, nil
	}
	f.Limit = 0
	ls, err := s.List(ctx, f)
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, l := range ls {
		if err := s.Discard(ctx, l.ID); err != nil && !errors.Is(err, ErrNotFound) {
			return n, err
		}
		n++
	}
	return n, nil
}

func parseID(id string) (uint64, error) {
	seq, err := strconv.ParseUint(strings.TrimSpace(id), 10, 64)
	if err != nil || seq == 0 {
		return 0, fmt.Errorf("%w: %q (want the number dlq list prints)", ErrBadID, id)
	}
	return seq, nil
}

// decode reads one DEAD_LETTERS message. What does not decode is still a Letter, saying so.
func decode(seq uint64, subject string, stored time.Time, data []byte) Letter {
	l := Letter{ID: strconv.FormatUint(seq, 10), Time: stored, Subject: subject}
	l.Role, l.Reason, _ = events.ParseDeadLetterSubject(subject)
	ev, err := events.Decode(data)
	if err != nil {
		l.Error = "not a dead_letter event: " + err.Error()
		l.Body = data
		return l
	}
	e, ok := ev.(*events.Event[events.DeadLetter])
	if !ok {
		l.Error = "not a dead_letter event: type " + ev.EventMeta().Type
		l.Body = data
		return l
	}
	d := e.Data
	l.Role, l.Reason, l.Error = d.Role, d.Reason, d.Error
	l.Subject, l.Stream, l.Seq, l.Deliveries = d.Subject, d.Stream, d.Seq, d.Deliveries
	if len(d.Headers) > 0 {
		l.Headers = nats.Header(d.Headers)
	}
	l.Body = d.Body()
	if e.Time > 0 {
		l.Time = time.UnixMilli(e.Time)
	}
	l.Session, l.Turn, l.Trace = e.Session, e.Turn, e.Trace
	if l.Session == "" {
		l.Session = l.Headers.Get(events.HeaderSession)
	}
	if l.Turn == "" {
		l.Turn = l.Headers.Get(events.HeaderTurn)
	}
	if l.Trace == "" {
		l.Trace = l.Headers.Get(events.HeaderTrace)
	}
	if l.Session == "" {
		l.Session = sessionOfSubject(l.Subject)
	}
	return l
}

// sessionOfSubject tells the session from the original's subject, for the subjects that name one.
func sessionOfSubject(subj string) string {
	if k, err := events.ParseAgentInSubject(subj); err == nil {
		return k.String()
	}
	if k, err := events.ParseIMOutSubject(subj); err == nil {
		return k.String()
	}
	if k, _, err := events.ParseToolResultSubject(subj); err == nil {
		return k.String()
	}
	if k, err := events.ParseIMInSubject(subj); err == nil {
		return k.String()
	}
	return ""
}
