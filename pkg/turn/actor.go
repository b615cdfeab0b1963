package turn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
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
	"github.com/agentbus/agentbus/pkg/tracing"
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

	claim *ownership.Claim // the session's claim and the lease generation it is confirmed for

	mu      sync.Mutex
	held    map[uint64][]jetstream.Msg // deliveries this actor still owes an ack, by stream seq
	known   map[uint64]struct{}        // inbox seqs past the cursor another replica rang the doorbell for
	wake    chan struct{}
	cursor  uint64
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
	listed     map[string]bool // turns the session record listed as open at the start
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
	return &actor{
		w: w, sk: sk, subj: events.AgentInSubject(sk), claim: claim,
		log: w.log.With("session", sk.String()), ctx: ctx, cancel: cancel,
		held: map[uint64][]jetstream.Msg{}, known: map[uint64]struct{}{}, wake: make(chan struct{}, 1),
		turns: map[string]*turnRun{}, ctxLast: map[string]uint64{},
	}
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

// Deliver hands a delivery to the actor, which acks it once its effect is durable
// (ownership.Session).
func (a *actor) Deliver(msg jetstream.Msg, seq uint64) {
	a.mu.Lock()
	if a.held == nil { // shutting down: let the next owner have it
		a.mu.Unlock()
		_ = msg.NakWithDelay(100 * time.Millisecond)
		return
	}
	a.held[seq] = append(a.held[seq], msg)
	a.mu.Unlock()
	a.w.progress.Add(msg) // kept from redelivery until acked or handed back
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// poke tells the actor that an event was published on its inbox subject (inSub): it reads the
// inbox at once instead of waiting for the event's delivery, which may first reach another
// replica and come over by its doorbell. A poke decides nothing: the event may not be stored
// yet when the actor looks (then the delivery brings it, as without the poke), and the
// delivery is still held and acked as always.
func (a *actor) poke() {
	a.poked.Store(true)
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// pokeGrace is how long a poke waits for its event's delivery before the actor reads the log
// for it. The delivery normally follows the core NATS copy within a millisecond, and it
// brings the event with its stream sequence (heldNext), which saves the read, a request to
// the server per event. A delivery that went to another replica ends the wait when its ring
// comes (know), as before there were pokes; the grace bounds the wait when none comes.
const pokeGrace = 10 * time.Millisecond

// nudge wakes the actor without a read of the inbox (rebalance.go: it looks at shedTo).
func (a *actor) nudge() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// Know notes that inbox event seq is in the log (another replica holds its delivery and rang
// the doorbell), so the actor reads up to it without waiting for a delivery of its own.
func (a *actor) Know(seq uint64) {
	a.mu.Lock()
	if a.held == nil || seq <= a.cursor {
		a.mu.Unlock()
		return
	}
	a.known[seq] = struct{}{}
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// Run is the actor's life: resume what the previous owner left open, then follow the inbox
// (ownership.Session; the ownership.Manager runs it on a goroutine of its own).
func (a *actor) Run() {
	defer a.shutdown()
	// A cold start is on the reply path of the message that woke the session: the reads that
	// do not depend on each other go out together (the session record and the inbox's last
	// event here, the context below while the inbox is read). They go to stream leaders, which
	// a NATS node's failover leaves unreachable for a few seconds: retried while the actor
	// holds the claim (deliveries wait in held), so a session taken over then is not left to
	// the redelivery of its events.
	var sess *store.Session
	var cursor uint64
	err := a.retryStart(func() error {
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
		if cursor, err = a.startCursor(sess, last); err != nil {
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
	a.mu.Lock() // know (the doorbell) reads the cursor from another goroutine
	a.cursor = cursor
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
	if sid, err := sess.ID(); err == nil {
		a.prefetchContext(sid)
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
	a.resumeAll(sess)
	idleSince := time.Now()
	probe := true // what came in while nobody owned the session
	// One timer each for the loop's waits, reset on every round instead of a time.After per
	// wait (a round runs several times per turn; since Go 1.23 a Reset timer never delivers a
	// stale tick).
	tick, closeT, collectT, pokeT := stoppedTimer(), stoppedTimer(), stoppedTimer(), stoppedTimer()
	defer func() { tick.Stop(); closeT.Stop(); collectT.Stop(); pokeT.Stop() }()
	var pokeDue <-chan time.Time // a poke waits for its event's delivery until then
	lookNow := false             // the wait ended with no delivery: read the log
	for a.ctx.Err() == nil {
		a.startWaiting()
		var progressed bool
		var err error
		poked := a.poked.Swap(false)
		look := probe || lookNow || a.behind()
		if poked && !look && pokeDue == nil {
			pokeDue = resetTimer(pokeT, pokeGrace)
		}
		if look {
			pokeT.Stop()
			pokeDue, lookNow = nil, false
			progressed, err = a.step()
			probe = probe && err != nil // a failed look is looked again
		}
		if err != nil {
			if a.ctx.Err() == nil {
				a.log.Error("inbox step failed", "err", err)
				a.sleep(500 * time.Millisecond)
			}
			continue
		}
		a.ackDone()
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

// retryStart runs fn until it succeeds, the actor stops, or startRetryFor has passed.
func (a *actor) retryStart(fn func() error) error {
	deadline := time.Now().Add(startRetryFor)
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		err := fn()
		if err == nil || a.ctx.Err() != nil || errors.Is(err, store.ErrInvalid) || time.Now().After(deadline) {
			return err
		}
		a.log.Warn("actor start; retrying", "err", err)
		a.sleep(wait)
	}
}

// startRetryFor bounds how long an actor retries its start (longer than a NATS node's
// failover, whose raft elections take 4–9 s).
const startRetryFor = 30 * time.Second

// startCursor is where the actor continues the inbox: after the session record's cursor, or
// after the inbox sequence the session's last context commit consumed when that is later and
// the commit's turn is known to be done (a turn started from its inbox event writes no
// session record; its commit carries the cursor). Done means its reply is stored: the turn's
// turn_committed record goes out after its reply (publishReply); a turn closed by its commit
// (store.WithClosing) writes no such record, and counts as done once its reply's last part is
// known to be stored (replyStored). It also notes, in checkUpTo, the inbox's last
// sequence now: turn events up to it that come after the cursor may have been started by an
// earlier owner. Both reads go to the stream leaders: they decide what runs again.
func (a *actor) startCursor(sess *store.Session, in inboxLast) (uint64, error) {
	cursor := sess.InboxCursor
	last, err := in.raw, in.err
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return cursor, nil
	case err != nil:
		return 0, fmt.Errorf("last inbox event: %w", err)
	case last.Sequence <= cursor:
		return cursor, nil
	}
	a.checkUpTo = last.Sequence
	sid, err := sess.ID()
	if err != nil {
		return cursor, nil
	}
	mark, err := a.w.ctxlog.LastCommit(a.ctx, sid)
	if err != nil {
		return 0, err
	}
	a.lastCommit = mark
	if mark.InboxSeq <= cursor || mark.Turn == "" {
		return cursor, nil
	}
	// The last commit's turn committed only after every turn before it had replied (earlier),
	// and every other event before its trigger was handled before it started (the actor reads
	// the inbox in order): the inbox is durably done up to its trigger, whatever becomes of the
	// turn itself. Without this a new owner re-read (and re-published) every turn since the
	// session record's last write, hundreds on a busy session: tens of seconds at a takeover.
	before := cursor
	if trig, ok := turnTrigger(mark.Turn); ok && trig > 0 {
		before = max(cursor, trig-1)
	}
	if sess.OpenTurn(mark.Turn) != nil {
		return before, nil // resumeAll resumes it from the record
	}
	if mark.Closes {
		stored, err := a.replyStored(mark)
		if err != nil {
			return 0, err
		}
		if stored {
			return mark.InboxSeq, nil
		}
		return before, nil // takeOver finishes the turn from its commit
	}
	// The turn_committed record follows the context commit; a minute covers the clocks of
	// two stream leaders. A record not seen (a lagging replica) only costs takeOver's work.
	var since time.Time
	if !mark.Time.IsZero() {
		since = mark.Time.Add(-time.Minute)
	}
	committed, err := a.w.turnlog.Committed(a.ctx, a.sk, mark.Turn, since)
	switch {
	case err != nil:
		return 0, fmt.Errorf("turn %s committed: %w", mark.Turn, err)
	case committed:
		return mark.InboxSeq, nil
	}
	return before, nil // takeOver finishes that turn from its commit
}

// inboxLast is the answer to the read of the session's last inbox event (ConsistentGetMsg:
// it decides what runs again, so it must see every acknowledged event; it is read after the
// claim, so it covers every event an earlier owner can have started).
type inboxLast struct {
	raw *jetstream.RawStreamMsg
	err error
}

// prefetchContext loads session id's context in the background, so that the first turn of a
// cold actor finds it cached instead of waiting for the reads (the context's last record,
// then its tail) after the inbox read. It holds the commit lock meanwhile: a turn's
// loadContext, and any commit, waits for it and then knows the log's last sequence (the
// commits' fence) without reading it again. A load that fails leaves nothing behind; the
// turn then loads the context itself, as without the prefetch.
func (a *actor) prefetchContext(id events.SessionID) {
	a.commit.Lock() // taken here, on the actor goroutine, so nothing can read the context first
	a.turnsWG.Add(1)
	go func() {
		defer a.turnsWG.Done()
		defer a.commit.Unlock()
		key := id.String()
		if _, ok := a.ctxLast[key]; ok {
			return
		}
		l, err := a.w.ctxlog.LoadContext(a.ctx, id)
		if err != nil {
			if a.ctx.Err() == nil {
				a.log.Debug("prefetch context", "err", err)
			}
			return
		}
		a.w.ctxlog.Keep(id)
		a.kept = append(a.kept, id)
		a.ctxLast[key] = l.LastSeq
	}()
}

// replyStored reports whether the reply of the turn a closing commit closed is stored: its
// last part (publishReply stores it after the others) is the last message on the chat's IM_OUT
// subject, or its receipt is on IM_SENT (store.FindReceipt). Both reads are the stream
// leaders' answers. False means not
// known: something else went to the chat after it, or it was never stored.
func (a *actor) replyStored(mark store.CommitMark) (bool, error) {
	if mark.ReplyParts == 0 {
		return true, nil // nothing to send
	}
	last := events.OutID(mark.Turn, mark.ReplyParts-1)
	m, err := natsutil.ConsistentGetMsg(a.ctx, a.w.js, a.w.imOut, natsutil.MsgQuery{LastFor: events.IMOutSubject(a.sk)})
	switch {
	case err == nil && m.Header.Get(nats.MsgIdHdr) == last:
		return true, nil
	case err != nil && !errors.Is(err, jetstream.ErrMsgNotFound):
		return false, fmt.Errorf("reply of turn %s stored: %w", mark.Turn, err)
	}
	var since time.Time // the receipt follows the commit
	if !mark.Time.IsZero() {
		since = mark.Time.Add(-store.ReceiptSkew)
	}
	_, err = store.FindReceipt(a.ctx, a.w.js, a.w.imSent, a.sk, last, since)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return false, nil
	}
	return false, fmt.Errorf("reply of turn %s delivered: %w", mark.Turn, err)
}

// turnTrigger is the inbox sequence of the event that started turn id (turnID).
func turnTrigger(id string) (uint64, bool) {
	if len(id) < 2 || id[0] != 't' {
		return 0, false
	}
	seq, err := strconv.ParseUint(id[1:], 10, 64)
	return seq, err == nil
}

func (a *actor) isListed(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.listed[id]
}

// passed moves the actor's cursor past seq in memory only (see startTurn).
func (a *actor) passed(seq uint64) {
	a.mu.Lock()
	a.cursor = max(a.cursor, seq)
	a.mu.Unlock()
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
	return len(a.turns) == 0 && len(a.held) == 0 && len(a.known) == 0 && len(a.queued) == 0 && len(a.ready) == 0 && a.collect == nil && len(a.closing) == 0
}

// behind reports whether a delivery past the cursor is waiting. Every inbox event is
// delivered until acked, so the actor reads the log only when one is: an event delivered to
// another replica comes back here (that replica NAKs it), or is read on the way to a later one.
func (a *actor) behind() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for seq := range a.held {
		if seq > a.cursor {
			return true
		}
	}
	for seq := range a.known {
		if seq > a.cursor {
			return true
		}
		delete(a.known, seq)
	}
	return false
}

// step processes the next inbox event after the cursor, if there is one.
//
// A held delivery that its chain header proves to be that event is taken as it is
// (heldNext); otherwise the event is read from the log (readNext). The read (inbox.Next)
// follows the inbox's chain from the subject's last event, so its cost does not grow with the
// other sessions' events in the stream. It must see every acknowledged write: a direct get
// may be answered by a replica that lags behind, so a "nothing past the cursor" is confirmed
// with the stream leader. Only then is the log really empty past it. A delivery this actor
// holds that the log no longer has (the stream's limits removed it after it was delivered) is
// processed from its delivered copy, in sequence order, never dropped.
func (a *actor) step() (bool, error) {
	a.mu.Lock()
	from := a.cursor
	a.mu.Unlock()
	raw, ok := a.heldNext(from)
	if !ok {
		var err error
		if raw, err = a.readNext(from); raw == nil || err != nil {
			return false, err
		}
	}
	ev, derr := events.Decode(raw.Data)
	if derr != nil {
		a.w.deadLetter(raw.Subject, raw.Sequence, raw.Data, raw.Header, "invalid_event", derr)
		return true, a.advance(raw.Sequence, nil)
	}
	if err := firedScheduleOnly(raw.Header, ev); err != nil {
		a.w.deadLetter(raw.Subject, raw.Sequence, raw.Data, raw.Header, "forged_schedule", err)
		return true, a.advance(raw.Sequence, nil)
	}
	a.parent = ""
	if tracing.Enabled(a.w.opts.Tracer) {
		a.parent = tracing.ParentOf(raw.Header)
	}
	return true, a.handle(ev, raw.Sequence)
}

// heldNext returns the held delivery that is the inbox's next event after from, when its
// chain header proves it (inbox.Prev: the server stored it only with no event of the subject
// between its predecessor and itself). Taking it saves the read of the log that an event
// needs otherwise; a delivery without the header (a third party's event, a schedule's), or
// one whose predecessor is past from, leaves the question to the log.
func (a *actor) heldNext(from uint64) (*jetstream.RawStreamMsg, bool) {
	// Only the smallest held sequence past from can qualify: a later event's predecessor is
	// that one or later, so past from.
	seq, m, ok := a.heldBetween(from, math.MaxUint64)
	if !ok {
		return nil, false
	}
	if prev, chained := inbox.Prev(m.Headers()); !chained || prev > from {
		return nil, false
	}
	return deliveredCopy(seq, m), true
}

// deliveredCopy is the inbox event as its delivery m (sequence seq) brought it.
func deliveredCopy(seq uint64, m jetstream.Msg) *jetstream.RawStreamMsg {
	return &jetstream.RawStreamMsg{Subject: m.Subject(), Sequence: seq, Header: m.Headers(), Data: m.Data()}
}

// readNext reads the inbox's next event after from from the log; nil with a nil error when
// there is none to process now.
func (a *actor) readNext(from uint64) (*jetstream.RawStreamMsg, error) {
	// Confirmed: an event past the cursor is known to exist (delivered or rung), so "not
	// found" must be the leader's answer. Otherwise this is a look for anything new (the
	// actor just started, or an event was just published, see poke): nothing is decided on a
	// "not found", so any replica may answer.
	confirmed := a.behind()
	raw, err := inbox.Next(a.ctx, a.w.js, a.w.inbox, a.subj, from, confirmed)
	gone := errors.Is(err, jetstream.ErrMsgNotFound)
	if err != nil && !gone {
		return nil, fmt.Errorf("read inbox after %d: %w", from, err)
	}
	if gone && !confirmed {
		// Not the leader's answer (or the event heard is not stored yet): a delivery that
		// arrived meanwhile must not be taken for one the log has lost, since the log may hold
		// an earlier event this replica was not given. The next step reads again, confirmed.
		return nil, nil
	}
	limit := uint64(math.MaxUint64)
	if !gone {
		limit = raw.Sequence
	}
	if seq, m, ok := a.heldBetween(from, limit); ok {
		a.log.Warn("inbox event delivered but no longer stored; processing the delivered copy", "seq", seq)
		raw = deliveredCopy(seq, m)
	} else if gone {
		// Rings for events the log does not have (yet or any more): the replica that holds
		// their deliveries brings them back.
		a.mu.Lock()
		clear(a.known)
		a.mu.Unlock()
		return nil, nil
	}
	return raw, nil
}

// heldBetween returns the held delivery with the smallest sequence in (from, limit).
func (a *actor) heldBetween(from, limit uint64) (uint64, jetstream.Msg, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var best uint64
	for seq, msgs := range a.held {
		if seq <= from || seq >= limit || best != 0 && seq > best {
			continue
		}
		for _, m := range msgs {
			if m.Data() != nil { // a delivery handed over by a ring carries no copy
				best = seq
				break
			}
		}
	}
	if best == 0 {
		return 0, nil, false
	}
	for _, m := range a.held[best] {
		if m.Data() != nil {
			return best, m, true
		}
	}
	return 0, nil, false
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
	cursor := a.cursor
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
	if seq > a.cursor {
		a.cursor = seq
	}
	a.mu.Unlock()
	return nil
}

// ackDone acks the deliveries whose effect is durable and that no running turn depends on.
func (a *actor) ackDone() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for seq, msgs := range a.held {
		if seq > a.cursor || a.neededLocked(seq) {
			continue
		}
		for _, m := range msgs {
			a.w.progress.Remove(m)
			_ = m.Ack()
		}
		delete(a.held, seq)
	}
}

func (a *actor) neededLocked(seq uint64) bool {
	for _, t := range a.turns {
		if t.needs(seq) {
			return true
		}
	}
	for _, q := range a.queued {
		if q.needs(seq) {
			return true
		}
	}
	for _, c := range a.closing {
		if c.needs(seq) {
			return true
		}
	}
	return a.collect != nil && a.collect.needs(seq)
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
		a.ackDone()
	}
	a.mu.Lock()
	held := a.held
	a.held = nil
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
		cursor := a.cursor
		a.mu.Unlock()
		a.w.own.HandOff(a.sk, a.handTo, cursor) // ownership/rebalance.go
	}
}

// handle applies one inbox event.
func (a *actor) handle(ev events.Any, seq uint64) error {
	if err := a.archiveIfIdle(ev); err != nil { // sessions_idle.go
		return err
	}
	policy := a.concurrency()
	switch e := ev.(type) {
	case *events.Event[events.UserMessage]:
		text, hooked := a.receivedHook(e) // hooks.go
		if hooked.Blocked {
			return a.blockMessage(e, seq, hooked)
		}
		in := a.userInput(&e.Data.Message, text)
		pt := &pendingTurn{seq: seq, input: []llm.Message{in}, msg: e.Data.Message, trace: e.Trace, accepted: e.Time, parent: a.parent}
		return a.schedule(pt, policy)
	case *events.Event[events.Listen]:
		m := a.userInput(&e.Data.Message, "")
		if err := a.appendContext(seq, []llm.Message{m}); err != nil {
			return err
		}
		return a.advance(seq, nil)
	case *events.Event[events.Steer]:
		text := llm.UserText(e.Data.Text, e.Time) // the event time makes it recognizable on resume
		if t := a.runningTurn(); t != nil {
			t.steer(seq, text)
			return a.recordSteer(t, seq)
		}
		return a.schedule(a.pendingFrom(seq, text, e.Data.Message, e.Data.Sender, e.Trace), "parallel")
	case *events.Event[events.FollowUp]:
		text := llm.UserText(e.Data.Text, e.Time)
		if t := a.runningTurn(); t != nil {
			t.followUp(seq, text)
			return a.recordSteer(t, seq)
		}
		return a.schedule(a.pendingFrom(seq, text, e.Data.Message, e.Data.Sender, e.Trace), "parallel")
	case *events.Event[events.Abort]:
		n := a.abortAll(e.Data.Reason)
		a.log.Info("abort", "turns", n, "by", e.Data.Sender.ID)
		if n == 0 { // an aborted turn says so in its reply; nothing running must be said too
			a.replyText(&pendingTurn{seq: seq, trace: e.Trace, msg: a.syntheticTarget(e.Data.Sender, e.Data.ReplyTo)},
				fmt.Sprintf("cmd%d", seq), "Nothing to cancel: no turn is running.")
		}
		return a.advance(seq, nil)
	case *events.Event[events.Command]:
		return a.command(e, seq)
	case *events.Event[events.Scheduled]:
		return a.onScheduled(e, seq)
	case *events.Event[events.TaskResult]:
		return a.onTaskResult(e, seq)
	case *events.Event[events.SubagentResult]:
		text := llm.TextContentOf(e.Data.Content)
		m := llm.UserText("[background task "+e.Data.TaskID+" finished]\n"+text, time.Now().UnixMilli())
		return a.schedule(&pendingTurn{seq: seq, input: []llm.Message{m}, msg: a.syntheticTarget(events.Sender{ID: "system"}, ""), trace: e.Trace,
			parent: a.parent}, "parallel")
	}
	a.w.deadLetter(a.subj, seq, nil, nil, "unhandled_event", fmt.Errorf("event type %s is not handled by the turn worker", ev.EventMeta().Type))
	return a.advance(seq, nil)
}

func (a *actor) pendingFrom(seq uint64, m llm.Message, im *events.IMMessage, sender events.Sender, trace string) *pendingTurn {
	target := a.syntheticTarget(sender, "")
	if im != nil {
		target = *im
	}
	return &pendingTurn{seq: seq, input: []llm.Message{m}, msg: target, trace: trace, parent: a.parent}
}

// syntheticTarget is a reply target for events that did not come from a chat message.
func (a *actor) syntheticTarget(sender events.Sender, replyTo string) events.IMMessage {
	return events.IMMessage{Platform: a.sk.Platform, Bot: a.sk.Bot, MessageID: replyTo,
		Scene: events.Scene{Type: a.sk.Scope, ID: a.sk.Scene}, Sender: sender}
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
	window := time.Duration(a.w.opts.AI.Agent.CollectWindowMs) * time.Millisecond
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
	a.cursor = max(a.cursor, seq)
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
		_ = a.appendContext(pt.seq, pt.input)
		_, _ = a.w.sessions.Update(a.ctx, a.sk, func(s *store.Session) error { s.CloseTurn(pt.id); return nil })
	}()
}

// appendContext commits messages to the session's context (listen, cancelled inputs).
func (a *actor) appendContext(seq uint64, msgs []llm.Message) error {
	sess, err := a.w.sessions.Current(a.ctx, a.sk)
	if err != nil {
		return err
	}
	sid, err := sess.ID()
	if err != nil {
		return err
	}
	_, err = a.commitMessages(sid, msgs, fmt.Sprintf("in-%d", seq), "")
	return err
}

// loadContext loads the context a turn starts from. The actor's own last commit is where the
// log ends (commits are fenced), so the store can serve it from its cache.
func (a *actor) loadContext(ctx context.Context, sid events.SessionID) (store.Loaded, error) {
	a.commit.Lock()
	last, ok := a.ctxLast[sid.String()]
	a.commit.Unlock()
	switch {
	case ok && last == 0:
		// The log was empty when this actor read it, and only this actor writes it (fenced):
		// it still is. LoadContext answers an empty log with the zero Loaded too.
		return store.Loaded{}, nil
	case ok:
		return a.w.ctxlog.LoadContextAt(ctx, sid, last)
	}
	return a.w.ctxlog.LoadContext(ctx, sid)
}

// commitMessages appends msgs to the session id's context log, fenced on the last sequence
// this actor knows. Commits of one actor are serialized; another writer (a worker that took
// the session over) makes the append fail with store.ErrStaleWriter.
func (a *actor) commitMessages(sid events.SessionID, msgs []llm.Message, msgID, turn string, opts ...store.AppendOption) (uint64, error) {
	if err := a.w.own.AwaitFence(a.ctx, a); err != nil { // while the worker lease is recovered (pkg/turn/ownership)
		return 0, fmt.Errorf("commit context %s: %w", sid, err)
	}
	a.commit.Lock()
	defer a.commit.Unlock()
	key := sid.String()
	last, ok := a.ctxLast[key]
	if !ok {
		l, err := a.w.ctxlog.LoadContext(a.ctx, sid)
		if err != nil {
			return 0, err
		}
		last = l.LastSeq
	}
	seq, err := a.w.ctxlog.AppendMessages(a.ctx, sid, last, msgs, append([]store.AppendOption{store.WithMsgID(msgID), store.WithTurn(turn)}, opts...)...)
	if err != nil {
		return 0, fmt.Errorf("commit context %s: %w", key, err)
	}
	if !ok {
		a.w.ctxlog.Keep(sid) // this actor's turns read it back: keep it cached while it lives
		a.kept = append(a.kept, sid)
	}
	a.ctxLast[key] = seq
	return seq, nil
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
