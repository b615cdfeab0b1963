package turn

import (
	"context"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/store"
	"github.com/agentbus/agentbus/pkg/tracing"
)

// record appends one turn event to AGENT_EVENTS (store.TurnLog.Record), deduplicated on turn
// + name.
func record[P events.Payload](t *turnRun, kind string, p P, name string) (*jetstream.PubAck, error) {
	m, err := turnEventMsg(t, kind, p, name)
	if err != nil {
		return nil, err
	}
	ack, err := t.a.w.turnlog.Record(t.a.ctx, m)
	if err != nil {
		return nil, fmt.Errorf("record %s of %s: %w", kind, t.id, err)
	}
	return ack, nil
}

// turnEventMsg is a turn event as a record (store.TurnEventMsg) carrying the turn's span.
func turnEventMsg[P events.Payload](t *turnRun, kind string, p P, name string) (*nats.Msg, error) {
	m, err := store.TurnEventMsg(store.TurnMeta{Key: t.a.sk, Session: t.sidStr, Turn: t.id, Trace: t.trace}, kind, p, name)
	if err == nil {
		tracing.InjectSpanContext(t.spanCtx, m.Header)
	}
	return m, err
}

// recordMessages appends finished messages without waiting for the ack; flush waits for all
// of them. The loop's next step does not need the ack, but a tool call and the commit do: a
// tool must not run for an assistant message that might not be in the log (resume would ask
// the model again and get other call ids). While the turn's start is not recorded, they go
// in one turn_started record as its steps; after that, one message_end record each.
func (t *turnRun) recordMessages(mes ...events.MessageEnd) {
	if s := t.takeStarted(); s != nil {
		s.Steps = mes
		m, err := turnEventMsg(t, events.EvtKindTurnStarted, *s, "started")
		if err == nil {
			if err = t.publishRecord(m); err == nil {
				return
			}
		}
		s.Steps = nil
		t.mu.Lock()
		t.started = s // the next record carries it
		t.mu.Unlock()
		t.a.log.Error("persist turn start", "turn", t.id, "err", err)
		if len(mes) == 0 {
			return
		}
	}
	for _, me := range mes {
		m, err := turnEventMsg(t, events.EvtKindMessageEnd, me, "m"+strconv.Itoa(me.Index))
		if err == nil {
			err = t.publishRecord(m)
		}
		if err != nil {
			t.a.log.Error("persist message", "turn", t.id, "index", me.Index, "err", err)
		}
	}
}

// publishRecord publishes one turn record asynchronously; flush waits for its ack.
func (t *turnRun) publishRecord(m *nats.Msg) error { return t.records.Publish(m) }

// spillTail records the messages held back for the commit as records of their own: the turn
// goes on past them (another LLM step) or ends without a commit. withStart also records the
// turn's start when nothing else would carry it (the turn ends without a commit).
func (t *turnRun) spillTail(withStart bool) {
	tail := t.takeTail()
	if len(tail) == 0 && !withStart {
		return
	}
	if len(tail) == 0 && !t.startPending() {
		return
	}
	t.recordMessages(tail...)
}

// takeStarted returns the turn's unrecorded start and forgets it (the caller records it).
func (t *turnRun) takeStarted() *events.TurnStarted {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.started
	t.started = nil
	return s
}

func (t *turnRun) startPending() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.started != nil
}

func (t *turnRun) takeTail() []events.MessageEnd {
	t.mu.Lock()
	defer t.mu.Unlock()
	tail := t.tail
	t.tail = nil
	return tail
}

// ackWait is how long a turn waits for the acks of its asynchronous publishes before it
// publishes the unacknowledged ones again (same Nats-Msg-Id, dropped by the stream if stored).
const ackWait = store.RecordAckWait

// flush waits until every message recorded so far is stored (store.TurnWriter.Flush).
func (t *turnRun) flush(ctx context.Context) error {
	err := t.records.Flush(ctx, func(err error) {
		t.a.log.Warn("turn record not acknowledged; publishing it again", "turn", t.id, "err", err)
	})
	if err != nil {
		return fmt.Errorf("record message of %s: %w", t.id, err)
	}
	return nil
}
