package turn

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
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
			if err = t.records.Publish(m); err == nil {
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
			err = t.records.Publish(m)
		}
		if err != nil {
			t.a.log.Error("persist message", "turn", t.id, "index", me.Index, "err", err)
		}
	}
}

// carriedRecords is what a turn carries on its tool call requests instead of writing it to
// AGENT_EVENTS (issue 40; store.ReadCarried reads it back): its start, when it was taken into
// a carried step, and every message_end carried since the turn's last AGENT_EVENTS record. A
// step's requests carry all of them (step), so any one request or result of the latest step
// holds everything of the turn that AGENT_EVENTS lacks.
type carriedRecords struct {
	started   *events.TurnStarted
	startedAt int64 // Unix ms
	steps     []events.MessageEnd
	step      []byte // the records as events.ToolCall.Step
}

// giveBack hands what is carried back to be recorded in AGENT_EVENTS after all, and empties
// c: the start goes to *started (the next record carries it), the carried messages to the
// front of *tail. The caller holds the turn's lock.
func (c *carriedRecords) giveBack(started **events.TurnStarted, tail *[]events.MessageEnd) {
	if c.started != nil {
		*started = c.started
	}
	if len(c.steps) > 0 {
		*tail = append(slices.Clone(c.steps), *tail...)
	}
	*c = carriedRecords{}
}

// from is the index of the first carried message (-1: none).
func (c *carriedRecords) from() int {
	if len(c.steps) == 0 {
		return -1
	}
	return c.steps[0].Index
}

// carryStep puts a finished tool-asking step (mes: the held-back messages before it, then its
// assistant message) on the step's tool call requests instead of AGENT_EVENTS, together with
// everything carried before. It reports false, recording nothing, when the step must go to
// AGENT_EVENTS: some tool of the step is served by a tool worker that does not copy the step
// into its result (toolbus.Catalog.CopiesStep), or the records would be too large to travel
// twice in one message. Then the caller records mes, and carryStep has put what was carried
// before back to be recorded with them (uncarry).
func (t *turnRun) carryStep(calls []llm.Content, mes []events.MessageEnd) bool {
	cat := t.a.w.tools
	ok := cat != nil && len(calls) > 0
	for _, c := range calls {
		if !ok {
			break
		}
		ok = cat.CopiesStep(c.Name)
	}
	if !ok {
		t.uncarry()
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	c := &t.carried
	if t.started != nil {
		c.started, c.startedAt, t.started = t.started, time.Now().UnixMilli(), nil
	}
	c.steps = append(c.steps, mes...)
	var recs []*nats.Msg
	var err error
	if c.started != nil {
		s := *c.started
		s.Steps = c.steps
		var m *nats.Msg
		if m, err = turnEventMsg(t, events.EvtKindTurnStarted, s, "started"); err == nil {
			recs = append(recs, m)
		}
	} else {
		for _, me := range c.steps {
			var m *nats.Msg
			if m, err = turnEventMsg(t, events.EvtKindMessageEnd, me, "m"+strconv.Itoa(me.Index)); err != nil {
				break
			}
			recs = append(recs, m)
		}
	}
	var step []byte
	if err == nil {
		step = store.EncodeStep(recs...)
	}
	// The request carries the step once and its result once more, next to the call's own
	// arguments and output, all within the server's max payload.
	if err != nil || int64(len(step)) > t.a.w.nc.MaxPayload()/4 {
		c.steps = c.steps[:len(c.steps)-len(mes)]
		c.giveBack(&t.started, &t.tail)
		return false
	}
	c.step = step
	return true
}

// uncarry takes back what the turn carries on its requests, to be recorded in AGENT_EVENTS
// after all: the start goes back to started (the next record carries it), and the carried
// messages go to the front of the tail.
func (t *turnRun) uncarry() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.carried.giveBack(&t.started, &t.tail)
}

// storeCarried writes what the turn carries to AGENT_EVENTS and waits for it: a request that
// carries it is about to be withdrawn (toolbus.Call.Withdrawing).
func storeCarried(ctx context.Context, t *turnRun) error {
	t.uncarry()
	t.recordMessages(t.takeTail()...)
	return t.flush(ctx)
}

// spillTail records the messages held back for the commit as records of their own: the turn
// goes on past them (another LLM step) or ends without a commit. withStart also records the
// turn's start when nothing else would carry it (the turn ends without a commit). What the
// turn carried on its tool call requests is recorded too: a turn that ends without a commit,
// or waits for an earlier one, has its start and steps in AGENT_EVENTS as before issue 40.
func (t *turnRun) spillTail(withStart bool) {
	t.uncarry()
	tail := t.takeTail()
	if len(tail) == 0 && !withStart {
		return
	}
	if len(tail) == 0 && !startPending(t) {
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

// startPending reports whether t's start is still unrecorded. A function, not a method:
// turnRun is at the size limit (internal/layering).
func startPending(t *turnRun) bool {
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
