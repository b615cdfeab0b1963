package turn

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/agentbus/agentbus/pkg/chunk"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/identity"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/logging"
	"github.com/agentbus/agentbus/pkg/loop"
	"github.com/agentbus/agentbus/pkg/metrics"
	"github.com/agentbus/agentbus/pkg/models"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/output"
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
	if pt.fromInbox && !pt.restarted && pt.seq <= a.checkUpTo {
		done, err := a.takeOver(sess, pt)
		if done || err != nil {
			return err
		}
		pt.restarted = true
	}
	model, err := a.w.pickModel(pt.msg, pt.input, sess.ModelOverride)
	if err != nil {
		a.replyText(pt, pt.id, failureText(pt.msg.Sender, "No model could take this message", err.Error()))
		_, _ = a.commitMessages(sid, pt.input, pt.id+":commit", pt.id)
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
		a.passed(last)
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

// takeOver decides what to do with a turn event that an earlier owner may have started
// (its sequence was in the inbox when this actor started, past the durable cursor): resume
// the turn from its log (also a turn whose commit landed without its turn_committed record),
// skip it when it failed, or report false: nothing of it was recorded, start it again.
func (a *actor) takeOver(sess *store.Session, pt *pendingTurn) (bool, error) {
	if a.isListed(pt.id) { // resumed from the session record (resumeAll)
		a.passed(pt.lastSeq())
		return true, nil
	}
	tl, err := a.w.readTurn(a.ctx, a.sk, pt.id)
	if err != nil {
		return false, fmt.Errorf("take over turn %s: %w", pt.id, err)
	}
	mark := a.lastCommit
	if !tl.committed && mark.Turn == pt.id && mark.MsgID == pt.id+":commit" {
		// The context commit landed, its turn_committed record and reply may not have: finish
		// it from the commit, without asking the model again.
		tl.messages, tl.committed, tl.commitSeq, tl.closes = mark.Messages, true, mark.Seq, mark.Closes
	}
	switch {
	case tl.failed && !tl.committed:
		a.log.Info("skipping a turn that failed under the previous owner", "turn", pt.id)
		a.passed(pt.lastSeq())
		return true, nil
	case tl.started == nil && !tl.committed:
		return false, nil
	}
	sid, err := sess.ID()
	if err != nil {
		return false, err
	}
	ot := store.OpenTurn{ID: pt.id, State: "running", InboxSeq: pt.seq, Merged: pt.merged}
	if tl.started != nil {
		for _, m := range tl.started.Merged {
			ot.Merged = append(ot.Merged, m.Seq)
		}
	}
	a.passed(pt.lastSeq())
	a.resumeWith(sid, sess.SystemPrompt, ot, tl, false)
	return true, nil
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
			a.replyText(&t.pendingTurn, t.id, failureText(t.msg.Sender, "This turn failed", err.Error()))
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
		reply := a.replyMsgsOf(&t.pendingTurn, t.id, t.turnReply(final, newMsgs), t.fresh)
		// A turn whose start is in AGENT_EVENTS already (it asked for a tool, or was taken
		// over) writes no turn_committed record: its commit closes it (store.WithClosing),
		// carrying its tail and the number of its reply parts, so a tool turn costs one
		// AGENT_EVENTS append. A turn that recorded nothing yet writes one turn_committed with
		// its start and tail, after the commit and the reply (publishReply).
		closes := !t.startPending()
		opts := []store.AppendOption{store.WithInboxSeq(t.lastSeq())}
		var tail []events.MessageEnd
		if closes {
			tail = t.takeTail()
			opts = append(opts, store.WithClosing(len(reply), len(newMsgs)-len(tail)))
		}
		// Retried on a transient bus error: the commit is fenced and carries a fixed msg id, so
		// a retry of a commit that did land is recognized (ctxlog.AppendMessages).
		var seq uint64
		err = store.RetryTransient(ctx, func() error {
			var err error
			seq, err = a.commitMessages(t.sid, newMsgs, t.id+":commit", t.id, opts...)
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
		msgs := a.replyMsgsOf(&t.pendingTurn, t.id, t.turnReply(lastAssistant(persisted), persisted), false)
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

// runLoopWithin is runLoop under ai.agent.timeout: the model steps and tool calls of one turn
// get that long (seed: "单次 Agent 回合超时"); the flush, commit and reply that follow run on
// ctx, so a turn that ran out of time still commits what it has and says why it stopped.
func (t *turnRun) runLoopWithin(ctx context.Context, persisted []llm.Message) (*llm.Message, []llm.Message, error) {
	limit := time.Duration(t.a.w.opts.AI.Agent.TimeoutMs) * time.Millisecond
	if limit <= 0 {
		return t.runLoop(ctx, persisted)
	}
	lctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	final, msgs, err := t.runLoop(lctx, persisted)
	if errors.Is(lctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		t.mu.Lock()
		if t.reason == "" {
			t.reason = fmt.Sprintf("stopped: the turn ran longer than ai.agent.timeout (%s)", limit)
		}
		t.timedOut = true
		t.mu.Unlock()
		if err != nil && errors.Is(err, context.DeadlineExceeded) {
			err = nil // an aborted final message carries the outcome; the turn commits what it has
		}
	}
	return final, msgs, err
}

// runLoop runs the loop from the input, or continues from what a previous owner persisted.
// It returns the final assistant message and every message of the turn (input included).
func (t *turnRun) runLoop(ctx context.Context, persisted []llm.Message) (*llm.Message, []llm.Message, error) {
	w := t.a.w
	var loaded store.Loaded
	err := store.RetryTransient(ctx, func() error {
		var err error
		loaded, err = t.a.loadContext(ctx, t.sid)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	t.mu.Lock()
	if t.started != nil {
		// The context the turn starts from: its commit comes after it (readTurn looks there).
		t.started.ContextSeq = loaded.LastSeq
	}
	t.mu.Unlock()
	// The model's harness: ai.agent, the built-in size defaults, then ai.agent.modelHarness.
	harness := models.ResolveHarness(w.opts.AI.Agent, t.model.Provider, t.model.ID)
	t.phase("turn.start", "resumed", len(persisted) > 0)
	tools, agentTools, skillText := w.selectToolsWith(harness, t.msg, t.input, loaded.Messages)
	t.phase("tools.collected", "tools", len(agentTools))
	if pre := t.preExecute(ctx); pre != "" {
		skillText += "\n## Pre-executed tool results\n" + pre
	}
	skillText += toneSection(w.opts.AI.Agent, t.input) // ai.agent.toneAwareness (tone.go)
	system := w.systemPrompt(ctx, t.msg, t.model, tools, skillText)
	if t.persona != "" {
		system = withPersona(system, t.persona)
	}
	if system, err = t.bootstrapHook(ctx, system); err != nil { // hooks.go
		return nil, nil, err
	}
	loaded = t.autoCompact(ctx, loaded, system) // L2 when the context nears the window (compact.go)
	ac := &loop.AgentContext{SystemPrompt: system, Messages: contextMessages(loaded), Tools: agentTools}
	agentCfg := w.opts.AI.Agent
	cfg := &loop.Config{
		Model:         t.model,
		StreamFn:      w.opts.StreamFn,
		GetAPIKey:     w.opts.Models.APIKey,
		ToolExecution: loop.ToolExecutionMode(harness.ToolExecution),
		Executor:      t.tracedExecutor(),
		MaxIterations: w.maxIterations(t.model, tools),
		GetSteeringMessages: func() []llm.Message {
			return t.drain(&t.steerQ, agentCfg.SteeringMode)
		},
		GetFollowUpMessages: func() []llm.Message {
			return t.drain(&t.followQ, agentCfg.FollowUpMode)
		},
		AfterToolCall:  scrubToolError(agentCfg.Workspace),
		StopAfterTools: stopOnAsk, // ask_user: the question goes to the chat, the answer is the next message
	}
	if cs := w.compactionSettings(t.model); cs.Enabled {
		cfg.TransformContext = t.microCompact(cs) // L1
	}
	cfg.TransformContext = t.transformHook(cfg.TransformContext) // ai.hooks after L1 (hooks.go)
	if lvl, err := llm.ParseThinkingLevel(harness.Thinking); err == nil {
		cfg.StreamOptions.Thinking = lvl
	}
	cfg.StreamOptions.SessionID = t.sidStr
	cfg.StreamOptions.Secrets = w.opts.Secrets
	cfg.StreamFn = t.rateLimited(cfg.StreamFn) // ai.agent.rateLimit (ratelimit.go)
	emit, stopLive := t.emitter()
	defer stopLive()
	emit = t.phaseEmitter(emit)
	t.phase("path.agent_loop", "model", t.model.Provider+"/"+t.model.ID, "maxIterations", cfg.MaxIterations, "toolExecution", harness.ToolExecution)
	out, err := t.runCompacting(ctx, ac, cfg, emit, func() ([]llm.Message, error) {
		if len(persisted) == 0 {
			return loop.Run(ctx, t.input, ac, cfg, emit)
		}
		return t.resumeLoop(ctx, ac, cfg, persisted, emit)
	})
	final := lastAssistant(out)
	if t.a.w.phaseTracing() {
		outcome := "answered"
		switch {
		case err != nil:
			outcome = "error: " + err.Error()
		case final == nil:
			outcome = "no answer"
		case final.StopReason != "":
			outcome = string(final.StopReason)
		}
		t.phase("turn.end", "outcome", outcome, "messages", len(out))
	}
	return final, out, err
}

// tracedExecutor is the turn's tool executor, with an execute_tool span per call when
// tracing is on (off, not even the wrapper is allocated).
func (t *turnRun) tracedExecutor() loop.ToolExecutor {
	if tracing.Enabled(t.a.w.opts.Tracer) {
		return tracing.WrapExecutor(t.executor())
	}
	return t.executor()
}

// preExecute runs the permitted preExecutable tools in parallel before the loop (seed:
// pre-exec results go into the prompt of the same agentLoop) within ai.agent.preExecTimeout.
// Their bus call ids are turn-scoped, so a resumed turn reads the same results back.
func (t *turnRun) preExecute(ctx context.Context) string {
	pre := t.a.w.tools.View(t.msg).Pre
	if len(pre) == 0 {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(t.a.w.opts.AI.Agent.PreExecTimeoutMs)*time.Millisecond)
	defer cancel()
	out := make([]string, len(pre))
	var wg sync.WaitGroup
	for i, e := range pre {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := t.executor()
			if t.restarted {
				x.Fresh, x.Resumed = false, true // an earlier attempt may have run it
			}
			res, err := x.Execute(ctx, loop.ToolCallRequest{ID: "pre-" + e.Name, Name: e.Name, Args: map[string]any{}})
			switch {
			case err != nil:
				out[i] = "- " + e.Name + ": (unavailable: " + err.Error() + ")"
			case res.IsError:
				out[i] = "- " + e.Name + ": (error) " + llm.TextContentOf(res.Content)
			default:
				out[i] = "- " + e.Name + ": " + llm.TextContentOf(res.Content)
			}
		}()
	}
	wg.Wait()
	return strings.Join(out, "\n")
}

// resumeLoop continues a turn from its persisted messages: tool calls without a result are
// requested again under their original ids (tool workers answer each id once), and no LLM
// step whose message was persisted is repeated.
func (t *turnRun) resumeLoop(ctx context.Context, ac *loop.AgentContext, cfg *loop.Config, persisted []llm.Message, emit func(loop.Event)) ([]llm.Message, error) {
	msgs := append([]llm.Message(nil), persisted...)
	for i := range msgs {
		if msgs[i].Role == llm.RoleAssistant {
			t.noteCalls(&msgs[i])
		}
	}
	last := msgs[len(msgs)-1]
	if last.Role == llm.RoleAssistant {
		calls := last.ToolCalls()
		if len(calls) == 0 || last.StopReason == llm.StopReasonError || last.StopReason == llm.StopReasonAborted {
			return msgs, nil // the final message was persisted: nothing left to run
		}
	}
	// Complete missing tool results of the last assistant message.
	if ai := lastAssistantIndex(msgs); ai >= 0 && len(msgs[ai].ToolCalls()) > 0 {
		have := map[string]bool{}
		for _, m := range msgs[ai+1:] {
			if m.Role == llm.RoleToolResult {
				have[m.ToolCallID] = true
			}
		}
		for _, c := range msgs[ai].ToolCalls() {
			if have[c.ID] {
				continue
			}
			res, err := t.executor().Execute(ctx, loop.ToolCallRequest{ID: c.ID, Name: c.Name, Args: c.Arguments, OnUpdate: func(loop.ToolResult) {}})
			if err != nil {
				res = loop.ErrorResult(err.Error())
			}
			m := llm.Message{Role: llm.RoleToolResult, Content: res.Content, Details: res.Details, IsError: res.IsError,
				ToolCallID: c.ID, ToolName: c.Name, Timestamp: time.Now().UnixMilli()}
			emit(loop.Event{Type: loop.EventMessageEnd, Message: &m})
			msgs = append(msgs, m)
		}
	}
	if stopOnAsk(msgs) {
		return msgs, nil // the turn had asked the user: the answer is the next message
	}
	ac.Messages = append(ac.Messages, msgs...)
	more, err := loop.Continue(ctx, ac, cfg, emit)
	return append(msgs, more...), err
}

// noteCalls gives the tool calls of assistant message m their bus ids: the turn id plus the
// model's id, and "~n" for the n-th use of an id within the turn. Models and small local
// servers reuse ids like "call_0" from one step to the next, and TOOL_CALLS deduplicates on
// the bus id, so a second call_0 would otherwise get the first one's result. Replaying the
// turn's assistant messages in order (resume) gives the same ids again.
func (t *turnRun) noteCalls(m *llm.Message) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.callSeen == nil {
		t.callSeen, t.busIDs = map[string]int{}, map[string]string{}
	}
	clear(t.busIDs)
	for _, c := range m.ToolCalls() {
		t.callSeen[c.ID]++
		id := t.id + "-" + c.ID
		if n := t.callSeen[c.ID]; n > 1 {
			id += "~" + strconv.Itoa(n)
		}
		t.busIDs[c.ID] = id
	}
}

// busID is the bus id of the latest assistant message's call id.
func (t *turnRun) busID(callID string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if id, ok := t.busIDs[callID]; ok {
		return id
	}
	return t.id + "-" + callID
}

func lastAssistantIndex(ms []llm.Message) int {
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].Role == llm.RoleAssistant {
			return i
		}
	}
	return -1
}

func lastAssistant(ms []llm.Message) *llm.Message {
	if i := lastAssistantIndex(ms); i >= 0 {
		return &ms[i]
	}
	return nil
}

func stopOf(m *llm.Message) llm.StopReason {
	if m == nil {
		return ""
	}
	return m.StopReason
}

// emitter persists every finished message and streams text deltas live.
// The returned stop publishes buffered deltas and must be called when the loop is done.
func (t *turnRun) emitter() (emit func(loop.Event), stop func()) {
	subject := events.AgentLiveSubject(t.a.sk)
	live := &liveBuffer{publish: func(d events.LiveDelta) {
		ev := events.New(d, events.WithTurn(t.id), events.WithSession(t.sidStr))
		if m, err := events.NewMsg(subject, ev); err == nil {
			_ = t.a.w.nc.PublishMsg(m)
		}
	}}
	return func(ev loop.Event) {
		switch ev.Type {
		case loop.EventMessageEnd:
			live.flush()
			idx := t.index
			t.index++
			if idx < len(t.input) {
				break // the prompts are in turn_started already
			}
			if t.a.ctx.Err() != nil {
				// The actor is going away (lease lost, worker stopping): what the loop produces
				// now is an artefact of that cancellation, not of the turn. The next owner
				// resumes from what was recorded before.
				break
			}
			me := events.MessageEnd{Index: idx, Message: *ev.Message}
			if me.Message.Role != llm.RoleAssistant || len(me.Message.ToolCalls()) == 0 {
				// A tool result's durable copy is in TOOL_RESULTS, and a final answer is
				// committed right away: both ride on the next record (the closing commit or a
				// turn_committed, usually) instead of costing an append each.
				t.mu.Lock()
				t.tail = append(t.tail, me)
				t.mu.Unlock()
				break
			}
			// An LLM step that asked for tools must be in the log before any of its calls
			// runs (the executor flushes), so resume never asks the model again.
			t.noteCalls(&me.Message)
			t.recordMessages(append(t.takeTail(), me)...)
		case loop.EventMessageUpdate:
			if ev.Update.Type == llm.EventTextDelta {
				live.add(string(ev.Update.Type), t.index, ev.Update.ContentIndex, ev.Update.Delta)
			}
		}
	}, live.flush
}

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

// replyPublishTimeout bounds the publication of a committed turn's record and reply.
const replyPublishTimeout = 30 * time.Second

// replyContext is the context a committed turn's record and reply are published on: not the
// actor's, which ends when the actor stops, but one that only Kill (a simulated crash) or
// replyPublishTimeout ends.
func (w *Worker) replyContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(w.killCtx, replyPublishTimeout)
}

// publishReply sends the final assistant text as outbound parts (ids turn-0, turn-1, ...; a
// resumed turn republishes under the same ids and JetStream drops the duplicates).
func (t *turnRun) replyText(final *llm.Message) string {
	text := ""
	switch {
	case final == nil:
		text = "⚠️ The turn ended without a reply."
	case final.StopReason == llm.StopReasonError && strings.HasPrefix(final.ErrorMessage, overflowReply):
		text = overflowText(t.msg.Sender, final.ErrorMessage) // compact.go
	case final.StopReason == llm.StopReasonError && strings.HasPrefix(final.ErrorMessage, rateLimitReply):
		text = "⏳ " + final.ErrorMessage // ratelimit.go: the user learns when to come back
	case final.StopReason == llm.StopReasonError:
		text = failureText(t.msg.Sender, "The model failed", final.ErrorMessage)
	case final.StopReason == llm.StopReasonAborted:
		t.mu.Lock()
		reason := t.reason
		t.mu.Unlock()
		if reason == "" {
			reason = "aborted"
		}
		text = strings.TrimSpace(final.TextContent() + "\n\n(" + reason + ")")
	default:
		text = final.TextContent()
		if t.heartbeat && strings.TrimSpace(text) == HeartbeatOK {
			text = ""
		}
	}
	return text
}

// replyLimit is the part size for platforms without a known limit.
const replyLimit = 4000

// replyText publishes text as outbound parts to the pending turn's reply target. It gives up
// only when the actor stops (a resumed turn publishes its reply again).
func (a *actor) replyText(pt *pendingTurn, turn, text string) {
	if err := a.w.publishAll(a.ctx, a.replyMsgs(pt, turn, text, false)); err != nil {
		a.log.Error("publish reply", "turn", turn, "err", err)
	}
}

// replyMsgs are the outbound parts of text (ids turn-0, turn-1, ...), for the pending turn's
// reply target; fresh promises egress that they were never published before.
func (a *actor) replyMsgs(pt *pendingTurn, turn, text string, fresh bool) []*nats.Msg {
	return a.replyMsgsOf(pt, turn, []string{text}, fresh)
}

// replyMsgsOf is replyMsgs of several texts, each its own message(s), in order (replies.go).
func (a *actor) replyMsgsOf(pt *pendingTurn, turn string, texts []string, fresh bool) []*nats.Msg {
	var segs []events.Segments
	for _, text := range texts {
		for _, el := range output.Parse(text) { // media and cards: a part each
			t, ok := el.(output.TextElement)
			if !ok {
				segs = append(segs, events.Segments{output.Segment(el)})
				continue
			}
			for _, c := range chunk.Chunk(t.Text, replyLimit) {
				segs = append(segs, events.Segments{events.TextSeg(c)})
			}
		}
	}
	msgs := make([]*nats.Msg, 0, len(segs))
	for i, content := range segs {
		out := events.Outbound{
			OutID: events.OutID(turn, i), Turn: turn, Part: i, Platform: a.sk.Platform, Bot: a.sk.Bot,
			Scene: events.Scene{Type: a.sk.Scope, ID: a.sk.Scene}, ReplyTo: pt.msg.MessageID, Content: content, Fresh: fresh,
			Final: i == len(segs)-1,
		}
		ev := events.New(out, events.WithSession(a.sk.String()), events.WithTurn(turn), events.WithTrace(pt.trace), events.WithID(out.OutID))
		m, err := events.NewMsg(events.IMOutSubject(a.sk), ev)
		if err != nil {
			// Our own event failed validation: a bug, but the user still gets told.
			a.log.Error("reply part not publishable", "turn", turn, "part", i, "err", err)
			continue
		}
		tracing.InjectSpanContext(pt.spanCtx, m.Header)
		msgs = append(msgs, m)
	}
	return msgs
}

// publishReply publishes a committed turn's reply, then its turn_committed record (rec; nil:
// none). The record waits for the reply's acks, so a new owner that finds the record knows the
// reply is stored too: a kill between the two leaves the record missing, and the turn is
// finished from its commit (takeOver), which publishes both again under the same ids. The
// reply's last part likewise waits for the acks of the parts before it, so that part stored
// (last on the chat's IM_OUT subject, or its receipt on IM_SENT) means every part was stored
// (actor.replyStored, for closing commits).
func (w *Worker) publishReply(ctx context.Context, rec *nats.Msg, reply []*nats.Msg) error {
	if n := len(reply); n > 1 {
		if err := w.publishAll(ctx, reply[:n-1]); err != nil {
			return err
		}
		reply = reply[n-1:]
	}
	if err := w.publishAll(ctx, reply); err != nil {
		return err
	}
	if rec == nil {
		return nil
	}
	return w.publishAll(ctx, []*nats.Msg{rec})
}

// publishAll stores msgs, pipelined, and retries the ones that fail with backoff until they
// are stored or ctx ends. Every message must carry a Nats-Msg-Id, so a retry of one that was
// stored after all is dropped as a duplicate.
func (w *Worker) publishAll(ctx context.Context, msgs []*nats.Msg) error {
	var b *backoff.ExponentialBackOff // made on the first failure: nearly every call has none
	for {
		futures := make([]jetstream.PubAckFuture, len(msgs))
		var failed []*nats.Msg
		var lastErr error
		for i, m := range msgs {
			if futures[i], lastErr = w.js.PublishMsgAsync(m); lastErr != nil {
				failed = append(failed, m)
			}
		}
		until := time.Now().Add(ackWait)
		for i, f := range futures {
			if f == nil {
				continue
			}
			if err := natsutil.AwaitAck(ctx, f, until); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				lastErr = err
				failed = append(failed, msgs[i]) // published again under the same msg id
			}
		}
		if len(failed) == 0 {
			return nil
		}
		if b == nil {
			b = publishBackoff()
		}
		d := b.NextBackOff()
		w.log.Warn("publish failed; retrying", "messages", len(failed), "in", d, "err", lastErr)
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return fmt.Errorf("publish %d messages: %w (last error: %w)", len(failed), ctx.Err(), lastErr)
		}
		msgs = failed
	}
}

// publishBackoff is publishAll's retry schedule: 50 ms first, doubling up to 5 s, forever.
// The options, not the fields: the constructor's Reset takes the first interval from them
// (fields set afterwards left the first retry at the default 500 ms).
func publishBackoff() *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(backoff.WithInitialInterval(50*time.Millisecond),
		backoff.WithMaxInterval(5*time.Second), backoff.WithMaxElapsedTime(0))
}

// userInput turns an inbound message into the user message the model sees: group messages
// carry the trusted sender prefix (seed Grill #11); images arrive as image blocks when the
// adapter inlined them, else as a reference the model can read.
//
// Every text in it that a user controls goes through the one sanitizer (usertext.go,
// sanitizeUserContent): the text, every field of every segment, and the parts together, so
// that a spoofed sender prefix reaches the model neither whole nor split across segments.
func (a *actor) userInput(m *events.IMMessage, text string) llm.Message {
	clean := *m
	clean.Content = identity.SanitizeSegments(m.Content) // events published by others bypass ingest's pass
	if text == "" {
		text = identity.StripBotMention(strings.TrimSpace(identity.StripSpoofedSender(clean.Content.PlainText())), &clean)
	} else {
		text = identity.StripSpoofedSender(text)
	}
	content := sanitizeUserContent(append([]llm.Content{llm.Text(text)}, mediaParts(&clean)...))
	if m.Scene.Type != events.ScopePrivate {
		content[0].Text = identity.SenderPrefix(m.Sender) + content[0].Text
	}
	msg := llm.Message{Role: llm.RoleUser, Content: content, Timestamp: m.Time}
	if msg.Timestamp == 0 {
		msg.Timestamp = time.Now().UnixMilli()
	}
	return msg
}

// imageRefPrefix marks an image a message referenced by URL (see userInput).
const imageRefPrefix = "[image: "

// inlineImages replaces image references with image blocks for a vision model. A reference
// that cannot be fetched stays text, so the model still knows an image was there.
func (w *Worker) inlineImages(ctx context.Context, input []llm.Message) []llm.Message {
	if w.opts.FetchImage == nil && w.media == nil {
		return input
	}
	out := make([]llm.Message, len(input))
	for i, m := range input {
		m.Content = append([]llm.Content(nil), m.Content...)
		for j, c := range m.Content {
			ref, ok := strings.CutPrefix(c.Text, imageRefPrefix)
			if c.Type != llm.ContentText || !ok {
				continue
			}
			url := strings.TrimSuffix(ref, "]")
			data, mime, err := w.fetchImage(ctx, url)
			if err != nil {
				w.log.Warn("image not inlined", "url", url, "err", err)
				m.Content[j] = llm.Text(unfetchedImage(err))
				continue
			}
			m.Content[j] = llm.Image(base64.StdEncoding.EncodeToString(data), mime)
		}
		out[i] = m
	}
	return out
}

// turnLog is what the logs hold about one turn: its records in AGENT_EVENTS and, for a turn
// closed by its commit, that commit in AGENT_CTX.
type turnLog struct {
	started   *events.TurnStarted
	messages  []llm.Message
	committed bool
	failed    bool
	commitSeq uint64 // set when the commit is known only from AGENT_CTX (no turn_committed record)
	closes    bool   // the commit is the turn's closing record: no turn_committed is written for it
}

// readTurn loads what the logs hold about a turn (resume). A turn that started, did not fail
// and has no turn_committed record may have been closed by its context commit: that is looked
// for in AGENT_CTX after the context the turn started from, and when found the turn counts as
// committed with the commit's messages.
func (w *Worker) readTurn(ctx context.Context, sk events.SessionKey, turn string) (*turnLog, error) {
	return w.readTurnSince(ctx, sk, turn, time.Time{})
}

// readTurnSince is readTurn reading the session's events stored at or after since only (zero:
// all of them); see store.TurnLog.ReadTurnSince.
func (w *Worker) readTurnSince(ctx context.Context, sk events.SessionKey, turn string, since time.Time) (*turnLog, error) {
	recs, err := w.turnlog.ReadTurnSince(ctx, sk, turn, since)
	if err != nil {
		return nil, err
	}
	tl := &turnLog{}
	byIndex := map[int]llm.Message{}
	var session string
	for _, r := range recs {
		switch e := r.Event.(type) {
		case *events.Event[events.TurnStarted]:
			tl.started = &e.Data
			session = e.Session
		case *events.Event[events.MessageEnd]:
			byIndex[e.Data.Index] = e.Data.Message
		case *events.Event[events.TurnCommitted]:
			tl.committed = true
		case *events.Event[events.TurnFailed]:
			tl.failed = true
		}
	}
	// Indexes count the prompts, which turn_started holds; message_end records follow them.
	first := 0
	if tl.started != nil {
		tl.messages = append(tl.messages, tl.started.Input...)
		first = len(tl.started.Input)
	}
	for i := first; ; i++ {
		m, ok := byIndex[i]
		if !ok {
			break
		}
		tl.messages = append(tl.messages, m)
	}
	if tl.started == nil || tl.committed || tl.failed {
		return tl, nil
	}
	sid, err := events.ParseSessionID(session)
	if err != nil {
		return tl, nil // a record without its session id (not written by agentbus): no commit to look for
	}
	mark, found, err := w.ctxlog.FindTurnCommit(ctx, sid, turn, tl.started.ContextSeq)
	if err != nil {
		return nil, err
	}
	if found {
		tl.messages, tl.committed, tl.commitSeq, tl.closes = mark.Messages, true, mark.Seq, mark.Closes
	}
	return tl, nil
}

// resumeAll restarts what the previous owner left open: running turns continue from their
// events, queued and collecting turns start from their inbox events. A turn whose trigger was
// merged into another open turn (interrupt) was superseded and is closed.
func (a *actor) resumeAll(sess *store.Session) {
	merged := map[uint64]bool{}
	for _, ot := range sess.OpenTurns {
		for _, s := range ot.Merged {
			merged[s] = true
		}
	}
	for _, ot := range sess.OpenTurns {
		if merged[ot.InboxSeq] {
			_, _ = a.w.sessions.Update(a.ctx, a.sk, func(s *store.Session) error { s.CloseTurn(ot.ID); return nil })
			continue
		}
		a.resume(sess, ot)
	}
}

// inboxEvent reads one SESSION_IN event of this session.
func (a *actor) inboxEvent(seq uint64) (events.Any, error) {
	raw, err := natsutil.GetMsg(a.ctx, a.w.js, a.w.inbox, natsutil.MsgQuery{Seq: seq})
	if err != nil {
		return nil, fmt.Errorf("read inbox %d: %w", seq, err)
	}
	return events.Decode(raw.Data)
}

// inboxMessage rebuilds the user message an inbox event contributed to a turn, and the chat
// message to reply to when it has one.
func (a *actor) inboxMessage(ev events.Any) (llm.Message, *events.IMMessage, bool) {
	switch e := ev.(type) {
	case *events.Event[events.UserMessage]:
		text, hooked := a.receivedHook(e) // hooks.go
		if hooked.Blocked {
			return llm.Message{}, nil, false
		}
		return a.userInput(&e.Data.Message, text), &e.Data.Message, true
	case *events.Event[events.Steer]:
		return llm.UserText(e.Data.Text, e.Time), e.Data.Message, true
	case *events.Event[events.FollowUp]:
		return llm.UserText(e.Data.Text, e.Time), e.Data.Message, true
	}
	return llm.Message{}, nil, false
}

// resume restarts one open turn.
func (a *actor) resume(sess *store.Session, ot store.OpenTurn) {
	sid, err := sess.ID()
	if err != nil {
		return
	}
	var tl *turnLog
	err = store.RetryTransient(a.ctx, func() error {
		var err error
		tl, err = a.w.readTurnSince(a.ctx, a.sk, ot.ID, openTurnSince(ot))
		return err
	})
	if err != nil {
		// The turn stays open and its trigger unacked: whoever takes the session next resumes
		// it. Going on without it would ack the trigger and lose the turn.
		if a.ctx.Err() == nil {
			a.handOver("read open turn "+ot.ID, err)
		}
		return
	}
	if tl.started == nil { // queued or collecting, or started without a record yet: rebuild its input
		pt := &pendingTurn{id: ot.ID, seq: ot.InboxSeq, merged: ot.Merged, msg: a.syntheticTarget(events.Sender{ID: "unknown"}, ""),
			restarted: true}
		seqs := append([]uint64{ot.InboxSeq}, ot.Merged...)
		slices.Sort(seqs)
		for _, seq := range seqs {
			var ev events.Any
			err := store.RetryTransient(a.ctx, func() error {
				var err error
				ev, err = a.inboxEvent(seq)
				return err
			})
			if errors.Is(err, jetstream.ErrMsgNotFound) || errors.Is(err, events.ErrInvalid) {
				a.log.Error("rebuild open turn: inbox event gone or unreadable", "turn", ot.ID, "seq", seq, "err", err)
				continue
			}
			if err != nil {
				if a.ctx.Err() == nil {
					a.handOver("rebuild open turn "+ot.ID, err)
				}
				return
			}
			if m, target, ok := a.inboxMessage(ev); ok {
				pt.input = append(pt.input, m)
				if target != nil {
					pt.msg = *target
				}
				pt.trace = ev.EventMeta().Trace
			}
		}
		if len(pt.input) == 0 {
			_, _ = a.w.sessions.Update(a.ctx, a.sk, func(s *store.Session) error { s.CloseTurn(ot.ID); return nil })
			return
		}
		a.mu.Lock()
		a.ready = append(a.ready, pt)
		a.mu.Unlock()
		return
	}
	a.resumeWith(sid, sess.SystemPrompt, ot, tl, true)
}

// resumeWith launches a turn again from what its log holds; inRecord says whether the session
// record lists it.
func (a *actor) resumeWith(sid events.SessionID, persona string, ot store.OpenTurn, tl *turnLog, inRecord bool) {
	var model *llm.Model
	var err error
	if tl.started != nil {
		model, err = a.w.opts.Models.GetModel(tl.started.Model.Provider, tl.started.Model.ID)
	}
	if tl.started == nil || err != nil {
		if model, err = a.w.defaultModel(); err != nil {
			a.log.Error("resume: no model", "turn", ot.ID, "err", err)
			return
		}
	}
	target := a.syntheticTarget(events.Sender{ID: "unknown"}, "")
	if ev, err := a.inboxEvent(ot.InboxSeq); err == nil {
		if _, m, ok := a.inboxMessage(ev); ok && m != nil {
			target = *m
		}
	}
	pt := pendingTurn{id: ot.ID, seq: ot.InboxSeq, msg: target}
	if tl.started != nil {
		pt.input = tl.started.Input
		for _, m := range tl.started.Merged {
			pt.merged = append(pt.merged, m.Seq)
		}
	} else {
		pt.merged = ot.Merged
	}
	t := &turnRun{pendingTurn: pt, a: a, sid: sid, sidStr: sid.String(), model: model, persona: persona, done: make(chan struct{}), records: a.w.turnlog.Writer(), steerSeqs: ot.Steers, resumed: true,
		commitRecord: tl.commitSeq > 0 && !tl.closes, writeCursor: tl.committed && !inRecord}
	if inRecord {
		t.inRecord.Store(recordYes)
	}
	// Queue again the steers and follow-ups the turn had not consumed (its persisted messages
	// carry them with the inbox event's time).
	for _, seq := range ot.Steers {
		ev, err := a.inboxEvent(seq)
		if err != nil {
			continue
		}
		m, _, ok := a.inboxMessage(ev)
		if !ok || slices.ContainsFunc(tl.messages, func(p llm.Message) bool {
			return p.Role == m.Role && p.Timestamp == m.Timestamp && p.TextContent() == m.TextContent()
		}) {
			continue
		}
		if _, follow := ev.(*events.Event[events.FollowUp]); follow {
			t.followUp(seq, m)
		} else {
			t.steer(seq, m)
		}
	}
	a.log.Info("resuming turn", "turn", ot.ID, "persisted", len(tl.messages), "committed", tl.committed)
	a.launch(t, tl)
}

// openTurnSince is where to read an open turn's events from: its start less ten minutes for
// the difference between the starting worker's clock and the server's (zero when unknown:
// the session's whole log is read).
func openTurnSince(ot store.OpenTurn) time.Time {
	if ot.StartedAt <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ot.StartedAt).Add(-10 * time.Minute)
}
