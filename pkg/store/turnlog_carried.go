package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil"
)

// Carried steps (issue 40). A turn may leave the record of a step that asks for tools out of
// AGENT_EVENTS and put it into each of the step's tool call requests instead
// (events.ToolCall.Step); the tool worker copies it into the call's result
// (events.ToolResult.Step). The step is then stored at every moment: in the queued request
// until its result is stored (a tool worker acks the request only after the result's PubAck),
// then in the result. A turn carries every record it has not written to AGENT_EVENTS on each
// step's requests (its start and all its carried steps so far), so any one request or result
// of its latest step holds all of them. ReadCarried finds them again for a resume.

// EncodeStep is the ToolCall.Step of records built by TurnEventMsg (their Data): a JSON array
// of the events.
func EncodeStep(records ...*nats.Msg) json.RawMessage {
	n := 2
	for _, m := range records {
		n += len(m.Data) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, m := range records {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, bytes.TrimSpace(m.Data)...)
	}
	return append(b, ']')
}

// DecodeStep is the turn records a ToolCall.Step or ToolResult.Step stands for (as
// decodeTurnRecords reads them from AGENT_EVENTS), dated seq and at (the request's or result's
// stream sequence and time: not AGENT_EVENTS sequences).
func DecodeStep(k events.SessionKey, step json.RawMessage, seq uint64, at time.Time) ([]TurnRecord, error) {
	var raws []json.RawMessage
	if err := json.Unmarshal(step, &raws); err != nil {
		return nil, fmt.Errorf("%w: carried step: %w", ErrInvalid, err)
	}
	var out []TurnRecord
	for _, raw := range raws {
		ev, err := events.Decode(raw)
		if err != nil {
			return nil, fmt.Errorf("carried step: %w", err)
		}
		kind := events.EvtKind(ev.EventPayload().EventType())
		if kind == "" {
			return nil, fmt.Errorf("%w: carried step holds %s, not a turn event", ErrInvalid, ev.EventPayload().EventType())
		}
		rs, err := decodeTurnRecords(&jetstream.RawStreamMsg{Subject: events.AgentEvtSubject(k, kind), Sequence: seq, Time: at,
			Header: nats.Header{}, Data: raw})
		if err != nil {
			return nil, err
		}
		out = append(out, rs...)
	}
	return out, nil
}

// ReadCarried returns the records turn's steps carry on its tool call requests still queued in
// TOOL_CALLS (calls) and on its results in TOOL_RESULTS (results) stored at or after since
// (zero: all). Both reads reflect every write the streams acknowledged (the leader's view), and
// the queue is read first: a request that leaves the queue after that read had its result
// stored before it left, and the read of the results that follows finds it. Records of a step
// carried by several requests or results come back once per copy; callers merge by index.
func (t *TurnLog) ReadCarried(ctx context.Context, calls, results jetstream.Stream, k events.SessionKey, turn string, since time.Time) ([]TurnRecord, error) {
	if err := k.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	var out []TurnRecord
	var derr error
	keep := func(m *jetstream.RawStreamMsg, step json.RawMessage) {
		if len(step) == 0 || derr != nil {
			return
		}
		rs, err := DecodeStep(k, step, m.Sequence, m.Time)
		if err != nil {
			derr = err
			return
		}
		for _, r := range rs {
			if r.Turn == turn {
				out = append(out, r)
			}
		}
	}
	// The queue: every tool's requests (their subjects name the tool, not the session), kept
	// when the request names the turn and the session.
	err := scanQueue(ctx, t.js, calls, func(m *jetstream.RawStreamMsg) {
		if m.Header.Get(events.HeaderTurn) != turn || !bytes.Contains(m.Data, []byte(`"step"`)) {
			return
		}
		var ev events.Event[events.ToolCall]
		if events.UnmarshalMsg(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}, &ev) != nil || ev.Data.SessionKey != k {
			return
		}
		keep(m, ev.Data.Step)
	})
	if err != nil {
		return nil, fmt.Errorf("read carried steps of %s: queued requests: %w", turn, err)
	}
	prefix := turn + "-"
	if since.IsZero() {
		since = time.Unix(0, 1)
	}
	_, err = FindOnSubject(ctx, t.js, results, events.StreamToolResults, events.ToolResultSubject(k), since, func(m *jetstream.RawStreamMsg) bool {
		if !strings.HasPrefix(ToolResultCallID(m.Header, m.Data), prefix) || !bytes.Contains(m.Data, []byte(`"step"`)) {
			return false
		}
		var ev events.Event[events.ToolResult]
		if events.UnmarshalMsg(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}, &ev) == nil {
			keep(m, ev.Data.Step)
		}
		return false // read them all
	})
	if err == nil {
		err = derr
	}
	if err != nil {
		return nil, fmt.Errorf("read carried steps of %s: %w", turn, err)
	}
	return out, nil
}

// scanQueue calls fn for every request TOOL_CALLS holds, as its leader holds them: a direct
// scan (any replica, which holds a prefix of the stream: a request it lacks past its own
// state is the only thing it can miss), then the leader's requests after the last one the scan
// saw.
func scanQueue(ctx context.Context, js jetstream.JetStream, calls jetstream.Stream, fn func(*jetstream.RawStreamMsg)) error {
	filter := events.PrefixToolCall + ".>"
	var last uint64
	err := Scan(ctx, js, events.StreamToolCalls, filter, 1, time.Time{}, func(m *jetstream.RawStreamMsg) bool {
		last = m.Sequence
		fn(m)
		return true
	})
	if err != nil {
		return err
	}
	for {
		m, err := natsutil.ConsistentGetMsg(ctx, js, calls, natsutil.MsgQuery{Seq: last + 1, NextFor: filter})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		last = m.Sequence
		fn(m)
	}
}
