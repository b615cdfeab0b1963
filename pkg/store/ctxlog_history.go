package store

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
)

// CtxRecord is one record of a session id's context log as History lists it.
type CtxRecord struct {
	Seq  uint64
	Time time.Time
	Turn string // the committing turn, when the record names one
	// Messages counts the messages of a messages record; Summary is set for a summary record.
	Messages int
	Summary  *Summary
	Leaf     *Leaf
	// First is the first message's text, Last the last assistant text of a messages record
	// (for listings such as /tree).
	First, Last string
	// Msgs are the record's messages (shared with nothing; the caller may keep them).
	Msgs []llm.Message
	// Closes: the record is a turn's commit that also closes the turn (HeaderCtxReplyParts):
	// no evt.turn_committed was written for it. TailFrom is then the index of the first of
	// Msgs the turn did not record in AGENT_EVENTS (HeaderCtxTailFrom).
	Closes   bool
	TailFrom int
	// Start is the turn's start a closing commit carries (HeaderCtxTurnStart), nil when the
	// turn recorded its turn_started in AGENT_EVENTS.
	Start *ClosingStart
}

// ClosingRecords are the turn records a closing commit (r.Closes) stands for, as the turn log
// of earlier versions held them: the turn_started when the commit carries it (r.Start, dated
// when the turn started), one message_end per tail message (from TailFrom on), then the
// turn_committed. They carry the commit's AGENT_CTX sequence and time (not an AGENT_EVENTS
// sequence). A record that does not close a turn stands for none.
func ClosingRecords(k events.SessionKey, sid events.SessionID, r CtxRecord) []TurnRecord {
	if !r.Closes || r.Turn == "" {
		return nil
	}
	meta := events.Meta{V: events.Version, Time: r.Time.UnixMilli(), Session: sid.String(), Turn: r.Turn}
	var tail []events.MessageEnd
	for i := min(max(r.TailFrom, 0), len(r.Msgs)); i < len(r.Msgs); i++ {
		tail = append(tail, events.MessageEnd{Index: i, Message: r.Msgs[i]})
	}
	tc := events.TurnCommitted{FirstSeq: r.Seq, LastSeq: r.Seq, Messages: len(r.Msgs)}
	for i := len(r.Msgs) - 1; i >= 0; i-- {
		if r.Msgs[i].Role == llm.RoleAssistant {
			tc.Usage, tc.StopReason = r.Msgs[i].Usage, r.Msgs[i].StopReason
			break
		}
	}
	fake := &jetstream.RawStreamMsg{Sequence: r.Seq, Time: r.Time}
	var out []TurnRecord
	if st := r.Start; st != nil {
		se := &events.Event[events.TurnStarted]{Meta: meta, Data: st.Started}
		se.Type, se.ID = events.TypeTurnStarted, r.Turn+"-started"
		se.Data.Input = r.Msgs[:min(max(st.Inputs, 0), len(r.Msgs))]
		at := r.Time
		if st.At > 0 {
			at, se.Time = time.UnixMilli(st.At), st.At
		}
		out = append(out, TurnRecord{Seq: r.Seq, Time: at, Subject: events.AgentEvtSubject(k, events.EvtKindTurnStarted),
			Key: k, Turn: r.Turn, Kind: events.EvtKindTurnStarted, Event: se})
	}
	out = append(out, stepRecords(fake, k, r.Turn, meta, tail)...)
	ce := &events.Event[events.TurnCommitted]{Meta: meta, Data: tc}
	ce.Type, ce.ID = events.TypeTurnCommitted, r.Turn+"-committed"
	return append(out, TurnRecord{Seq: r.Seq, Time: r.Time, Subject: events.AgentEvtSubject(k, events.EvtKindTurnCommitted),
		Key: k, Turn: r.Turn, Kind: events.EvtKindTurnCommitted, Event: ce})
}

// History yields every record of the session id's context log from the first, in order: what
// replay and audits show (each compaction where it happened). It reads the whole log, which
// LoadContext never does; it is for tools, not for turns.
func (l *ContextLog) History(ctx context.Context, id events.SessionID) iter.Seq2[CtxRecord, error] {
	return func(yield func(CtxRecord, error) bool) {
		if err := checkID(id); err != nil {
			yield(CtxRecord{}, err)
			return
		}
		var derr error
		stopped := false
		err := Scan(ctx, l.js, streamAgentCtx, events.AgentCtxSubject(id), 1, time.Time{}, func(m *jetstream.RawStreamMsg) bool {
			rec, err := ctxRecordOf(m)
			if err != nil {
				derr = err
				return false
			}
			if !yield(rec, nil) {
				stopped = true
				return false
			}
			return true
		})
		if stopped {
			return
		}
		if err == nil {
			err = derr
		}
		if err != nil {
			yield(CtxRecord{}, fmt.Errorf("context history %s: %w", id, err))
		}
	}
}

// ctxRecordOf is stored context record m as History lists it.
func ctxRecordOf(m *jetstream.RawStreamMsg) (CtxRecord, error) {
	r, err := decodeRec(m)
	if err != nil {
		return CtxRecord{}, err
	}
	rec := CtxRecord{Seq: m.Sequence, Time: m.Time, Turn: m.Header.Get(events.HeaderTurn), Messages: len(r.msgs), Summary: r.summary, Leaf: r.leaf}
	if mark := markOf(m); mark.Closes {
		rec.Closes, rec.TailFrom = true, int(hdrUint(m.Header, HeaderCtxTailFrom))
		if h := m.Header.Get(HeaderCtxTurnStart); h != "" {
			var st ClosingStart
			if err := json.Unmarshal([]byte(h), &st); err != nil {
				return CtxRecord{}, fmt.Errorf("record %d: %s: %w", m.Sequence, HeaderCtxTurnStart, err)
			}
			rec.Start = &st
		}
	}
	rec.Msgs = r.msgs
	if len(r.msgs) > 0 {
		rec.First = r.msgs[0].TextContent()
		for i := len(r.msgs) - 1; i >= 0; i-- {
			if r.msgs[i].Role == llm.RoleAssistant {
				rec.Last = r.msgs[i].TextContent()
				break
			}
		}
	}
	return rec, nil
}
