package turn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/store"
)

// ringTimeout bounds how long a ringer waits for the owner to answer a doorbell ring. An owner
// that is alive answers at once (the answer does not wait for any bus round trip); one that
// does not answer in time keeps nothing, the delivery goes back to JetStream.
const ringTimeout = 2 * time.Second

// errNoWorkerLease: this replica's liveness lease is not valid right now (it was lost and is
// being acquired again); no session can be claimed until it is.
var errNoWorkerLease = errors.New("turn: this worker holds no valid worker lease")

// workerSeen is what the watch of the worker leases showed about one worker: the largest epoch
// seen, and whether the lease of that epoch has ended since.
type workerSeen struct {
	epoch uint64
	gone  bool
}

// awaitClaim is a session whose claim waits for its owner's worker lease (of epoch) to end.
type awaitClaim struct {
	sk    events.SessionKey
	epoch uint64
}

// ownerHint is which replica was seen holding a session's claim. It is trusted, without asking
// the leases bucket again, for as long as the watch shows that replica's worker lease of that
// epoch alive and the replica answers its rings as the session's owner: a hint that has gone
// wrong costs nothing but one hop, because a ring reaching a replica that no longer runs the
// session makes that replica claim it (onWake) and say so in its answer (wakeNotOwner), and
// the ringer then forgets the hint. (It used to expire after LeaseTTL/2, which made every
// non-owner claim each busy session again every second: three KV round trips that always
// ended in the same HeldError.)
type ownerHint struct {
	owner string
	epoch uint64
}

// wakeNotOwner is the body of a doorbell answer from a replica that did not run the session
// when rung: it took the delivery and claims the session now (or passes it on to whoever owns
// it), and the ringer should not ring it for that session again without looking.
var wakeNotOwner = []byte("claiming")

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
		err := w.renewOnce(l)
		if w.ctx.Err() != nil {
			return
		}
		if err == nil {
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
	case ev.Epoch >= s.epoch:
		s = workerSeen{epoch: ev.Epoch}
	}
	w.view[ev.Worker] = s
	w.releaseAwaitingLocked(ev.Worker)
}

// staleLocked reports whether the watch has shown that owner's worker lease of epoch ended
// (gone, or acquired again with a larger epoch). Only the watch's certain answers count.
func (w *Worker) staleLocked(owner string, epoch uint64) bool {
	s, ok := w.view[owner]
	return ok && (epoch < s.epoch || epoch == s.epoch && s.gone)
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
	}
	a := newActor(w, sk, c, gen)
	a.killed.Store(w.killed)
	w.actors[key] = a
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

// bell is this replica's doorbell traffic to one owner: at most one ring is on its way at a
// time, and the deliveries that come meanwhile wait here and go out together in the next one.
// Under load a ring thereby hands over many deliveries (one request and one answer on the bus
// instead of two messages per delivery, the cost a second replica added to every other turn);
// when idle a ring goes out at once with its one delivery.
type bell struct {
	queue []ringEntry
	busy  bool // a ringLoop runs for this owner
}

// ring hands the deliveries of sk over to its owner (see ringLocked).
func (w *Worker) ring(sk events.SessionKey, owner string, epoch uint64, ds []delivery) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ringLocked(sk, owner, epoch, ds)
}

// ringLocked queues the deliveries of sk for its owner's doorbell: each ring is a request on
// the owner's doorbell carrying the deliveries' ack subjects, and an answer means the owner
// holds them now. No responders means the owner's process is gone: the deliveries wait here
// (with in-progress acks) until its worker lease has ended, and the session is claimed then.
// An owner that does not answer in time gets nothing: the deliveries come back after a delay.
// The deliveries are kept from redelivery (in-progress acks) until the owner has answered.
func (w *Worker) ringLocked(sk events.SessionKey, owner string, epoch uint64, ds []delivery) {
	if w.ctx.Err() != nil || len(ds) == 0 {
		return // a stopping worker's deliveries are redelivered
	}
	b := w.bells[owner]
	if b == nil {
		b = &bell{}
		w.bells[owner] = b
	}
	for _, d := range ds {
		w.progress.Add(d.msg)
		b.queue = append(b.queue, ringEntry{sk: sk, epoch: epoch, d: d})
	}
	if !b.busy {
		b.busy = true
		w.wg.Add(1)
		go w.ringLoop(owner, b)
	}
}

// ringLoop sends owner's queued deliveries, one ring at a time, until none is left.
func (w *Worker) ringLoop(owner string, b *bell) {
	defer w.wg.Done()
	for {
		w.mu.Lock()
		q := b.queue
		b.queue = nil
		if len(q) == 0 || w.ctx.Err() != nil {
			b.busy = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		w.ringBatch(owner, q)
	}
}

// ringBatch rings owner's doorbell once for rs and acts on the answer.
func (w *Worker) ringBatch(owner string, rs []ringEntry) {
	if owner == w.opts.ID {
		// A claim of this replica held by a live epoch that is not ours: only a replica with
		// the same id could do that. Leave the deliveries to JetStream.
		for _, r := range rs {
			w.giveBack(r.d, w.opts.LeaseTTL/4)
		}
		return
	}
	m := nats.NewMsg(events.AgentWakeSubject(owner))
	if len(rs) == 1 {
		// One delivery keeps the single-ring form, which replicas of every version answer.
		m.Data = events.WakeBody(rs[0].sk, rs[0].d.seq)
		m.Header.Set(events.HeaderWakeAck, rs[0].d.msg.Reply())
	} else {
		var body []byte
		for _, r := range rs {
			body = events.AppendWake(body, events.WakeEntry{Session: r.sk, Seq: r.d.seq, Ack: r.d.msg.Reply()})
		}
		m.Data = body
	}
	resp, err := w.nc.RequestMsg(m, ringTimeout)
	switch {
	case err == nil:
		for _, r := range rs {
			w.progress.Remove(r.d.msg) // the owner holds it now
		}
		if len(resp.Data) == 0 {
			return
		}
		// The owner did not run some of the sessions: it claims them now (or passes their
		// deliveries on to whoever owns them); look before ringing it for them again.
		notOwner := map[string]bool{}
		if len(rs) == 1 {
			notOwner[rs[0].sk.Token()] = bytes.Equal(resp.Data, wakeNotOwner)
		} else {
			for line := range bytes.SplitSeq(resp.Data, []byte{'\n'}) {
				notOwner[string(line)] = true
			}
		}
		for _, r := range rs {
			if notOwner[r.sk.Token()] {
				w.forgetOwner(r.sk.String(), owner, r.epoch)
			}
		}
	case errors.Is(err, nats.ErrNoResponders):
		bySession := map[events.SessionKey][]delivery{}
		epochs := map[events.SessionKey]uint64{}
		var order []events.SessionKey
		for _, r := range rs {
			if _, ok := bySession[r.sk]; !ok {
				order = append(order, r.sk)
			}
			bySession[r.sk] = append(bySession[r.sk], r.d)
			epochs[r.sk] = r.epoch
		}
		for _, sk := range order {
			w.suspectPeer(owner, epochs[sk])
		}
		for _, sk := range order {
			w.awaitOwner(sk, owner, epochs[sk], bySession[sk])
		}
	default:
		if w.ctx.Err() == nil {
			w.log.Debug("ring doorbell", "owner", owner, "deliveries", len(rs), "err", err)
		}
		for _, r := range rs {
			w.forgetOwner(r.sk.String(), owner, r.epoch) // look again when it comes back
			w.giveBack(r.d, w.opts.LeaseTTL/4)
		}
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

// awaitOwner keeps ds (deliveries of sk, whose owner's process is gone) until the owner's
// worker lease of epoch has ended, then claims sk. The watch of the worker leases says when;
// should it miss that, the claim is tried again after the lease's TTL anyway.
func (w *Worker) awaitOwner(sk events.SessionKey, owner string, epoch uint64, ds []delivery) {
	key := sk.String()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx.Err() != nil {
		return // a stopping worker's deliveries are redelivered
	}
	if a := w.actors[key]; a != nil && a.alive() {
		for _, d := range ds {
			a.deliver(d.msg, d.seq)
		}
		return
	}
	for _, d := range ds {
		w.progress.Add(d.msg)
	}
	if waiting, ok := w.claiming[key]; ok {
		w.claiming[key] = append(waiting, ds...)
		return
	}
	w.claiming[key] = ds
	delete(w.owners, key)
	if w.staleLocked(owner, epoch) {
		w.wg.Add(1)
		go w.claim(sk)
		return
	}
	w.awaiting[owner] = append(w.awaiting[owner], awaitClaim{sk: sk, epoch: epoch})
	time.AfterFunc(w.opts.LeaseTTL+w.opts.LeaseTTL/4, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.ctx.Err() != nil {
			return
		}
		list := w.awaiting[owner]
		for i, c := range list {
			if c.sk == sk && c.epoch == epoch {
				w.awaiting[owner] = append(list[:i:i], list[i+1:]...)
				if len(w.awaiting[owner]) == 0 {
					delete(w.awaiting, owner)
				}
				w.wg.Add(1)
				go w.claim(sk)
				return
			}
		}
	})
}

// onWake answers a ring of this replica's doorbell: another replica got deliveries for
// sessions it saw this replica own. The deliveries the ring hands over (their ack subjects) are
// held here from now on; each session's actor reads the inbox up to the sequence rung. With no
// actor (it went idle, or this replica restarted) the replica claims the session, whose actor
// then reads the inbox from the cursor, and the answer names the session so that the ringer
// looks before it rings here for it again.
func (w *Worker) onWake(m *nats.Msg) {
	if len(m.Data) == 0 { // a probe (probePeers): answering is all it asks
		if m.Reply != "" && w.ctx.Err() == nil {
			_ = m.Respond(nil)
		}
		return
	}
	single := bytes.IndexByte(m.Data, '\n') < 0
	entries, err := events.ParseWake(m.Data, m.Header.Get(events.HeaderWakeAck))
	if err != nil {
		w.log.Warn("ignoring a malformed doorbell ring", "err", err)
		return
	}
	var answer []byte // the owner's answer: nothing to say
	w.mu.Lock()
	if w.ctx.Err() != nil {
		w.mu.Unlock()
		return // no answer: the ringer keeps its deliveries
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
		if single {
			answer = wakeNotOwner
		} else {
			answer = append(answer, e.Session.Token()...)
			answer = append(answer, '\n')
		}
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
	if m.Reply != "" {
		if !single && len(answer) > 0 {
			answer = answer[:len(answer)-1]
		}
		_ = m.Respond(answer)
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
