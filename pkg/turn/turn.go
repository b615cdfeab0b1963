package turn

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/logging"
	"github.com/agentbus/agentbus/pkg/loop"
	"github.com/agentbus/agentbus/pkg/metrics"
	"github.com/agentbus/agentbus/pkg/store"
	"github.com/agentbus/agentbus/pkg/tracing"
)

// pendingTurn is a turn decided on but not started yet (queue, collect, interrupt).
type pendingTurn struct {
	id        string
	seq       uint64   // trigger inbox sequence
	merged    []uint64 // further inbox sequences folded into this turn
	input     []llm.Message
	msg       events.IMMessage // reply target and sender
	trace     string
	due       time.Time
	cancelled bool
	accepted  int64 // Unix ms the inbound message was accepted by ingest (0: not from a chat message)
	heartbeat bool  // a heartbeat turn: an answer of just HEARTBEAT_OK is not posted
	// restarted: started again for a turn an earlier owner may have begun but left no record
	// of (its turn_started is written with its first record). Before its first record a turn
	// publishes nothing but its pre-executed tool calls (model tool calls wait for their
	// record, the reply for the commit), so only those may have results already.
	restarted bool
	// fromInbox: started straight from its inbox event (not queued, collected or merged, so
	// not listed in the session record). Such a turn writes nothing to the session record: its
	// commit carries the inbox cursor (see startTurn).
	fromInbox bool
	// parent is the span context its trigger carried (tracing.ParentOf), spanCtx the turn's
	// own span once it runs (set before it starts): its records, tool calls and reply parts
	// carry spanCtx.
	parent  string
	spanCtx trace.SpanContext
}

func (p *pendingTurn) needs(seq uint64) bool {
	if p.seq == seq {
		return true
	}
	for _, s := range p.merged {
		if s == seq {
			return true
		}
	}
	return false
}

func (p *pendingTurn) merge(o *pendingTurn) {
	p.merged = append(p.merged, o.seq)
	p.merged = append(p.merged, o.merged...)
	p.input = append(p.input, o.input...)
	p.msg = o.msg // reply to the newest message
}

// turnID is deterministic in the trigger's inbox sequence, so a worker that re-reads the
// trigger after a crash finds the turn the previous owner started instead of a second one.
func turnID(seq uint64) string { return "t" + strconv.FormatUint(seq, 10) }

// turnRun is a running turn.
type turnRun struct {
	pendingTurn
	a         *actor
	sid       events.SessionID
	sidStr    string // sid.String(), which the turn's records, tool calls and model calls all carry
	model     *llm.Model
	persona   string // the session's SystemPrompt: replaces the prompt's opening when set
	cancel    context.CancelFunc
	done      chan struct{}
	closed    atomic.Bool // done (finished) or removed from the record: no record write lists it
	index     int         // next message_end index
	mu        sync.Mutex
	steerQ    []queued
	followQ   []queued
	reason    string       // why it was aborted
	next      *pendingTurn // interrupt: the turn to start when this one stops
	finished  bool         // the turn's goroutine has taken next: no more interrupts
	replied   atomic.Bool  // committed, its reply going out: an abort can no longer change anything
	steerSeqs []uint64     // inbox sequences queued into this turn (steer, follow-up)
	resumed   bool         // taken over from another owner: tool results may already exist
	// fresh: nothing of this turn was published before (its turn_started was not a duplicate),
	// so its tool calls and reply parts tell the tool workers and egress to skip their
	// look-ups for an earlier attempt.
	fresh bool
	// callSeen counts the model's tool-call ids over the turn's assistant messages, busIDs maps
	// the latest message's ids to their bus ids (see noteCalls).
	callSeen map[string]int
	busIDs   map[string]string
	records  *store.TurnWriter   // the turn's records on AGENT_EVENTS, published async (pkg/store)
	tail     []events.MessageEnd // finished messages not recorded yet (see emitter)
	// started is the turn's start while it is not recorded yet: it rides on the turn's first
	// record (a turn_started with steps, or the commit) instead of costing an append of its own
	// before the first LLM call. nil once recorded, and for a resumed turn.
	started *events.TurnStarted
	// carried is what of the turn rides on its tool call requests instead of AGENT_EVENTS
	// (records.go carryStep); guarded by mu.
	carried carriedRecords
	// inRecord says whether the session record lists the turn as open: recordNo (a turn
	// started from its inbox event, whose commit carries the cursor), recordPending (being
	// added by a session-record write), recordYes.
	inRecord atomic.Int32
	// commitRecord: a turn whose context commit landed but whose turn_committed record did not
	// (found on takeover); the resume writes it with the reply.
	commitRecord bool
	// writeCursor: a committed turn finished on takeover that the session record does not list:
	// once its reply is stored, the record's cursor is moved past it (actor.finished), so the
	// next owner does not finish it again.
	writeCursor bool
	// launched, timedOut, outcome and msgs feed the turn's summary (summary.go).
	launched time.Time
	timedOut bool
	outcome  string
	msgs     []llm.Message
	// limitSteps: the turn stopped at its iteration limit after this many model calls, its
	// reply says so (replies.go); 0 otherwise.
	limitSteps int
}

const (
	recordNo int32 = iota
	recordPending
	recordYes
)

// queued is a steer or follow-up message and the inbox event it came from.
type queued struct {
	seq uint64
	msg llm.Message
}

func (t *turnRun) steer(seq uint64, ms ...llm.Message) {
	t.mu.Lock()
	for _, m := range ms {
		t.steerQ = append(t.steerQ, queued{seq, m})
	}
	t.mu.Unlock()
}

func (t *turnRun) followUp(seq uint64, m llm.Message) {
	t.mu.Lock()
	t.followQ = append(t.followQ, queued{seq, m})
	t.mu.Unlock()
}

// leftover takes the steers and follow-ups the loop did not consume: they arrived after its
// last poll. They become a turn of their own rather than being dropped.
func (t *turnRun) leftover() *pendingTurn {
	t.mu.Lock()
	defer t.mu.Unlock()
	rest := append(t.steerQ, t.followQ...)
	t.steerQ, t.followQ = nil, nil
	if len(rest) == 0 {
		return nil
	}
	slices.SortFunc(rest, func(a, b queued) int { return cmp.Compare(a.seq, b.seq) })
	pt := &pendingTurn{seq: rest[0].seq, msg: t.msg, trace: t.trace, parent: t.parent}
	for _, q := range rest {
		pt.input = append(pt.input, q.msg)
		if q.seq != pt.seq && !slices.Contains(pt.merged, q.seq) {
			pt.merged = append(pt.merged, q.seq)
		}
	}
	pt.id = turnID(pt.seq)
	return pt
}

func (t *turnRun) abort(reason string) {
	t.mu.Lock()
	t.reason = reason
	t.mu.Unlock()
	t.cancel()
}

// interruptWith aborts the turn; when it has stopped, the returned turn starts with this
// turn's input first. It reports false when the turn already finished, so that pt must start
// on its own.
func (t *turnRun) interruptWith(pt *pendingTurn) (*pendingTurn, bool) {
	t.mu.Lock()
	if t.finished {
		t.mu.Unlock()
		return nil, false
	}
	if t.next == nil {
		merged := &pendingTurn{seq: pt.seq, input: append(append([]llm.Message(nil), t.input...), pt.input...),
			msg: pt.msg, trace: pt.trace, parent: pt.parent, merged: append([]uint64{t.seq}, t.merged...)}
		t.next = merged
	} else {
		t.next.merge(pt)
	}
	t.reason = "interrupted"
	next := *t.next
	next.merged = append([]uint64(nil), next.merged...)
	t.mu.Unlock()
	t.cancel()
	return &next, true
}

func (t *turnRun) drain(q *[]queued, mode string) []llm.Message {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(*q)
	if n == 0 {
		return nil
	}
	if mode != "all" {
		n = 1
	}
	out := make([]llm.Message, n)
	for i := range out {
		out[i] = (*q)[i].msg
	}
	*q = (*q)[n:]
	return out
}

// startTurn runs a turn. Its turn_started event goes to AGENT_EVENTS with the turn's first
// record (see turnRun.started).
//
// A turn started straight from its inbox event (fromInbox, the usual case) writes nothing to
// the session record: the actor's cursor moves past it in memory, and the turn's context
// commit carries the inbox cursor (store.WithInboxSeq), which a new owner reads back
// (startCursor). Any session-record write while it runs lists it as open (updateSession), so
// the record's cursor never passes a turn it does not list. A new owner therefore re-reads the
// inbox events of turns that had not committed, and checks the turn log for each before it
// runs it (takeOver): resumed, skipped when it failed, or started again when nothing of it was
// recorded. Other turns (queued, collected, merged) are listed in the record already and are
// marked running in it with the cursor, in one CAS.
func (a *actor) startTurn(pt *pendingTurn) error {
	sess, err := a.w.sessions.Current(a.ctx, a.sk)
	if err != nil {
		return err
	}
	sid, err := sess.ID()
	if err != nil {
		return err
	}
	if pt.id == "" {
		pt.id = turnID(pt.seq)
	}
	if pt.fromInbox && !pt.restarted && pt.seq <= a.checkUpTo && !a.created {
		done, err := a.res.takeOver(sess, pt)
		if done || err != nil {
			return err
		}
		pt.restarted = true
	}
	model, err := a.w.pickModel(pt.msg, pt.input, sess.ModelOverride)
	if err != nil {
		a.out.replyText(pt, pt.id, failureText(pt.msg.Sender, "No model could take this message", err.Error()))
		_, _ = a.cx.commitMessages(sid, pt.input, pt.id+":commit", pt.id)
		return a.advance(pt.seq, nil)
	}
	if model.SupportsImages() {
		pt.input = a.w.inlineImages(a.ctx, pt.input)
	}
	pt.input = a.w.inlineAV(a.ctx, model, pt.input) // audio / video for models that take them (media_av.go)
	t := &turnRun{pendingTurn: *pt, a: a, sid: sid, sidStr: sid.String(), model: model, persona: sess.SystemPrompt, done: make(chan struct{}), records: a.w.turnlog.Writer()}
	started := events.TurnStarted{
		Turn: t.id, Trigger: events.InboxRef{Seq: pt.seq}, Model: events.ModelRef{Provider: model.Provider, ID: model.ID, API: model.API},
		Input: pt.input, Worker: a.w.opts.ID, LeaseRevision: a.leaseToken(),
	}
	for _, s := range pt.merged {
		started.Merged = append(started.Merged, events.InboxRef{Seq: s})
	}
	t.started = &started
	t.fresh = true // nothing of it was published (see pendingTurn.restarted)
	last := t.lastSeq()
	if pt.fromInbox {
		// Among the actor's turns before the cursor passes it: a session-record write in
		// between lists it, or stops its cursor short of it (updateSession).
		a.launch(t, nil)
		a.rd.passed(last)
		return nil
	}
	if err := a.advance(last, &store.OpenTurn{ID: t.id, State: "running", InboxSeq: pt.seq, StartedAt: time.Now().UnixMilli()}); err != nil {
		return err
	}
	t.inRecord.Store(recordYes)
	a.launch(t, nil)
	return nil
}

// firstSeq is the first inbox sequence the turn consumes (its trigger or a merged event).
func (p *pendingTurn) firstSeq() uint64 {
	first := p.seq
	for _, s := range p.merged {
		first = min(first, s)
	}
	return first
}

// lastSeq is the last inbox sequence the turn consumes (its trigger or a merged event).
func (p *pendingTurn) lastSeq() uint64 {
	last := p.seq
	for _, s := range p.merged {
		last = max(last, s)
	}
	return last
}

// traced reports whether a turn gets a span (with tracing on). A turn whose trigger carried a
// span context (a chat message, steer or follow-up from ingest, a subagent result or schedule
// published by a traced role) is that span's child. Without one, a turn caused by a user's
// chat message (ingest did not trace it) and the resumption of a started turn taken over from
// another owner start a root span in the envelope's trace; a wakeup nobody traced (a schedule or heartbeat firing, a background
// result) starts none: it would be a fresh root of its own per firing, with nothing an
// operator could follow it back to, at the cost of a whole trace. Its model and tool calls
// are then not traced either (they have no recording parent); its log lines and metrics are
// as for any turn.
func (t *turnRun) traced() bool {
	return t.parent != "" || t.accepted > 0 || t.resumed
}

// launch runs t in its own goroutine; resumed carries the turn's persisted messages.
func (a *actor) launch(t *turnRun, resumed *turnLog) {
	ctx, cancel := context.WithCancel(a.ctx)
	t.cancel = cancel
	a.mu.Lock()
	a.turns[t.id] = t
	if a.latest == nil || t.seq >= a.latest.seq {
		a.latest = t
	}
	a.mu.Unlock()
	a.turnsWG.Add(1)
	t.launched = time.Now()
	// The turn's span; set before the goroutine starts, so that its readers (the turn's records
	// and reply parts carry it) need no lock. Off, not even its options are built. See traced
	// for which turns have one.
	var span trace.Span = noop.Span{}
	if tracing.Enabled(a.w.opts.Tracer) && t.traced() {
		ctx, span = tracing.Start(ctx, a.w.opts.Tracer, "turn", t.parent, t.trace, trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(tracing.AgentbusSession.String(t.sidStr), tracing.AgentbusTurn.String(t.id)))
		t.spanCtx = span.SpanContext()
	}
	go func() {
		defer a.turnsWG.Done()
		defer close(t.done)
		defer cancel()
		err := t.execute(logging.With(ctx, "session", t.sidStr, "turn", t.id), resumed)
		tracing.End(span, err)
		if t.outcome != "" || err != nil && a.ctx.Err() == nil {
			t.finish(err)
		}
		if err != nil && a.ctx.Err() == nil {
			a.log.Error("turn failed", "turn", t.id, "err", err)
			if !t.closed.Load() && !errors.Is(err, store.ErrInvalid) && !errors.Is(err, store.ErrTooLarge) {
				// The turn is still open in the session record but cannot go on here (the
				// bus failed it past its retries). Hand the session over, as a crash would:
				// its trigger stays unacked and the next owner resumes the turn.
				a.handOver("resume turn "+t.id+" elsewhere", err)
			}
		}
		if a.ctx.Err() != nil { // lease lost or worker stopping: the turn stays open for resume
			return
		}
		t.mu.Lock()
		next := t.next
		t.finished = true
		t.mu.Unlock()
		a.turnDone(t, next)
	}()
}

// execute runs (or resumes) the agent loop, commits and replies.
func (t *turnRun) execute(ctx context.Context, resumed *turnLog) error {
	a := t.a
	var persisted []llm.Message
	committed := false
	if resumed != nil {
		persisted, committed = resumed.messages, resumed.committed
		t.index = len(persisted)
		if !committed {
			if err := storeFound(ctx, t, resumed); err != nil {
				return err
			}
		}
	}
	if !committed {
		final, newMsgs, err := t.runLoopWithin(ctx, persisted)
		interrupted := t.isInterrupted()
		if ctx.Err() != nil && a.ctx.Err() != nil {
			return ctx.Err() // the actor is going away; leave the turn open
		}
		if interrupted || err != nil && !errors.Is(err, loop.ErrMaxIterations) {
			t.spillTail(true) // no commit to carry them
		}
		t.msgs = newMsgs
		if interrupted {
			t.outcome = metrics.TurnCancelled
			// The merged turn carries this turn's input; nothing of this one is committed.
			_, _ = record(t, events.EvtKindTurnFailed, events.TurnFailed{Reason: events.FailAborted, Error: "interrupted by a newer message"}, "failed")
			return t.close("interrupted")
		}
		if err != nil && !errors.Is(err, loop.ErrMaxIterations) {
			// Not a model failure (those end in an error message) but the loop's or the bus's:
			// tell the user and close the turn rather than leave it open forever.
			t.outcome = metrics.TurnFailed
			_, _ = record(t, events.EvtKindTurnFailed, events.TurnFailed{Reason: events.FailError, Error: llm.Redact(err.Error(), a.w.opts.Secrets...)}, "failed")
			a.out.replyText(&t.pendingTurn, t.id, failureText(t.msg.Sender, "This turn failed", err.Error()))
			if cerr := t.close("failed"); cerr != nil {
				return cerr
			}
			return fmt.Errorf("turn %s: %w", t.id, err)
		}
		earlier := a.earlier(t.seq)
		if len(earlier) > 0 {
			t.spillTail(false) // the commit may wait a while: do not hold finished messages meanwhile
		}
		if err := t.flush(ctx); err != nil {
			return err
		}
		for _, done := range earlier {
			select {
			case <-done:
			case <-a.ctx.Done():
				return a.ctx.Err()
			}
		}
		reply := a.out.replyMsgsOf(&t.pendingTurn, t.id, t.turnReply(final, newMsgs), t.fresh)
		// A turn whose start is in AGENT_EVENTS already (it asked for a tool, or was taken
		// over) writes no turn_committed record: its commit closes it (store.WithClosing),
		// carrying its tail and the number of its reply parts, so a tool turn costs one
		// AGENT_EVENTS append. A turn that recorded nothing yet writes one turn_committed with
		// its start and tail, after the commit and the reply (publishReply).
		// What the turn carried on its tool call requests instead (carryStep) is in the
		// commit's messages; the commit names where it starts, and carries the turn's start
		// when that rode on them too (store.WithClosingStart), so that readers of the turn log
		// (store.ClosingRecords) see the turn as if it had been recorded.
		closes := !startPending(t)
		opts := []store.AppendOption{store.WithInboxSeq(t.lastSeq())}
		var tail []events.MessageEnd
		if closes {
			tail = t.takeTail()
			tailFrom := len(newMsgs) - len(tail)
			t.mu.Lock()
			if from := t.carried.from(); from >= 0 && from < tailFrom {
				tailFrom = from
			}
			if s := t.carried.started; s != nil {
				opts = append(opts, store.WithClosingStart(*s, t.carried.startedAt))
			}
			t.mu.Unlock()
			opts = append(opts, store.WithClosing(len(reply), tailFrom))
		}
		// Retried on a transient bus error: the commit is fenced and carries a fixed msg id, so
		// a retry of a commit that did land is recognized (ctxlog.AppendMessages).
		var seq uint64
		err = store.RetryTransient(ctx, func() error {
			var err error
			seq, err = a.cx.commitMessages(t.sid, newMsgs, t.id+":commit", t.id, opts...)
			return err
		})
		if err != nil {
			if closes {
				t.mu.Lock()
				t.tail = append(tail, t.tail...) // not committed: still to be recorded
				t.mu.Unlock()
			}
			return err
		}
		var committed *nats.Msg
		if !closes {
			var usage *llm.Usage
			if final != nil {
				usage = final.Usage
			}
			committed, err = turnEventMsg(t, events.EvtKindTurnCommitted, events.TurnCommitted{FirstSeq: seq, LastSeq: seq,
				Messages: len(newMsgs), Usage: usage, StopReason: stopOf(final), Tail: t.takeTail(), Started: t.takeStarted()}, "committed")
			if err != nil {
				return err
			}
		}
		// The commit above is what made the turn durable; the reply and the record (if any)
		// follow, both idempotent (fixed ids) if a resume publishes them again. They go out
		// even if the actor stops meanwhile (its lease lapsed while a NATS node failed over,
		// say): the commit carries the inbox cursor, so a new owner that finds the turn done
		// does not publish its reply again (startCursor). Done means: its turn_committed
		// record is stored, which publishReply writes only after the reply's acks; or, for a
		// closing commit, the reply's last part is known to be stored (actor.replyStored), and
		// publishReply publishes that part only after the others' acks. Otherwise the new
		// owner finishes the turn from its commit (takeOver), publishing the reply again under
		// the same ids.
		t.replied.Store(true) // committed: nothing of it is left to cancel (/cancel)
		t.outcome = t.outcomeOf(final)
		pctx, cancel := a.w.replyContext()
		defer cancel()
		if err := a.w.publishReply(pctx, committed, reply); err != nil {
			return err
		}
	} else {
		msgs := a.out.replyMsgsOf(&t.pendingTurn, t.id, t.turnReply(lastAssistant(persisted), persisted), false)
		var rec *nats.Msg
		if t.commitRecord { // (a closing commit needs none)
			final := lastAssistant(persisted)
			var usage *llm.Usage
			if final != nil {
				usage = final.Usage
			}
			seq := resumed.commitSeq
			var err error
			if rec, err = turnEventMsg(t, events.EvtKindTurnCommitted, events.TurnCommitted{FirstSeq: seq, LastSeq: seq,
				Messages: len(persisted), Usage: usage, StopReason: stopOf(final)}, "committed"); err != nil {
				return err
			}
		}
		t.replied.Store(true)
		t.msgs, t.outcome = persisted, t.outcomeOf(lastAssistant(persisted))
		pctx, cancel := a.w.replyContext()
		defer cancel()
		if err := a.w.publishReply(pctx, rec, msgs); err != nil {
			return err
		}
	}
	return t.close("done")
}

func (t *turnRun) isInterrupted() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.next != nil
}

// close removes the turn from the session record. Steers and follow-ups it did not consume
// are recorded, in the same write, as a queued turn that the actor starts next.
func (t *turnRun) close(state string) error {
	var next *pendingTurn
	if state != "interrupted" {
		next = t.leftover()
	}
	if state == "done" && next == nil {
		t.a.finished(t) // marks it closed
		return nil
	}
	_, err := t.a.updateSession(t.a.ctx, func(s *store.Session) {
		s.CloseTurn(t.id)
		if state == "done" {
			s.Model = t.model.Provider + "/" + t.model.ID
		}
		if next != nil {
			s.SetOpenTurn(store.OpenTurn{ID: next.id, State: "queued", InboxSeq: next.seq, Merged: next.merged, StartedAt: time.Now().UnixMilli()})
		}
	})
	if err == nil {
		t.closed.Store(true)
	}
	if err == nil && next != nil {
		t.a.mu.Lock()
		t.a.ready = append(t.a.ready, next)
		t.a.mu.Unlock()
	}
	return err
}
