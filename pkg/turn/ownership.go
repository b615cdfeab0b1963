package turn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/store"
)

// errNoWorkerLease: this replica's liveness lease is not valid right now (it was lost and is
// being acquired again); no session can be claimed until it is.
var errNoWorkerLease = errors.New("turn: this worker holds no valid worker lease")

// workerSeen is what the watch of the worker leases showed about one worker: the largest epoch
// seen, and whether the lease of that epoch has ended since.
type workerSeen struct {
	epoch    uint64
	gone     bool
	sessions int // how many sessions it ran at its last renewal (rebalance.go)
}

// ownerHint is which replica was seen holding a session's claim. It is trusted, without asking
// the leases bucket again, for as long as the watch shows that replica's worker lease of that
// epoch alive and the replica does not say it no longer runs the session: a hint that has gone
// wrong costs nothing but one hop, because a ring reaching a replica that no longer runs the
// session makes that replica claim it (onWake) and say so in a notice (notOwnerNotice), and
// the ringer then forgets the hint. (It used to expire after LeaseTTL/2, which made every
// non-owner claim each busy session again every second: three KV round trips that always
// ended in the same HeldError.)
type ownerHint struct {
	owner string
	epoch uint64
}

// wakeNotOwner is the answer to a doorbell request from a replica that did not run the session
// when rung (and the first word of a notOwnerNotice): it took the delivery and claims the
// session now (or passes it on to whoever owns it), and the ringer should not ring it for that
// session again without looking.
var wakeNotOwner = []byte("claiming")

// noticePrefix opens a notOwnerNotice: wakeNotOwner and a space, then the sender's id.
var noticePrefix = []byte("claiming ")

// workerLease returns this replica's current liveness lease.
func (w *Worker) workerLease() store.Lease {
	w.lmu.Lock()
	defer w.lmu.Unlock()
	return w.wlease
}

// acquireWorkerLease takes this replica's liveness lease (a new epoch), retrying until ctx ends.
func (w *Worker) acquireWorkerLease(ctx context.Context) error {
	wait := 100 * time.Millisecond
	for {
		l, err := w.leases.AcquireWorker(ctx, w.opts.ID, w.opts.LeaseTTL)
		if err == nil {
			w.lmu.Lock()
			w.wlease = l
			w.lmu.Unlock()
			return nil
		}
		if ctx.Err() != nil || errors.Is(err, store.ErrInvalid) {
			return fmt.Errorf("turn: worker lease: %w", err)
		}
		w.log.Warn("acquire worker lease; retrying", "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("turn: worker lease: %w", ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// renewWorkerLease renews this replica's one liveness lease every LeaseTTL/3, whatever the
// number of sessions it owns. A renewal that fails is tried again at once (every 100 ms) for as
// long as the lease is still valid, each attempt allowed to take until the lease would lapse:
// on a starved machine a slow renewal must not cost every session.
//
// A lease that lapses anyway (the bus was unavailable: a NATS node failed over) or is lost (it
// expired on the server, or a replica that took this one for dead revoked it) does not stop
// the actors. They keep their sessions, but no context commit goes out (awaitFence) until the
// lease is back: renewed at its old revision if the server never ended it, or acquired again
// with the same epoch (store.Leases.ReacquireWorker). Then every claim is confirmed by a CAS
// on its token (store.Leases.ConfirmClaim): the actors whose sessions another replica took
// meanwhile stop, the others go on. Only if the lease cannot be had with its epoch (another
// process holds this id) does every actor stop and a new epoch start.
func (w *Worker) renewWorkerLease() {
	defer w.wg.Done()
	t := time.NewTicker(w.opts.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-t.C:
		}
		l := w.workerLease()
		if l.Revision == 0 {
			w.newEpoch()
			continue
		}
		l.Sessions = w.running()
		err := w.renewOnce(l)
		if w.ctx.Err() != nil {
			return
		}
		if err == nil {
			w.rebalance() // rebalance.go
			continue
		}
		w.suspend()
		w.log.Warn("worker lease lapsed: keeping the sessions, commits wait until it is back", "err", err)
		if w.recoverLease(l, errors.Is(err, store.ErrLeaseLost)) {
			// Acquired again: another replica may have taken claims in the gap. (A lease
			// renewed at its old revision never ended on the server: nothing to confirm.)
			w.confirmClaims(w.nextGen())
		}
		w.unsuspend()
	}
}

// newEpoch is the last resort: every actor stops, and a new lease (a new epoch) is acquired.
func (w *Worker) newEpoch() {
	w.lmu.Lock()
	w.wlease = store.Lease{}
	w.lmu.Unlock()
	w.mu.Lock()
	for _, a := range w.actors {
		a.leaseLost(errNoWorkerLease)
	}
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(w.ctx, w.opts.LeaseTTL)
	err := w.acquireWorkerLease(ctx)
	cancel()
	if err != nil && w.ctx.Err() == nil {
		w.log.Warn("acquire worker lease", "err", err)
	}
}

// suspend closes the commit fence (awaitFence) while the lease is being recovered.
func (w *Worker) suspend() {
	w.lmu.Lock()
	defer w.lmu.Unlock()
	if w.fence == nil {
		w.fence = make(chan struct{})
	}
}

// nextGen starts a new lease generation, after the lease was acquired again: claims made
// before it must be confirmed before their actors commit again. It returns the generation.
func (w *Worker) nextGen() uint64 {
	w.lmu.Lock()
	defer w.lmu.Unlock()
	w.lgen++
	return w.lgen
}

// unsuspend opens the fence again.
func (w *Worker) unsuspend() {
	w.lmu.Lock()
	defer w.lmu.Unlock()
	if w.fence != nil {
		close(w.fence)
		w.fence = nil
	}
}

// suspended reports whether the lease is being recovered (no new claims meanwhile).
func (w *Worker) suspended() bool {
	w.lmu.Lock()
	defer w.lmu.Unlock()
	return w.fence != nil
}

// leaseGen is the current lease generation (see suspend).
func (w *Worker) leaseGen() uint64 {
	w.lmu.Lock()
	defer w.lmu.Unlock()
	return w.lgen
}

// awaitFence returns once this replica's lease is in force and the actor's claim is confirmed
// for the current lease generation, or with an error: a context commit waits here while the
// lease is being recovered, so that no commit goes out for a session another replica may have
// taken meanwhile. A claim made before the lease lapsed is confirmed here if confirmClaims
// has not done it yet; a claim another replica took stops the actor (store.ErrLeaseLost).
func (a *actor) awaitFence(ctx context.Context) error {
	w := a.w
	for {
		w.lmu.Lock()
		ch, gen := w.fence, w.lgen
		w.lmu.Unlock()
		if ch != nil {
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if a.claimGen() >= gen {
			return nil
		}
		if err := a.confirmClaim(gen); err != nil {
			if errors.Is(err, store.ErrLeaseLost) {
				a.leaseLost(err)
			}
			return err
		}
	}
}

// claimGen is the lease generation the actor's claim is confirmed for.
func (a *actor) claimGen() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.gen
}

// confirmClaim confirms the actor's claim for lease generation gen (store.Leases.ConfirmClaim).
func (a *actor) confirmClaim(gen uint64) error {
	a.confirmMu.Lock()
	defer a.confirmMu.Unlock()
	a.mu.Lock()
	c, cur := a.claim, a.gen
	a.mu.Unlock()
	if cur >= gen {
		return nil
	}
	ctx, cancel := context.WithTimeout(a.ctx, 5*time.Second)
	defer cancel()
	nc, err := a.w.leases.ConfirmClaim(ctx, c)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.claim, a.gen = nc, gen
	a.mu.Unlock()
	return nil
}

// recoverLease gets the lapsed lease l back: renewed at its revision while the server has not
// ended it (lost false), else acquired again with its epoch. It reports whether the claims must
// be confirmed (the lease was acquired again); with the lease gone for good (another process
// holds this id) it falls back to newEpoch.
func (w *Worker) recoverLease(l store.Lease, lost bool) bool {
	wait := 100 * time.Millisecond
	for w.ctx.Err() == nil {
		var nl store.Lease
		var err error
		ctx, cancel := context.WithTimeout(w.ctx, w.opts.LeaseTTL)
		if !lost {
			nl, err = w.leases.Renew(ctx, l)
			lost = errors.Is(err, store.ErrLeaseLost)
		}
		if lost {
			nl, err = w.leases.ReacquireWorker(ctx, w.opts.ID, w.opts.LeaseTTL, l.Token)
		}
		cancel()
		if err == nil {
			w.lmu.Lock()
			w.wlease = nl
			w.lmu.Unlock()
			w.log.Info("worker lease back", "epoch", nl.Token, "reacquired", lost)
			return lost
		}
		if errors.Is(err, store.ErrLeaseHeld) || errors.Is(err, store.ErrInvalid) {
			w.log.Warn("worker lease cannot be had with its epoch: stopping every actor", "err", err)
			w.newEpoch()
			return false
		}
		w.log.Warn("recover worker lease; retrying", "err", err)
		select {
		case <-w.ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
	return false
}

// confirmClaims confirms the claim of every actor made before generation gen (see
// store.Leases.ConfirmClaim); actors whose session another replica took stop. An error other
// than a lost claim is retried while the lease holds.
func (w *Worker) confirmClaims(gen uint64) {
	for w.ctx.Err() == nil {
		w.mu.Lock()
		var todo []*actor
		for _, a := range w.actors {
			if a.alive() && a.claimGen() < gen {
				todo = append(todo, a)
			}
		}
		w.mu.Unlock()
		if len(todo) == 0 {
			return
		}
		var wg sync.WaitGroup
		sem := make(chan struct{}, 32)
		var kept, lost, failed atomic.Int32
		for _, a := range todo {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				switch err := a.confirmClaim(gen); {
				case err == nil:
					kept.Add(1)
				case errors.Is(err, store.ErrLeaseLost):
					lost.Add(1)
					a.leaseLost(err)
				default:
					failed.Add(1)
				}
			}()
		}
		wg.Wait()
		w.log.Info("claims confirmed after the lease came back", "kept", kept.Load(), "taken by others", lost.Load(), "to retry", failed.Load())
		if failed.Load() > 0 {
			select {
			case <-w.ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}

// renewOnce renews l, retrying until it succeeds, the lease is lost, or it lapses.
func (w *Worker) renewOnce(l store.Lease) error {
	for {
		ctx, cancel := context.WithDeadline(w.ctx, l.ValidUntil)
		nl, err := w.leases.Renew(ctx, l)
		cancel()
		if err == nil {
			w.lmu.Lock()
			w.wlease = nl
			w.lmu.Unlock()
			return nil
		}
		if w.ctx.Err() != nil || errors.Is(err, store.ErrLeaseLost) || !l.Valid(time.Now().Add(100*time.Millisecond)) {
			return err
		}
		w.log.Warn("renew worker lease; retrying", "err", err)
		select {
		case <-w.ctx.Done():
			return w.ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// followWorkers keeps w.view current from the watch of the worker leases and claims the
// sessions that waited for a dead owner as soon as its lease has ended. The watch is started
// again if it breaks; until it has delivered its initial values, liveness is asked of the
// stream leader.
func (w *Worker) followWorkers() {
	defer w.wg.Done()
	for w.ctx.Err() == nil {
		evs, err := w.leases.WatchWorkers(w.ctx)
		if err != nil {
			w.log.Warn("watch worker leases; retrying", "err", err)
			select {
			case <-w.ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		for ev := range evs {
			w.seeWorker(ev)
		}
		w.mu.Lock()
		w.viewReady = false
		clear(w.view)
		w.mu.Unlock()
	}
}

func (w *Worker) seeWorker(ev store.WorkerLeaseEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ev.Initial {
		w.viewReady = true
		return
	}
	s := w.view[ev.Worker]
	switch {
	case ev.Epoch == 0:
		s.gone = true
		w.holdRebalanceLocked(time.Now())
	case ev.Epoch >= s.epoch:
		s = workerSeen{epoch: ev.Epoch, sessions: ev.Sessions}
	}
	w.view[ev.Worker] = s
}

// staleLocked reports whether the watch has shown that owner's worker lease of epoch ended
// (gone, or acquired again with a larger epoch), or, once the watch has delivered every
// worker lease, shows no lease of owner at all (a dead peer is dropped from the view after
// its takeover). A hint it calls stale is looked up again in KV by a claim, so a false
// "stale" costs one round trip; a false "alive" sent deliveries to a dead doorbell, every
// AckWait, until the session's owner changed again.
func (w *Worker) staleLocked(owner string, epoch uint64) bool {
	s, ok := w.view[owner]
	if !ok {
		return w.viewReady
	}
	return epoch < s.epoch || epoch == s.epoch && s.gone
}

// alive is the store.AliveFunc of this replica's claims. The watch answers "alive" when it
// showed the owner's lease with that epoch (as of the last renewal it saw); anything else is
// asked of the stream leader, because an ended lease may be acquired again with the same
// epoch (a worker whose lease lapsed while it lived, see renewWorkerLease): only the leader's
// "gone" is certain.
func (w *Worker) alive(ctx context.Context, owner string, epoch uint64) (bool, error) {
	w.mu.Lock()
	s, ok := w.view[owner]
	ready := w.viewReady
	w.mu.Unlock()
	if ready && ok && epoch == s.epoch && !s.gone {
		return true, nil
	}
	return w.leases.WorkerAlive(ctx, owner, epoch)
}

// claim tries to claim sk and start its actor, then hands over the deliveries that waited for
// the claim. If another live replica owns the session, the deliveries are rung over to it.
func (w *Worker) claim(sk events.SessionKey) {
	defer w.wg.Done()
	key := sk.String()
	var c store.Claim
	var err error
	gen := w.leaseGen()
	if wl := w.workerLease(); !wl.Valid(time.Now()) || w.suspended() {
		err = errNoWorkerLease
	} else {
		c, err = w.leases.Claim(w.ctx, sk, wl, w.alive)
	}
	w.mu.Lock()
	waiting := w.claiming[key]
	delete(w.claiming, key)
	if err != nil {
		var held *store.HeldError
		isHeld := errors.As(err, &held)
		if isHeld {
			w.owners[key] = ownerHint{owner: held.Owner, epoch: held.Epoch}
		}
		w.mu.Unlock()
		if isHeld {
			w.ring(sk, held.Owner, held.Epoch, waiting)
			return
		}
		if w.ctx.Err() == nil {
			w.log.Warn("claim session", "session", key, "err", err)
		}
		for _, d := range waiting {
			w.giveBack(d, time.Second)
		}
		return
	}
	delete(w.owners, key)
	if c.TookOver != "" && c.TookOver != w.opts.ID {
		w.log.Info("took over session", "session", key, "from", c.TookOver)
		w.opts.Metrics.TakeOver()
	}
	a := newActor(w, sk, c, gen)
	a.killed.Store(w.killed)
	w.actors[key] = a
	w.opts.Metrics.Owned(1)
	for _, d := range waiting {
		a.deliver(d.msg, d.seq)
	}
	w.wg.Add(1)
	w.mu.Unlock()
	go func() {
		defer w.wg.Done()
		a.run()
		w.mu.Lock()
		if w.actors[key] == a {
			delete(w.actors, key)
		}
		w.mu.Unlock()
		w.opts.Metrics.Owned(-1)
	}()
}

// giveBack hands a delivery back to JetStream, to come again after delay.
func (w *Worker) giveBack(d delivery, delay time.Duration) {
	w.progress.Remove(d.msg)
	_ = d.msg.NakWithDelay(delay)
}

// ringEntry is one delivery on its way to its owner's doorbell.
type ringEntry struct {
	sk    events.SessionKey
	epoch uint64
	d     delivery
}

// ring hands the deliveries of sk over to its owner (see ringLocked).
func (w *Worker) ring(sk events.SessionKey, owner string, epoch uint64, ds []delivery) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ringLocked(sk, owner, epoch, ds)
}

// ringLocked queues the deliveries of sk for its owner's doorbell; ringBells sends them.
//
// A ring is one core NATS message, not a request: the owner holds the deliveries it hands over
// from the moment it reads it, and nothing waits for an answer. It used to be a request per
// delivery, whose answer brought the owner's verdict: with two replicas that was two more
// messages, a goroutine and a reply subscription for every other turn, the whole of a turn's
// extra bus traffic. A ring that is lost (the owner's process died, or its connection is
// reconnecting) costs no event: the owner did not take the deliveries, so they come back after
// AckWait, and by then the probes (peers.go) have taken a dead owner's sessions over, whose
// actors read the inbox from the cursor and hear it from then on. The owner speaks up only
// when it did not run a session it was rung for (a notice back to the ringer's doorbell).
func (w *Worker) ringLocked(sk events.SessionKey, owner string, epoch uint64, ds []delivery) {
	if w.ctx.Err() != nil || len(ds) == 0 {
		return // a stopping worker's deliveries are redelivered
	}
	for _, d := range ds {
		w.bells[owner] = append(w.bells[owner], ringEntry{sk: sk, epoch: epoch, d: d})
	}
	select {
	case w.bellWake <- struct{}{}:
	default:
	}
}

// ringBells sends the queued rings until the worker stops: each time it wakes, one ring per
// owner with every delivery queued for it meanwhile, so under load a ring carries several.
func (w *Worker) ringBells() {
	defer w.wg.Done()
	spare := map[string][]ringEntry{}
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-w.bellWake:
		}
		w.mu.Lock()
		rings := w.bells
		w.bells = spare
		w.mu.Unlock()
		for owner, rs := range rings {
			w.ringBatch(owner, rs)
		}
		clear(rings)
		spare = rings
	}
}

// ringBatch rings owner's doorbell once, handing rs over.
func (w *Worker) ringBatch(owner string, rs []ringEntry) {
	if owner == w.opts.ID {
		// A claim of this replica held by a live epoch that is not ours: only a replica with
		// the same id could do that. Leave the deliveries to JetStream.
		for _, r := range rs {
			w.giveBack(r.d, w.opts.LeaseTTL/4)
		}
		return
	}
	m := &nats.Msg{Subject: events.AgentWakeSubject(owner), Reply: w.bellSubj}
	if len(rs) == 1 {
		// One delivery keeps the single-ring form, which replicas of every version read.
		m.Header = nats.Header{events.HeaderWakeAck: []string{rs[0].d.msg.Reply()}}
		m.Data = events.WakeBody(rs[0].sk, rs[0].d.seq)
	} else {
		var body []byte
		for _, r := range rs {
			body = events.AppendWake(body, events.WakeEntry{Session: r.sk, Seq: r.d.seq, Ack: r.d.msg.Reply()})
		}
		m.Data = body
	}
	if err := w.nc.PublishMsg(m); err != nil {
		if w.ctx.Err() == nil {
			w.log.Debug("ring doorbell", "owner", owner, "deliveries", len(rs), "err", err)
		}
		for _, r := range rs {
			w.forgetOwner(r.sk.String(), owner, r.epoch) // look again when it comes back
			w.giveBack(r.d, w.opts.LeaseTTL/4)
		}
		return
	}
	for _, r := range rs {
		w.progress.Remove(r.d.msg) // the owner holds it now (a no-op unless it waited for a claim)
	}
}

// notOwnerNotice is what a rung replica sends back to the ringer's doorbell for the sessions it
// did not run: "claiming <its id>" and then one session token per line. (A replica of an older
// version answers a ring with a bare "claiming"; it names no session, and is ignored.)
func notOwnerNotice(self string, tokens []string) []byte {
	b := append(append([]byte(nil), noticePrefix...), self...)
	for _, t := range tokens {
		b = append(append(b, '\n'), t...)
	}
	return b
}

// isNotice reports whether a doorbell message is a notOwnerNotice: its first line is
// "claiming", alone or with an id. A ring's first line starts with a session token, and no
// session key encodes to "claiming".
func isNotice(body []byte) bool {
	first, _, _ := bytes.Cut(body, []byte{'\n'})
	return bytes.Equal(first, wakeNotOwner) || bytes.HasPrefix(first, noticePrefix)
}

// onNotice forgets the hints a notOwnerNotice says are wrong.
func (w *Worker) onNotice(body []byte) {
	first, rest, _ := bytes.Cut(body, []byte{'\n'})
	_, owner, ok := bytes.Cut(first, []byte{' '})
	if !ok || len(rest) == 0 {
		return
	}
	for tok := range bytes.SplitSeq(rest, []byte{'\n'}) {
		sk, err := events.ParseSessionKeyToken(string(tok))
		if err != nil {
			continue
		}
		w.mu.Lock()
		if h, ok := w.owners[sk.String()]; ok && h.owner == string(owner) {
			delete(w.owners, sk.String())
		}
		w.mu.Unlock()
	}
}

// forgetOwner drops the hint that owner (of epoch) runs session key, unless it says something
// else by now.
func (w *Worker) forgetOwner(key, owner string, epoch uint64) {
	w.mu.Lock()
	if h, ok := w.owners[key]; ok && h.owner == owner && h.epoch == epoch {
		delete(w.owners, key)
	}
	w.mu.Unlock()
}

// onWake answers a ring of this replica's doorbell: another replica got deliveries for
// sessions it saw this replica own. The deliveries the ring hands over (their ack subjects) are
// held here from now on; each session's actor reads the inbox up to the sequence rung. With no
// actor (it went idle, or this replica restarted) the replica claims the session, whose actor
// then reads the inbox from the cursor, and tells the ringer (a notice, or the answer to a
// request), so that it looks before it rings here for that session again.
func (w *Worker) onWake(m *nats.Msg) {
	if len(m.Data) == 0 { // a probe (probePeers): answering is all it asks
		if m.Reply != "" && w.ctx.Err() == nil {
			_ = m.Respond(nil)
		}
		return
	}
	if isNotice(m.Data) {
		w.onNotice(m.Data)
		return
	}
	single := bytes.IndexByte(m.Data, '\n') < 0
	entries, err := events.ParseWake(m.Data, m.Header.Get(events.HeaderWakeAck))
	if err != nil {
		w.log.Warn("ignoring a malformed doorbell ring", "err", err)
		return
	}
	var notOwned []string // tokens of the sessions this replica did not run
	w.mu.Lock()
	if w.ctx.Err() != nil {
		w.mu.Unlock()
		return // the deliveries come back after AckWait
	}
	for _, e := range entries {
		var d *delivery
		if e.Ack != "" {
			d = &delivery{msg: &adoptedMsg{nc: w.nc, reply: e.Ack, subject: events.AgentInSubject(e.Session), seq: e.Seq}, seq: e.Seq}
		}
		key := e.Session.String()
		if a := w.actors[key]; a != nil && a.alive() {
			if d != nil {
				a.deliver(d.msg, d.seq)
			} else {
				a.know(e.Seq)
			}
			continue
		}
		notOwned = append(notOwned, e.Session.Token())
		waiting, ok := w.claiming[key]
		if d != nil {
			waiting = append(waiting, *d)
		}
		w.claiming[key] = waiting
		if !ok { // else the claim under way takes it, and its actor reads the inbox from the cursor
			delete(w.owners, key)
			w.wg.Add(1)
			go w.claim(e.Session)
		}
	}
	w.mu.Unlock()
	switch {
	case m.Reply == "":
	case strings.HasPrefix(m.Reply, events.PrefixAgentWake+"."):
		// A ring from a replica's bell: say something only when there is something to say.
		if len(notOwned) > 0 {
			_ = w.nc.Publish(m.Reply, notOwnerNotice(w.opts.ID, notOwned))
		}
	case single:
		// A request (an older replica, or a tool): empty if this replica ran the session.
		var answer []byte
		if len(notOwned) > 0 {
			answer = wakeNotOwner
		}
		_ = m.Respond(answer)
	default:
		_ = m.Respond([]byte(strings.Join(notOwned, "\n")))
	}
}

// adoptedMsg is a SESSION_IN delivery that another replica handed over by a doorbell ring:
// its acks go to the delivery's ack subject from this replica's connection, as JetStream
// accepts acks from any client. It carries no payload; the actor reads the event from the log.
type adoptedMsg struct {
	nc      *nats.Conn
	reply   string
	subject string
	seq     uint64
}

var _ jetstream.Msg = (*adoptedMsg)(nil)

func (m *adoptedMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: m.seq}, NumDelivered: 1, Stream: events.StreamSessionIn, Consumer: ConsumerName}, nil
}
func (m *adoptedMsg) Data() []byte         { return nil }
func (m *adoptedMsg) Headers() nats.Header { return nil }
func (m *adoptedMsg) Subject() string      { return m.subject }
func (m *adoptedMsg) Reply() string        { return m.reply }
func (m *adoptedMsg) Ack() error           { return m.send("+ACK") }
func (m *adoptedMsg) Nak() error           { return m.send("-NAK") }
func (m *adoptedMsg) InProgress() error    { return m.send("+WPI") }
func (m *adoptedMsg) Term() error          { return m.send("+TERM") }
func (m *adoptedMsg) TermWithReason(reason string) error {
	return m.send("+TERM " + reason)
}
func (m *adoptedMsg) NakWithDelay(delay time.Duration) error {
	return m.send(fmt.Sprintf(`-NAK {"delay": %d}`, delay.Nanoseconds()))
}
func (m *adoptedMsg) DoubleAck(ctx context.Context) error {
	_, err := m.nc.RequestWithContext(ctx, m.reply, []byte("+ACK"))
	return err
}

func (m *adoptedMsg) send(body string) error {
	if m.reply == "" {
		return jetstream.ErrMsgNoReply
	}
	return m.nc.Publish(m.reply, []byte(body))
}
