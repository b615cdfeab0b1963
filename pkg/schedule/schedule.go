package schedule

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil"
)

// Publisher is the part of jetstream.JetStream that schedules are written with.
type Publisher interface {
	PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// Schedules reads and writes the message schedules of SESSION_IN. Safe for concurrent use.
type Schedules struct {
	js     Publisher
	stream jetstream.Stream
}

// Open opens SESSION_IN (provisioned beforehand).
func Open(ctx context.Context, js jetstream.JetStream) (*Schedules, error) {
	s, err := natsutil.Stream(ctx, js, events.StreamSchedules)
	if err != nil {
		return nil, fmt.Errorf("schedule: open %s: %w", events.StreamSchedules, err)
	}
	return &Schedules{js: js, stream: s}, nil
}

// Pending is one schedule that has not fired for the last time yet.
type Pending struct {
	Session events.SessionKey
	ID      string
	// Pattern is the Nats-Schedule value.
	Pattern string
	// Next is when an "@at" schedule fires (zero for repeating ones: the server knows).
	Next  time.Time
	Event events.Scheduled
	Seq   uint64
}

// At is the pattern of a one-off schedule at t (second precision, UTC).
func At(t time.Time) string { return "@at " + t.UTC().Truncate(time.Second).Format(time.RFC3339) }

// Every is the pattern of a repeating schedule (at least one second).
func Every(d time.Duration) string { return "@every " + d.String() }

// CheckPattern validates a pattern the way the server will: "@at" in the future, "@every" of
// at least a second, or a cron expression of six fields (or @hourly, @daily, ...).
func CheckPattern(p string, now time.Time) error {
	switch {
	case strings.HasPrefix(p, "@at "):
		t, err := time.Parse(time.RFC3339, p[4:])
		if err != nil {
			return fmt.Errorf("%w: %q: %v", ErrBadSchedule, p, err)
		}
		if !t.After(now.Add(-time.Second)) {
			return fmt.Errorf("%w: %s is in the past", ErrBadSchedule, t.Format(time.RFC3339))
		}
	case strings.HasPrefix(p, "@every "):
		d, err := time.ParseDuration(p[7:])
		if err != nil || d < time.Second {
			return fmt.Errorf("%w: %q: want a duration of at least 1s", ErrBadSchedule, p)
		}
	case slices.Contains([]string{"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}, p):
	default:
		if n := len(strings.Fields(p)); n != 6 {
			return fmt.Errorf("%w: cron %q has %d fields, want 6 (second minute hour day month weekday)", ErrBadSchedule, p, n)
		}
	}
	return nil
}

// Put creates or replaces schedule id of session k: at pattern, ev is delivered into
// agent.in.<sk>. tz is an IANA time zone for cron patterns ("" = UTC). It returns the schedule
// it replaced, if any.
func (s *Schedules) Put(ctx context.Context, k events.SessionKey, id, pattern, tz string, ev events.Scheduled) (*Pending, error) {
	if err := CheckPattern(pattern, time.Now()); err != nil {
		return nil, err
	}
	old, err := s.Get(ctx, k, id)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	ev.ScheduleID, ev.Schedule = id, pattern
	if err := s.publish(ctx, k, id, pattern, tz, ev); err != nil {
		return nil, err
	}
	return old, nil
}

// Set creates or replaces schedule id of session k without reading the stream first (tool
// workers may publish schedules but not read the inbox stream).
func (s *Schedules) Set(ctx context.Context, k events.SessionKey, id, pattern, tz string, ev events.Scheduled) error {
	if err := CheckPattern(pattern, time.Now()); err != nil {
		return err
	}
	ev.ScheduleID, ev.Schedule = id, pattern
	return s.publish(ctx, k, id, pattern, tz, ev)
}

// Clear ends schedule id of session k, if there is one, without reading the stream first.
func (s *Schedules) Clear(ctx context.Context, k events.SessionKey, id string) error {
	return s.clear(ctx, k, id)
}

// Ensure makes schedule id of session k be pattern with ev's text, touching nothing when it
// already is (re-publishing an "@every" schedule would restart its period). Replicas that
// start together race through expected-last-subject-sequence: one writes, the others see its
// schedule. It reports whether it wrote.
func (s *Schedules) Ensure(ctx context.Context, k events.SessionKey, id, pattern, tz string, ev events.Scheduled) (bool, error) {
	if err := CheckPattern(pattern, time.Now()); err != nil {
		return false, err
	}
	ev.ScheduleID, ev.Schedule = id, pattern
	var last uint64
	old, err := s.Get(ctx, k, id)
	switch {
	case err == nil:
		if old.Pattern == pattern && old.Event.Text == ev.Text && old.Event.Kind == ev.Kind {
			return false, nil
		}
		last = old.Seq
	case !errors.Is(err, ErrNotFound):
		return false, err
	}
	err = s.publish(ctx, k, id, pattern, tz, ev, jetstream.WithExpectLastSequencePerSubject(last))
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
		return false, nil // another replica wrote it first
	}
	return err == nil, err
}

func (s *Schedules) publish(ctx context.Context, k events.SessionKey, id, pattern, tz string, ev events.Scheduled, opts ...jetstream.PublishOpt) error {
	m, err := events.NewMsg(events.ScheduleSubject(k, id), events.New(ev, events.WithSession(k.String())))
	if err != nil {
		return fmt.Errorf("schedule: %w", err)
	}
	m.Header.Set(jetstream.ScheduleHeader, pattern)
	m.Header.Set(jetstream.ScheduleTargetHeader, events.AgentInSubject(k))
	if tz != "" {
		m.Header.Set(jetstream.ScheduleTimeZoneHeader, tz)
	}
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	if _, err := s.js.PublishMsg(ctx, m, opts...); err != nil {
		return fmt.Errorf("schedule: put %s of %s: %w", id, k, err)
	}
	return nil
}

// Get returns schedule id of session k, or ErrNotFound.
func (s *Schedules) Get(ctx context.Context, k events.SessionKey, id string) (*Pending, error) {
	raw, err := s.stream.GetLastMsgForSubject(ctx, events.ScheduleSubject(k, id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("%w: schedule %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("schedule: get %s of %s: %w", id, k, err)
	}
	return decode(raw)
}

func decode(raw *jetstream.RawStreamMsg) (*Pending, error) {
	k, id, err := events.ParseScheduleSubject(raw.Subject)
	if err != nil {
		return nil, err
	}
	pattern := raw.Header.Get(jetstream.ScheduleHeader)
	if pattern == "" { // not a schedule (a purge marker): nothing pending
		return nil, fmt.Errorf("%w: schedule %s", ErrNotFound, id)
	}
	var ev events.Event[events.Scheduled]
	if err := events.Unmarshal(raw.Data, &ev); err != nil {
		return nil, fmt.Errorf("schedule: decode %s: %w", raw.Subject, err)
	}
	p := &Pending{Session: k, ID: id, Pattern: pattern, Event: ev.Data, Seq: raw.Sequence}
	if t, err := time.Parse(time.RFC3339, strings.TrimPrefix(pattern, "@at ")); err == nil && strings.HasPrefix(pattern, "@at ") {
		p.Next = t
	}
	return p, nil
}

// Cancel removes schedule id of session k; ErrNotFound when there is none.
func (s *Schedules) Cancel(ctx context.Context, k events.SessionKey, id string) (*Pending, error) {
	p, err := s.Get(ctx, k, id)
	if err != nil {
		return nil, err
	}
	// A message without Nats-Schedule on the subject ends the schedule; as a subject rollup it
	// also removes the schedule message, and its own TTL removes it in turn. This needs only
	// publish rights on schedule.> (no stream purge, which the roles do not have).
	if err := s.clear(ctx, k, id, jetstream.WithExpectLastSequencePerSubject(p.Seq)); err != nil {
		return nil, err
	}
	return p, nil
}

func (s *Schedules) clear(ctx context.Context, k events.SessionKey, id string, opts ...jetstream.PublishOpt) error {
	m := nats.NewMsg(events.ScheduleSubject(k, id))
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	m.Header.Set(jetstream.MsgTTLHeader, cancelMarkerTTL.String())
	m.Data = []byte("cancelled")
	if _, err := s.js.PublishMsg(ctx, m, opts...); err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
			return fmt.Errorf("%w: schedule %s changed meanwhile", ErrConflict, id)
		}
		return fmt.Errorf("schedule: cancel %s of %s: %w", id, k, err)
	}
	return nil
}

// cancelMarkerTTL is how long the marker Cancel leaves stays in the stream.
const cancelMarkerTTL = time.Minute

// List returns the pending schedules of session k, by id.
func (s *Schedules) List(ctx context.Context, k events.SessionKey) ([]Pending, error) {
	return s.list(ctx, events.PrefixSchedule+"."+k.Token()+".*")
}

// ListAll returns every pending schedule of every session.
func (s *Schedules) ListAll(ctx context.Context) ([]Pending, error) {
	return s.list(ctx, events.PrefixSchedule+".>")
}

func (s *Schedules) list(ctx context.Context, filter string) ([]Pending, error) {
	info, err := s.stream.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, fmt.Errorf("schedule: list %s: %w", filter, err)
	}
	subjects := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		subjects = append(subjects, subj)
	}
	slices.Sort(subjects)
	var out []Pending
	for _, subj := range subjects {
		raw, err := s.stream.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // fired or cancelled meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("schedule: read %s: %w", subj, err)
		}
		p, err := decode(raw)
		if err != nil {
			continue
		}
		out = append(out, *p)
	}
	return out, nil
}
