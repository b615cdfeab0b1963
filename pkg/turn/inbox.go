package turn

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/inbox"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/store"
	"github.com/agentbus/agentbus/pkg/tracing"
)

// Deliver hands a delivery to the actor, which acks it once its effect is durable
// (ownership.Session).
func (a *actor) Deliver(msg jetstream.Msg, seq uint64) {
	a.mu.Lock()
	if !a.in.Hold(seq, msg) { // shutting down: let the next owner have it
		a.mu.Unlock()
		_ = msg.NakWithDelay(100 * time.Millisecond)
		return
	}
	a.mu.Unlock()
	a.w.progress.Add(msg) // kept from redelivery until acked or handed back
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// poke tells the actor that an event was published on its inbox subject (inSub, h its
// headers): it reads the inbox soon instead of waiting for the event's delivery, which may
// first reach another replica and come over by its doorbell. A poke decides nothing: the event
// may not be stored yet when the actor looks (then it looks again, or the delivery brings it,
// as without the poke), and the delivery is still held and acked as always.
//
// An event published with the inbox chain (inbox.Prev) says which event came before it on
// the subject: while the cursor has not passed that one, the actor knows an event it has not
// read exists, or is being stored (heardUnread). An event without the chain (a third party's,
// a schedule's) says nothing of the kind: it gets one look, after pokeGrace.
func (a *actor) poke(h nats.Header) {
	if prev, ok := inbox.Prev(h); ok {
		a.heardAt.Store(time.Now().UnixNano())
		for cur := a.heardPast.Load(); prev+1 > cur && !a.heardPast.CompareAndSwap(cur, prev+1); cur = a.heardPast.Load() {
		}
	} else {
		a.heardUnchained.Store(true)
	}
	a.poked.Store(true)
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// heardUnread reports whether a chained event heard in the last pokeHeardFor is still unread:
// the cursor has not passed its predecessor. (The time bound covers an event the stream never
// stored, such as a chained publish the server refused: its copy was heard all the same.)
func (rd reader) heardUnread() bool {
	a := rd.a
	past := a.heardPast.Load()
	if past == 0 || time.Since(time.Unix(0, a.heardAt.Load())) > pokeHeardFor {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.in.Cursor() < past
}

// pokeGrace is how long a poke waits for its event's delivery before the actor reads the log
// for it. The delivery normally follows the core NATS copy within a millisecond, and it
// brings the event with its stream sequence (heldNext), which saves the read, a request to
// the server per event. A delivery that went to another replica ends the wait when its ring
// comes (know), as before there were pokes; the grace bounds the wait when none comes.
//
// It was 10 ms, and a delivery later than that (a busy consumer, or one that went to another
// replica and waits for its ring) cost the reply up to 10 ms, which showed in p99 at half
// load. A shorter grace used to make the look come before the event was stored more often; the
// actor then counted as idle with an unread event heard, and could stop (idle release,
// rebalancing) just as its delivery came, which was handed back and came again
// (TestRingHandsDeliveryOver). Now an unread chained event keeps the actor from idling and is
// looked for again, each wait twice the last, for up to pokeHeardFor.
const pokeGrace = 2 * time.Millisecond

// pokeHeardFor bounds how long a chained event heard keeps the actor looking for it (and from
// idling) when neither the log nor a delivery has brought it: far longer than a store takes,
// short against the idle release.
const pokeHeardFor = 250 * time.Millisecond

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
	if !a.in.Know(seq) {
		a.mu.Unlock()
		return
	}
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// retryStart runs fn until it succeeds, the actor stops, or startRetryFor has passed.
func (rd reader) retryStart(fn func() error) error {
	a := rd.a
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
func (rd reader) startCursor(sess *store.Session, in inboxLast) (uint64, error) {
	a := rd.a
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
		stored, err := rd.replyStored(mark)
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
func (rd reader) prefetchContext(id events.SessionID) {
	a := rd.a
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
func (rd reader) replyStored(mark store.CommitMark) (bool, error) {
	a := rd.a
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

func (rd reader) isListed(id string) bool {
	a := rd.a
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.listed[id]
}

// passed moves the actor's cursor past seq in memory only (see startTurn).
func (rd reader) passed(seq uint64) {
	a := rd.a
	a.mu.Lock()
	a.in.Pass(seq)
	a.mu.Unlock()
}

// behind reports whether a delivery past the cursor is waiting. Every inbox event is
// delivered until acked, so the actor reads the log only when one is: an event delivered to
// another replica comes back here (that replica NAKs it), or is read on the way to a later one.
func (rd reader) behind() bool {
	a := rd.a
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.in.Behind()
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
func (rd reader) step() (bool, error) {
	a := rd.a
	a.mu.Lock()
	from := a.in.Cursor()
	a.mu.Unlock()
	raw, ok := rd.heldNext(from)
	if !ok {
		var err error
		if raw, err = rd.readNext(from); raw == nil || err != nil {
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
func (rd reader) heldNext(from uint64) (*jetstream.RawStreamMsg, bool) {
	// Only the smallest held sequence past from can qualify: a later event's predecessor is
	// that one or later, so past from.
	seq, m, ok := rd.heldBetween(from, math.MaxUint64)
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
func (rd reader) readNext(from uint64) (*jetstream.RawStreamMsg, error) {
	a := rd.a
	// Confirmed: an event past the cursor is known to exist (delivered or rung), so "not
	// found" must be the leader's answer. Otherwise this is a look for anything new (the
	// actor just started, or an event was just published, see poke): nothing is decided on a
	// "not found", so any replica may answer.
	confirmed := rd.behind()
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
	if seq, m, ok := rd.heldBetween(from, limit); ok {
		a.log.Warn("inbox event delivered but no longer stored; processing the delivered copy", "seq", seq)
		raw = deliveredCopy(seq, m)
	} else if gone {
		// Rings for events the log does not have (yet or any more): the replica that holds
		// their deliveries brings them back.
		a.mu.Lock()
		a.in.ForgetKnown()
		a.mu.Unlock()
		return nil, nil
	}
	return raw, nil
}

// heldBetween returns the held delivery with the smallest sequence in (from, limit).
func (rd reader) heldBetween(from, limit uint64) (uint64, jetstream.Msg, bool) {
	a := rd.a
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.in.Between(from, limit)
}

// ackDone acks the deliveries whose effect is durable and that no running turn depends on.
func (rd reader) ackDone() {
	a := rd.a
	a.mu.Lock()
	defer a.mu.Unlock()
	a.in.AckPassed(rd.neededLocked, func(m jetstream.Msg) {
		a.w.progress.Remove(m)
		_ = m.Ack()
	})
}

func (rd reader) neededLocked(seq uint64) bool {
	a := rd.a
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

// reader reads one session's inbox in stream order for its actor: the delivery the actor holds
// or the log's next event after the cursor, and acks deliveries once their effect is durable.
// Only the actor's goroutine uses it, except where a method says otherwise; the read state it
// uses (held, known, cursor) is the actor's, under actor.mu (LOCKS.md).
type reader struct{ a *actor }
