package store

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil"
)

// TurnLog is the turn event log on AGENT_EVENTS (agent.evt.<sk>.<kind>, the turn id in the
// event and its Agentbus-Turn header): what a worker resumes a crashed turn from, and what
// replay and audit read. It also reads events stored in the layout before issue 41
// (agent.evt.<sk>.<turn>.<kind>, events.AgentEvtTurnSubject) for as long as AGENT_EVENTS keeps
// them: both match the session's filter agent.evt.<sk>.>.
type TurnLog struct {
	js jetstream.JetStream
	st jetstream.Stream
}

// NewTurnLog binds the provisioned AGENT_EVENTS stream (it must allow direct gets).
func NewTurnLog(ctx context.Context, js jetstream.JetStream) (*TurnLog, error) {
	st, err := natsutil.Stream(ctx, js, streamAgentEvents)
	if err != nil {
		return nil, fmt.Errorf("open stream %s: %w", streamAgentEvents, err)
	}
	if !st.CachedInfo().Config.AllowDirect {
		return nil, fmt.Errorf("stream %s: AllowDirect is required to read turns", streamAgentEvents)
	}
	return &TurnLog{js: js, st: st}, nil
}

// TurnRecord is one stored turn event.
type TurnRecord struct {
	Seq     uint64
	Time    time.Time // when the server stored it
	Subject string
	Key     events.SessionKey
	Turn    string
	Kind    string // events.EvtKind*
	Event   events.Any
}

// Append stores ev (an evt.* event whose Meta.Turn is set) on agent.evt.<sk>.<kind> and
// returns its stream sequence. The Nats-Msg-Id is events.MsgID(ev) (the event id unless the
// payload names its own), so republishing the same event after a crash is stored once and
// returns the original sequence.
func (t *TurnLog) Append(ctx context.Context, sk events.SessionKey, ev events.Any) (uint64, error) {
	if err := sk.Validate(); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if ev == nil {
		return 0, fmt.Errorf("%w: nil event", ErrInvalid)
	}
	m := ev.EventMeta()
	typ := ev.EventPayload().EventType()
	kind := events.EvtKind(typ)
	switch {
	case kind == "":
		return 0, fmt.Errorf("%w: %s is not a turn event (want evt.*)", ErrInvalid, typ)
	case m.Turn == "":
		return 0, fmt.Errorf("%w: %s event %s has no turn id", ErrInvalid, typ, m.ID)
	}
	msg, err := events.NewMsg(events.AgentEvtSubject(sk, kind), ev)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	ack, err := t.js.PublishMsg(ctx, msg)
	if err != nil {
		return 0, fmt.Errorf("append %s of turn %s: %w", typ, m.Turn, err)
	}
	return ack.Sequence, nil
}

// decodeTurnRecords decodes one stored turn event. Records that carry others come back as the
// records they stand for, all with the same sequence, so readers see a turn the same way
// whatever was written together:
//
//   - a turn_started with steps: the turn_started, then one message_end record per step
//     (subject kind message_end, event id <turn>-m<index>);
//   - a turn_committed with started and/or a tail: the turn_started (event id
//     <turn>-started), one message_end per tail entry, then the commit itself.
func decodeTurnRecords(m *jetstream.RawStreamMsg) ([]TurnRecord, error) {
	k, turn, kind, err := events.ParseAgentEvtSubject(m.Subject)
	if err != nil {
		return nil, fmt.Errorf("record %d: %w", m.Sequence, err)
	}
	ev, err := events.DecodeMsg(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data})
	if err != nil {
		return nil, fmt.Errorf("record %d on %s: %w", m.Sequence, m.Subject, err)
	}
	if turn == "" {
		turn = ev.EventMeta().Turn
	}
	rec := TurnRecord{Seq: m.Sequence, Time: m.Time, Subject: m.Subject, Key: k, Turn: turn, Kind: kind, Event: ev}
	var (
		meta    events.Meta
		started *events.TurnStarted
		steps   []events.MessageEnd
	)
	switch e := ev.(type) {
	case *events.Event[events.TurnStarted]:
		if len(e.Data.Steps) == 0 {
			return []TurnRecord{rec}, nil
		}
		meta, steps = e.Meta, e.Data.Steps
		out := []TurnRecord{rec}
		return append(out, stepRecords(m, k, turn, meta, steps)...), nil
	case *events.Event[events.TurnCommitted]:
		if e.Data.Started == nil && len(e.Data.Tail) == 0 {
			return []TurnRecord{rec}, nil
		}
		meta, started, steps = e.Meta, e.Data.Started, e.Data.Tail
	default:
		return []TurnRecord{rec}, nil
	}
	out := make([]TurnRecord, 0, len(steps)+2)
	if started != nil {
		se := &events.Event[events.TurnStarted]{Meta: meta, Data: *started}
		se.Type, se.ID = events.TypeTurnStarted, turn+"-started"
		out = append(out, TurnRecord{Seq: m.Sequence, Time: m.Time, Subject: events.AgentEvtSubject(k, events.EvtKindTurnStarted),
			Key: k, Turn: turn, Kind: events.EvtKindTurnStarted, Event: se})
	}
	out = append(out, stepRecords(m, k, turn, meta, steps)...)
	return append(out, rec), nil
}

// stepRecords are the message_end records that entries carried by another record stand for.
func stepRecords(m *jetstream.RawStreamMsg, k events.SessionKey, turn string, meta events.Meta, steps []events.MessageEnd) []TurnRecord {
	out := make([]TurnRecord, 0, len(steps))
	subj := events.AgentEvtSubject(k, events.EvtKindMessageEnd)
	for _, me := range steps {
		e := &events.Event[events.MessageEnd]{Meta: meta, Data: me}
		e.Type, e.ID = events.TypeMessageEnd, turn+"-m"+strconv.Itoa(me.Index)
		out = append(out, TurnRecord{Seq: m.Sequence, Time: m.Time, Subject: subj, Key: k, Turn: turn, Kind: events.EvtKindMessageEnd, Event: e})
	}
	return out
}

// ReadTurn returns every event of one turn in order. fromSeq > 0 skips the stream before it
// (e.g. the turn's TurnStarted sequence, known from the session's open turns), which saves the
// server a scan on a long stream; without it the session's whole event log is read
// (ReadTurnSince bounds it by time instead).
func (t *TurnLog) ReadTurn(ctx context.Context, sk events.SessionKey, turn string, fromSeq uint64) ([]TurnRecord, error) {
	return t.readTurn(ctx, sk, turn, max(fromSeq, 1), time.Time{})
}

// ReadTurnSince is ReadTurn reading only the events stored at or after since (server time):
// pass a time safely before the turn started (its OpenTurn.StartedAt less a margin for clock
// skew between the worker and the server). A zero since reads the session's whole log.
func (t *TurnLog) ReadTurnSince(ctx context.Context, sk events.SessionKey, turn string, since time.Time) ([]TurnRecord, error) {
	if since.IsZero() {
		return t.readTurn(ctx, sk, turn, 1, time.Time{})
	}
	return t.readTurn(ctx, sk, turn, 0, since)
}

// readTurn scans the session's events (both layouts) from seq, or from the first stored at or
// after from when seq is 0, and keeps the turn's. Other turns' events are skipped by their
// Agentbus-Turn header (or legacy subject) before they are decoded.
func (t *TurnLog) readTurn(ctx context.Context, sk events.SessionKey, turn string, seq uint64, from time.Time) ([]TurnRecord, error) {
	if err := sk.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if turn == "" {
		return nil, fmt.Errorf("%w: empty turn id", ErrInvalid)
	}
	var out []TurnRecord
	var derr error
	err := Scan(ctx, t.js, streamAgentEvents, events.AgentEvtSessionFilter(sk), seq, from, func(m *jetstream.RawStreamMsg) bool {
		if !recordOfTurn(m, turn) {
			return true
		}
		rs, err := decodeTurnRecords(m)
		if err != nil {
			derr = err
			return false
		}
		for _, r := range rs {
			if r.Turn == turn {
				out = append(out, r)
			}
		}
		return true
	})
	if err == nil {
		err = derr
	}
	if err != nil {
		return nil, fmt.Errorf("read turn %s of %s: %w", turn, sk, err)
	}
	return out, nil
}

// recordOfTurn reports whether stored turn event m may belong to turn: its legacy subject
// names the turn, or its Agentbus-Turn header does (a message without the header is decoded
// to find out).
func recordOfTurn(m *jetstream.RawStreamMsg, turn string) bool {
	_, st, _, err := events.ParseAgentEvtSubject(m.Subject)
	if err == nil && st != "" {
		return st == turn
	}
	if h := m.Header.Get(events.HeaderTurn); h != "" {
		return h == turn
	}
	return true
}

// Committed reports whether turn has its turn_committed record: on
// agent.evt.<sk>.turn_committed among those stored at or after since (pass the time of the
// turn's context commit less a margin for clock differences between servers; zero reads them
// all), or on the turn's subject of the layout before issue 41 (a read the stream leader
// confirms).
func (t *TurnLog) Committed(ctx context.Context, sk events.SessionKey, turn string, since time.Time) (bool, error) {
	found := false
	var derr error
	err := Scan(ctx, t.js, streamAgentEvents, events.AgentEvtSubject(sk, events.EvtKindTurnCommitted), 0, since, func(m *jetstream.RawStreamMsg) bool {
		if h := m.Header.Get(events.HeaderTurn); h != "" {
			found = h == turn
			return !found
		}
		ev, err := events.DecodeMsg(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data})
		if err != nil {
			derr = fmt.Errorf("record %d on %s: %w", m.Sequence, m.Subject, err)
			return false
		}
		found = ev.EventMeta().Turn == turn
		return !found
	})
	if err == nil {
		err = derr
	}
	if err != nil || found {
		return found, err
	}
	_, err = natsutil.GetMsg(ctx, t.js, t.st, natsutil.MsgQuery{LastFor: events.AgentEvtTurnSubject(sk, turn, events.EvtKindTurnCommitted)})
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return false, nil
	}
	return false, err
}

// ReplayFrom says where a replay starts: at stream sequence Seq, or (Seq 0) at the first event
// stored at or after Time; both zero = from the beginning.
type ReplayFrom struct {
	Seq  uint64
	Time time.Time
}

// Replay yields every turn event of the session, in stream order, from the given point up to
// the end of the stream as it is while reading. It stops at the first error (yielded). A record
// that does not decode is yielded as an error too, so a replay never silently skips.
func (t *TurnLog) Replay(ctx context.Context, sk events.SessionKey, from ReplayFrom) iter.Seq2[TurnRecord, error] {
	return func(yield func(TurnRecord, error) bool) {
		if err := sk.Validate(); err != nil {
			yield(TurnRecord{}, fmt.Errorf("%w: %w", ErrInvalid, err))
			return
		}
		seq := from.Seq
		if seq == 0 && from.Time.IsZero() {
			seq = 1
		}
		stopped := false
		err := Scan(ctx, t.js, streamAgentEvents, events.AgentEvtSessionFilter(sk), seq, from.Time, func(m *jetstream.RawStreamMsg) bool {
			rs, err := decodeTurnRecords(m)
			if err != nil {
				yield(TurnRecord{}, err)
				stopped = true
				return false
			}
			for _, r := range rs {
				if !yield(r, nil) {
					stopped = true
					return false
				}
			}
			return true
		})
		if err != nil && !stopped {
			yield(TurnRecord{}, fmt.Errorf("replay %s: %w", sk, err))
		}
	}
}
