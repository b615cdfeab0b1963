package turn

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/compaction"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/inbox"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/store"
	"github.com/agentbus/agentbus/pkg/turn/ownership"
)

// actor is the single writer of one session while its worker's claim on it is in force.
type actor struct {
	w      *Worker
	sk     events.SessionKey
	subj   string
	log    *slog.Logger
	killed atomic.Bool
	dead   atomic.Bool
	lost   atomic.Bool // the session went (or is handed) to another worker
	// shedTo names the replica this one's rebalancing moves the session to; the actor stops
	// if it is idle when it sees it (run), and handTo keeps the target for shutdown.
	shedTo atomic.Pointer[string]
	handTo string

	ctx    context.Context
	cancel context.CancelFunc
	// resultSub brings the session's tool results to the worker's router (nil: each call
	// subscribes itself).
	resultSub *nats.Subscription
	// inSub hears the session's inbox subject as core NATS messages, the moment an event is
	// published (nil: the actor hears of events only through deliveries and rings).
	inSub *nats.Subscription
	poked atomic.Bool // an inbox event was published since the actor last looked
	// heardPast is one more than the largest predecessor (inbox.Prev) of the chained inbox
	// events heard, at heardAt (unix ns): while the cursor is below it, an unread event exists
	// (heardUnread). heardUnchained: an event without the chain was heard since the last look.
	heardPast      atomic.Uint64
	heardAt        atomic.Int64
	heardUnchained atomic.Bool

	claim *ownership.Claim // the session's claim and the lease generation it is confirmed for
	own   owner            // the replica's ownership (the Worker's ownership.Manager)

	// The actor's parts, each a view of it (they hold nothing of their own): rd reads the
	// inbox, cmds runs slash commands, res resumes open turns, cx writes the session's
	// context, hk runs hooks, te handles background-task events, out builds replies.
	rd   reader
	cmds commands
	res  resumer
	cx   contextOps
	hk   hookCalls
	te   taskEvents
	out  replier

	mu sync.Mutex
	// in is the inbox read state: the deliveries this actor still owes an ack, the sequences
	// another replica rang the doorbell for, and the cursor (pkg/inbox; under mu, LOCKS.md).
	in      *inbox.ReadState
	wake    chan struct{}
	turns   map[string]*turnRun // running turns
	latest  *turnRun            // the newest running turn (steer / follow-up target)
	queued  []*pendingTurn      // queue policy: turns waiting for the running one
	ready   []*pendingTurn      // turns to start from the actor goroutine (interrupt merges)
	collect *pendingTurn        // collect policy: the turn being gathered
	closing []*closedTurn       // finished turns still listed as open in the session record
	ctxLast map[string]uint64   // session id -> last AGENT_CTX sequence this actor wrote or read
	kept    []events.SessionID  // ids whose context the cache keeps for this actor (ctxlog.Keep)
	commit  sync.Mutex          // serializes context commits (parallel turns share a snapshot)
	turnsWG sync.WaitGroup
	// compactMu serializes compactions and tree moves (compact.go); never taken while holding commit.
	compactMu sync.Mutex

	// chatPolicy is the chat's /queue policy from the session record ("" = ai.agent.concurrency).
	chatPolicy string // under mu

	// checkUpTo: inbox events up to this sequence were in the log when the actor started, past
	// its durable cursor; an earlier owner may have started their turns (startTurn checks the
	// turn log for those, takeOver). lastCommit is the session's last context commit then.
	checkUpTo  uint64
	lastCommit store.CommitMark
	// created: the actor created the session record at its start (store.Session.Created) and no
	// context commit of it names a turn, so no earlier owner can have started a turn of it, and
	// takeOver has nothing to look for. Its
	// look (the turn log, and since issue 40 the tool call queue and results a step may ride
	// on) cost a new chat's first turn hundreds of ms behind a busy queue.
	created bool
	listed  map[string]bool // turns the session record listed as open at the start
	// recModel is the session record's model as last read or written: a finished turn that
	// is not listed in the record writes it only when its model differs.
	recModel string // under mu

	// est remembers token estimates of the session's cached context messages, which every turn
	// sizes again (auto compaction, L1 before each model call).
	est compaction.Estimator
	// parent is the span context the inbox event being handled carried (tracing.ParentOf;
	// only with tracing on). Only the actor's goroutine (step, handle) uses it.
	parent string
}

func newActor(w *Worker, sk events.SessionKey, claim *ownership.Claim) *actor {
	ctx, cancel := context.WithCancel(w.ctx)
	a := &actor{
		w: w, sk: sk, subj: events.AgentInSubject(sk), claim: claim, own: w.own,
		log: w.log.With("session", sk.String()), ctx: ctx, cancel: cancel,
		in: inbox.NewReadState(), wake: make(chan struct{}, 1),
		turns: map[string]*turnRun{}, ctxLast: map[string]uint64{},
	}
	a.rd, a.cmds, a.res, a.cx, a.hk, a.te, a.out = reader{a}, commands{a}, resumer{a}, contextOps{a}, hookCalls{a}, taskEvents{a}, replier{a}
	return a
}

// leaseToken is the fencing token of the actor's claim.
func (a *actor) leaseToken() uint64 { return a.claim.Token() }

// earlier returns the done channels of running turns triggered before seq: in every policy a
// turn commits and replies only after the turns before it, so replies keep the inbox order.
func (a *actor) earlier(seq uint64) []chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []chan struct{}
	for _, t := range a.turns {
		if t.seq < seq {
			out = append(out, t.done)
		}
	}
	return out
}

// Run is the actor's life: resume what the previous owner left open, then follow the inbox
// (ownership.Session; the ownership.Manager runs it on a goroutine of its own).
func (a *actor) Run() {
	defer a.shutdown()
	// A start waits for one of the replica's start slots and holds it until its first look at
	// the inbox is done (the turns its previous owner left open are relaunched by then): a
	// takeover starts hundreds of sessions at once, and their reads, all in flight together,
	// delayed every one of them, the lease renewals and the claims alike (ownership/starts.go).
	release, err := a.own.Starting(a.ctx)
	if err != nil {
		return
	}
	defer release()
	// A cold start is on the reply path of the message that woke the session: the reads that
	// do not depend on each other go out together (the session record and the inbox's last
	// event here, the context below while the inbox is read). They go to stream leaders, which
	// a NATS node's failover leaves unreachable for a few seconds: retried while the actor
	// holds the claim (deliveries wait in held), so a session taken over then is not left to
	// the redelivery of its events.
	var sess *store.Session
	var cursor uint64
	err = a.rd.retryStart(func() error {
		lastIn := make(chan inboxLast, 1)
		go func() {
			raw, err := natsutil.ConsistentGetMsg(a.ctx, a.w.js, a.w.inbox, natsutil.MsgQuery{LastFor: a.subj})
			lastIn <- inboxLast{raw, err}
		}()
		var err error
		sess, err = a.w.sessions.GetOrCreate(a.ctx, a.sk)
		last := <-lastIn
		if err != nil {
			return fmt.Errorf("load session: %w", err)
		}
		if cursor, err = a.rd.startCursor(sess, last); err != nil {
			return fmt.Errorf("find where the inbox continues: %w", err)
		}
		return nil
	})
	if err != nil {
		if a.ctx.Err() == nil {
			a.handOver("start", err)
		}
		return
	}
	a.created = sess.Created && a.lastCommit.Turn == "" // and no context commit names a turn: a record lost some other way still gets the look
	a.mu.Lock()                                         // know (the doorbell) reads the cursor from another goroutine
	a.in.Pass(cursor)
	a.recModel = sess.Model
	a.listed = map[string]bool{}
	for _, ot := range sess.OpenTurns {
		a.listed[ot.ID] = true
	}
	a.mu.Unlock()
	if a.checkUpTo > cursor {
		// The leader showed events past the cursor (a turn in flight at a takeover, say):
		// read them as known to exist, so a lagging replica's "not found" is not believed.
		a.Know(a.checkUpTo)
	}
	a.setChatPolicy(sess.Concurrency)
	if len(sess.Ended) > 0 { // ended epochs a previous owner did not finish archiving (epochs.go)
		a.w.settler.settle(a.sk, 0)
	}
	if sid, err := sess.ID(); err == nil {
		a.rd.prefetchContext(sid)
	}
	if a.resultSub, err = a.w.nc.ChanSubscribe(events.ToolResultSessionFilter(a.sk), a.w.router.In()); err != nil {
		a.log.Warn("subscribe to tool results; calls subscribe one by one", "err", err)
	}
	// Subscribed before the first look at the inbox below, so that no event published from
	// now on goes unheard.
	if a.inSub, err = a.w.nc.ChanSubscribe(a.subj, a.w.inboxHeard); err != nil {
		a.log.Debug("subscribe to the inbox subject; deliveries and rings wake the actor", "err", err)
		a.inSub = nil
	}
	a.res.resumeAll(sess)
	idleSince := time.Now()
	probe := true // what came in while nobody owned the session
	// One timer each for the loop's waits, reset on every round instead of a time.After per
	// wait (a round runs several times per turn; since Go 1.23 a Reset timer never delivers a
	// stale tick).
	tick, closeT, collectT, pokeT := stoppedTimer(), stoppedTimer(), stoppedTimer(), stoppedTimer()
	defer func() { tick.Stop(); closeT.Stop(); collectT.Stop(); pokeT.Stop() }()
	var pokeDue <-chan time.Time // a poke waits for its event's delivery until then
	var pokeWait time.Duration   // the wait pokeDue was set for
	lookNow := false             // the wait ended with no delivery: read the log
	for a.ctx.Err() == nil {
		a.startWaiting()
		var progressed bool
		var err error
		poked := a.poked.Swap(false)
		look := probe || lookNow || a.rd.behind()
		// A poke for an event already read (its delivery came first) costs no look.
		if poked && !look && pokeDue == nil && (a.heardUnchained.Swap(false) || a.rd.heardUnread()) {
			pokeWait = pokeGrace
			pokeDue = resetTimer(pokeT, pokeWait)
		}
		if look {
			pokeT.Stop()
			pokeDue, lookNow = nil, false
			progressed, err = a.rd.step()
			probe = probe && err != nil // a failed look is looked again
			if !probe {
				release() // started: the first look is done
			}
			if err == nil && !a.rd.behind() && a.rd.heardUnread() {
				// A chained event heard is still unread and no delivery or ring for it is
				// here: it is not stored yet (or this look was for an earlier one). Look
				// again, waiting twice as long each time the look found nothing new.
				pokeWait = max(pokeGrace, pokeWait)
				if !progressed {
					pokeWait *= 2
				}
				pokeDue = resetTimer(pokeT, pokeWait)
			}
		}
		if err != nil {
			if a.ctx.Err() == nil {
				a.log.Error("inbox step failed", "err", err)
				a.sleep(500 * time.Millisecond)
			}
			continue
		}
		a.rd.ackDone()
		if to := a.shedTo.Load(); to != nil {
			if !progressed && pokeDue == nil && a.idle() {
				a.handTo = *to
				return
			}
			a.shedTo.Store(nil) // busy again: it stays here
		}
		if progressed {
			idleSince = time.Now()
			continue
		}
		if pokeDue == nil && a.idle() { // a poke waiting for its delivery is not idle
			if time.Since(idleSince) > a.w.opts.IdleRelease {
				return
			}
		} else {
			idleSince = time.Now()
		}
		select {
		case <-a.ctx.Done():
		case <-a.wake:
		case <-pokeDue:
			pokeDue, lookNow = nil, true
		case <-a.collectDue(collectT):
			a.flushCollect()
		case <-a.closeDue(closeT):
			if _, err := a.updateSession(a.ctx, nil); err != nil && a.ctx.Err() == nil {
				a.log.Warn("record finished turns", "err", err)
			}
		case <-resetTimer(tick, a.w.opts.IdleRelease/4):
		}
	}
}

func (a *actor) sleep(d time.Duration) {
	select {
	case <-a.ctx.Done():
	case <-time.After(d):
	}
}

func (a *actor) idle() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.turns) == 0 && a.in.Empty() && len(a.queued) == 0 && len(a.ready) == 0 && a.collect == nil && len(a.closing) == 0
}

// closeDelay bounds how long a finished turn stays listed as open in the session record. Its
// removal rides on the record's next write, normally the cursor move for the session's next
// message, which saves a KV write per turn on a busy session; its trigger stays unacked until
// then, so a crash meanwhile resumes the turn as committed (the reply is republished under
// the same ids and dropped as a duplicate).
const closeDelay = time.Second

// closedTurn is a finished turn whose removal from the session record is pending.
type closedTurn struct {
	pendingTurn
	model string // provider/id the turn used, recorded as the session's model
	since time.Time
}

// finished notes that t is done; the session record learns it with its next write. A turn
// the record does not list leaves nothing to write unless its model is new to the record.
func (a *actor) finished(t *turnRun) {
	model := t.model.Provider + "/" + t.model.ID
	a.mu.Lock()
	if t.inRecord.Load() != recordNo || model != a.recModel || t.writeCursor {
		a.closing = append(a.closing, &closedTurn{pendingTurn: t.pendingTurn, model: model, since: time.Now()})
	}
	// Under the lock that updateSession lists running turns under: no write from now on
	// lists the turn (it stays among the actor's turns until its goroutine ends), else one
	// that was not listed would be left in the record as running.
	t.closed.Store(true)
	a.mu.Unlock()
}

// closeDue is t's channel, reset to fire when the oldest finished turn is due to be recorded,
// or nil (t stopped) when none waits.
func (a *actor) closeDue(t *time.Timer) <-chan time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.closing) == 0 {
		t.Stop()
		return nil
	}
	return resetTimer(t, time.Until(a.closing[0].since.Add(closeDelay)))
}

// stoppedTimer is a timer that has not been started, for resetTimer.
func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// resetTimer restarts t to fire after d and returns its channel.
func resetTimer(t *time.Timer, d time.Duration) <-chan time.Time {
	t.Reset(d)
	return t.C
}

// updateSession is every write of the actor to its session record: fn (may be nil) plus the
// removal of the finished turns that waited for a write. The record's cursor never passes a
// turn that is neither done nor listed. A write with fn moves the cursor as far as the actor
// has read, so running turns the record does not list yet (started from their inbox events)
// are listed by the same write, before fn. A write without fn only records finished turns: it
// lists nothing and its cursor stops short of the oldest turn the record does not list, whose
// own commit carries the cursor. Listing it there would cost it a write of its own when it
// finishes, and on a busy chat that write would list the next running turn, and so on: a
// write and a delivery held a second longer for nearly every turn.
func (a *actor) updateSession(ctx context.Context, fn func(*store.Session)) (*store.Session, error) {
	a.mu.Lock()
	closing := slices.Clone(a.closing)
	// Everything up to the actor's cursor is done, or running (listed below, or the cursor
	// stops short of it), or queued (listed when it was queued).
	cursor := a.in.Cursor()
	var unlisted []*turnRun
	for _, t := range a.turns {
		switch {
		case t.closed.Load(): // done, or its removal is on its way (finished)
		case fn == nil && t.inRecord.Load() != recordYes:
			cursor = min(cursor, t.firstSeq()-1)
		case t.inRecord.CompareAndSwap(recordNo, recordPending):
			unlisted = append(unlisted, t)
		}
	}
	a.mu.Unlock()
	now := time.Now().UnixMilli()
	s, err := a.w.sessions.Update(ctx, a.sk, func(s *store.Session) error {
		for _, t := range unlisted {
			t.mu.Lock()
			steers := slices.Clone(t.steerSeqs)
			t.mu.Unlock()
			s.SetOpenTurn(store.OpenTurn{ID: t.id, State: "running", InboxSeq: t.seq, Merged: t.merged, Steers: steers, StartedAt: now})
		}
		for _, c := range closing {
			s.CloseTurn(c.id)
			s.Model = c.model
		}
		s.InboxCursor = max(s.InboxCursor, cursor)
		if fn != nil {
			fn(s)
		}
		return nil
	})
	state := recordYes
	if err != nil {
		state = recordNo
	}
	for _, t := range unlisted {
		t.inRecord.Store(state)
	}
	if err == nil {
		a.mu.Lock()
		a.recModel = s.Model
		if len(closing) > 0 {
			a.closing = slices.DeleteFunc(a.closing, func(c *closedTurn) bool { return slices.Contains(closing, c) })
		}
		a.mu.Unlock()
	}
	return s, err
}

// advance moves the cursor past seq, recording a started turn in the same CAS when given.
func (a *actor) advance(seq uint64, open *store.OpenTurn) error {
	_, err := a.updateSession(a.ctx, func(s *store.Session) {
		if seq > s.InboxCursor {
			s.InboxCursor = seq
		}
		if open != nil {
			s.SetOpenTurn(*open)
		}
		s.LastActivity = time.Now().UnixMilli()
	})
	if err != nil {
		return fmt.Errorf("advance cursor to %d: %w", seq, err)
	}
	a.mu.Lock()
	a.in.Pass(seq)
	a.mu.Unlock()
	return nil
}

// LeaseLost stops the actor at once: another worker may own the session now, and fencing
// makes sure nothing this actor still tries to commit lands.
func (a *actor) LeaseLost(err error) {
	a.log.Warn("lease lost, stopping actor", "err", err)
	a.stopForOther()
}

// handOver stops the actor because it cannot go on with the session here (a turn or a resume
// failed past its retries): its deliveries go back to JetStream unacked and its claim is
// given up, so this or another replica takes the session again and resumes what is open, as
// after a crash. Nothing of it is acked or dropped.
func (a *actor) handOver(why string, err error) {
	a.log.Warn("handing the session over", "why", why, "err", err)
	a.stopForOther()
}

func (a *actor) stopForOther() {
	a.lost.Store(true)
	a.dead.Store(true)
	a.cancel()
}

// shutdown ends the actor: running turns are cancelled (they stay open in the session record),
// held deliveries are handed back to JetStream, and the claim is given up unless the worker is
// being killed.
func (a *actor) shutdown() {
	a.dead.Store(true)
	a.cancel()
	a.turnsWG.Wait()
	a.commit.Lock()
	for _, sid := range a.kept {
		a.w.ctxlog.Release(sid)
	}
	a.kept = nil
	a.commit.Unlock()
	if a.resultSub != nil {
		_ = a.resultSub.Unsubscribe()
	}
	if a.inSub != nil {
		_ = a.inSub.Unsubscribe()
	}
	if a.killed.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	a.mu.Lock()
	closing := len(a.closing) > 0
	a.mu.Unlock()
	if closing && !a.lost.Load() {
		// Leave a clean record behind, and ack the triggers of the turns that finished.
		if _, err := a.updateSession(ctx, nil); err != nil {
			a.log.Warn("record finished turns", "err", err)
		}
		a.rd.ackDone()
	}
	a.mu.Lock()
	held := a.in.Close()
	a.mu.Unlock()
	claim := a.claim.Current()
	for _, msgs := range held {
		for _, m := range msgs {
			a.w.progress.Remove(m)
			_ = m.Nak()
		}
	}
	if err := a.w.leases.Unclaim(ctx, claim); err == nil && a.handTo != "" {
		a.mu.Lock()
		cursor := a.in.Cursor()
		a.mu.Unlock()
		a.own.HandOff(a.sk, a.handTo, cursor) // ownership/rebalance.go
	}
}

// handle applies one inbox event.
func (a *actor) handle(ev events.Any, seq uint64) error {
	if err := a.cx.archiveIfIdle(ev, seq); err != nil { // sessions_idle.go
		return err
	}
	policy := a.concurrency()
	switch e := ev.(type) {
	case *events.Event[events.UserMessage]:
		text, hooked := a.hk.receivedHook(e) // hooks.go
		if hooked.Blocked {
			return a.hk.blockMessage(e, seq, hooked)
		}
		in := a.out.userInput(&e.Data.Message, text)
		pt := &pendingTurn{seq: seq, input: []llm.Message{in}, msg: e.Data.Message, trace: e.Trace, accepted: e.Time, parent: a.parent}
		return a.schedule(pt, policy)
	case *events.Event[events.Listen]:
		m := a.out.userInput(&e.Data.Message, "")
		if err := a.cx.appendContext(seq, []llm.Message{m}); err != nil {
			return err
		}
		return a.advance(seq, nil)
	case *events.Event[events.Steer]:
		text := llm.UserText(e.Data.Text, e.Time) // the event time makes it recognizable on resume
		if t := a.runningTurn(); t != nil {
			t.steer(seq, text)
			return a.recordSteer(t, seq)
		}
		return a.schedule(a.out.pendingFrom(seq, text, e.Data.Message, e.Data.Sender, e.Trace), "parallel")
	case *events.Event[events.FollowUp]:
		text := llm.UserText(e.Data.Text, e.Time)
		if t := a.runningTurn(); t != nil {
			t.followUp(seq, text)
			return a.recordSteer(t, seq)
		}
		return a.schedule(a.out.pendingFrom(seq, text, e.Data.Message, e.Data.Sender, e.Trace), "parallel")
	case *events.Event[events.Abort]:
		n := a.abortAll(e.Data.Reason)
		a.log.Info("abort", "turns", n, "by", e.Data.Sender.ID)
		if n == 0 { // an aborted turn says so in its reply; nothing running must be said too
			a.out.replyText(&pendingTurn{seq: seq, trace: e.Trace, msg: a.out.syntheticTarget(e.Data.Sender, e.Data.ReplyTo)},
				fmt.Sprintf("cmd%d", seq), "Nothing to cancel: no turn is running.")
		}
		return a.advance(seq, nil)
	case *events.Event[events.Command]:
		return a.cmds.command(e, seq)
	case *events.Event[events.Scheduled]:
		return a.te.onScheduled(e, seq)
	case *events.Event[events.TaskResult]:
		return a.te.onTaskResult(e, seq)
	case *events.Event[events.SubagentResult]:
		text := llm.TextContentOf(e.Data.Content)
		m := llm.UserText("[background task "+e.Data.TaskID+" finished]\n"+text, time.Now().UnixMilli())
		return a.schedule(&pendingTurn{seq: seq, input: []llm.Message{m}, msg: a.out.syntheticTarget(events.Sender{ID: "system"}, ""), trace: e.Trace,
			parent: a.parent}, "parallel")
	}
	a.w.deadLetter(a.subj, seq, nil, nil, "unhandled_event", fmt.Errorf("event type %s is not handled by the turn worker", ev.EventMeta().Type))
	return a.advance(seq, nil)
}

func (a *actor) runningTurn() *turnRun {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.latest
}

func (a *actor) abortAll(reason string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := len(a.queued)
	for _, t := range a.turns {
		if t.replied.Load() {
			continue // answered already, only closing: there is nothing left to cancel
		}
		t.abort(reason)
		n++
	}
	// Queued turns are dropped with their inputs committed as context (nothing is lost).
	for _, q := range a.queued {
		q.cancelled = true
	}
	return n
}

// schedule starts, queues, steers into, interrupts or collects a user turn per policy.
func (a *actor) schedule(pt *pendingTurn, policy string) error {
	a.mu.Lock()
	running := a.latest
	a.mu.Unlock()
	switch {
	case policy == "queue" && (running != nil || a.hasQueued()):
		return a.enqueue(pt)
	case running == nil && policy != "collect":
		pt.fromInbox = true
		return a.startTurn(pt)
	case policy == "steer":
		running.steer(pt.seq, pt.input...)
		return a.recordSteer(running, pt.seq)
	case policy == "interrupt":
		next, ok := running.interruptWith(pt)
		if !ok { // it finished meanwhile: nothing to interrupt
			pt.fromInbox = true
			return a.startTurn(pt)
		}
		// The merged turn starts when the interrupted one has stopped; recorded as queued so
		// that a takeover starts it with the same input.
		return a.advance(pt.seq, &store.OpenTurn{ID: turnID(next.seq), State: "queued", InboxSeq: next.seq,
			Merged: next.merged, StartedAt: time.Now().UnixMilli()})
	case policy == "collect":
		return a.gather(pt)
	}
	pt.fromInbox = true
	return a.startTurn(pt)
}

// enqueue records a queued turn as open (state "queued") so that a takeover starts it.
func (a *actor) enqueue(pt *pendingTurn) error {
	pt.id = turnID(pt.seq)
	if err := a.advance(pt.seq, &store.OpenTurn{ID: pt.id, State: "queued", InboxSeq: pt.seq, StartedAt: time.Now().UnixMilli()}); err != nil {
		return err
	}
	a.mu.Lock()
	a.queued = append(a.queued, pt)
	a.mu.Unlock()
	return nil
}

// gather adds a message to the collect window; the turn starts when the window closes. The
// window so far is recorded as an open turn ("collecting"), so a takeover starts it.
func (a *actor) gather(pt *pendingTurn) error {
	a.mu.Lock()
	window := a.w.opts.CollectWindow
	if a.collect == nil {
		a.collect = pt
	} else {
		a.collect.merge(pt)
	}
	a.collect.due = time.Now().Add(window)
	c := a.collect
	ot := store.OpenTurn{ID: turnID(c.seq), State: "collecting", InboxSeq: c.seq, Merged: append([]uint64(nil), c.merged...), StartedAt: time.Now().UnixMilli()}
	a.mu.Unlock()
	return a.advance(pt.seq, &ot)
}

// recordSteer records that inbox event seq was queued into t, with the cursor past it.
func (a *actor) recordSteer(t *turnRun, seq uint64) error {
	t.mu.Lock()
	t.steerSeqs = append(t.steerSeqs, seq)
	t.mu.Unlock()
	_, err := a.updateSession(a.ctx, func(s *store.Session) {
		s.InboxCursor = max(s.InboxCursor, seq)
		if ot := s.OpenTurn(t.id); ot != nil && !slices.Contains(ot.Steers, seq) {
			ot.Steers = append(ot.Steers, seq)
		}
		s.LastActivity = time.Now().UnixMilli()
	})
	if err != nil {
		return fmt.Errorf("record steer %d: %w", seq, err)
	}
	a.mu.Lock()
	a.in.Pass(seq)
	a.mu.Unlock()
	return nil
}

// collectDue is t's channel, reset to fire when the collected messages are due, or nil (t
// stopped) when nothing is being collected.
func (a *actor) collectDue(t *time.Timer) <-chan time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.collect == nil {
		t.Stop()
		return nil
	}
	return resetTimer(t, time.Until(a.collect.due))
}

func (a *actor) flushCollect() {
	a.mu.Lock()
	pt := a.collect
	if pt == nil || time.Now().Before(pt.due) {
		a.mu.Unlock()
		return
	}
	a.collect = nil
	a.mu.Unlock()
	if err := a.startTurn(pt); err != nil {
		a.log.Error("start collected turn", "err", err)
	}
}

// turnDone is called by a finished turn: it forgets the turn and wakes the actor, which
// starts what waited for it (startWaiting). Starting turns only from the actor goroutine keeps
// their order the inbox order.
func (a *actor) turnDone(t *turnRun, next *pendingTurn) {
	a.mu.Lock()
	delete(a.turns, t.id)
	if a.latest == t {
		a.latest = nil
		for _, o := range a.turns {
			if a.latest == nil || o.seq > a.latest.seq {
				a.latest = o
			}
		}
	}
	if next != nil {
		a.ready = append(a.ready, next)
	}
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

func (a *actor) hasQueued() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.queued) > 0
}

// startWaiting starts interrupt merges, and the next queued turn when none is running.
func (a *actor) startWaiting() {
	a.mu.Lock()
	ready := a.ready
	a.ready = nil
	var next *pendingTurn
	for a.latest == nil && len(a.queued) > 0 && next == nil {
		next = a.queued[0]
		a.queued = a.queued[1:]
		if next.cancelled {
			a.cancelQueued(next)
			next = nil
		}
	}
	a.mu.Unlock()
	if next != nil {
		ready = append(ready, next)
	}
	for _, pt := range ready {
		if err := a.startTurn(pt); err != nil {
			a.log.Error("start turn", "turn", pt.id, "err", err)
		}
	}
}

// cancelQueued closes a queued turn that /cancel dropped, keeping its input as context.
func (a *actor) cancelQueued(pt *pendingTurn) {
	a.turnsWG.Add(1) // owned like a turn: shutdown waits for it
	go func() {
		defer a.turnsWG.Done()
		_ = a.cx.appendContext(pt.seq, pt.input)
		_, _ = a.w.sessions.Update(a.ctx, a.sk, func(s *store.Session) error { s.CloseTurn(pt.id); return nil })
	}()
}

// firedScheduleOnly refuses anything but an inbox.scheduled event that a message schedule put
// into the inbox. The server marks what a schedule fires with Nats-Scheduler (clients cannot
// set it), and identities that may not publish agent.in themselves (the tool worker, for
// schedule_followup) may still publish schedules: without this check a schedule could carry a
// master's command or message into the session.
func firedScheduleOnly(h nats.Header, ev events.Any) error {
	if h.Get(jetstream.SchedulerHeader) == "" {
		return nil
	}
	if _, ok := ev.(*events.Event[events.Scheduled]); ok {
		return nil
	}
	return fmt.Errorf("turn: a message schedule (%s) fired a %s event; schedules may only fire %s", h.Get(jetstream.SchedulerHeader), ev.EventMeta().Type, events.TypeScheduled)
}
