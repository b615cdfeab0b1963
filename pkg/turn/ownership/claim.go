package ownership

import (
	"context"
	"errors"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/store"
)

// AwaitFence returns once this replica's lease is in force and s's claim is confirmed for the
// current lease generation, or with an error: a context commit waits here while the lease is
// being recovered, so that no commit goes out for a session another replica may have taken
// meanwhile. A claim made before the lease lapsed is confirmed here if confirmClaims has not
// done it yet; a claim another replica took stops the session (store.ErrLeaseLost,
// Session.LeaseLost).
func (o *Manager) AwaitFence(ctx context.Context, s Session) error {
	for {
		ch, gen := o.lease.fenceGen()
		if ch != nil {
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if s.Claim().Gen() >= gen {
			return nil
		}
		if err := o.confirm(s, gen); err != nil {
			if errors.Is(err, store.ErrLeaseLost) {
				s.LeaseLost(err)
			}
			return err
		}
	}
}

// confirm confirms s's claim for lease generation gen (store.Leases.ConfirmClaim), bounded by
// the session's context.
func (o *Manager) confirm(s Session, gen uint64) error {
	c := s.Claim()
	c.confirmMu.Lock()
	defer c.confirmMu.Unlock()
	c.mu.Lock()
	cl, cur := c.c, c.gen
	c.mu.Unlock()
	if cur >= gen {
		return nil
	}
	ctx, cancel := context.WithTimeout(s.Context(), 5*time.Second)
	defer cancel()
	nc, err := o.leases.ConfirmClaim(ctx, cl)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.c, c.gen = nc, gen
	c.mu.Unlock()
	return nil
}

// viewEvery is how often followWorkers reads every worker lease afresh. Between two reads a
// replica hears no other replica's renewals: a watch of every worker lease cost each replica
// one delivery per renewal of every peer (N² deliveries per renewal period, issue 41), while
// a read every viewEvery costs each replica N messages per viewEvery. What the view answers
// tolerates that age: a peer's death is found by its ring predecessors' probes (peers.go),
// which take its sessions over themselves; a hint this view still calls alive rings a dead
// doorbell, whose delivery comes back after AckWait while the session's new owner already
// reads its inbox (it hears the inbox subject); a new replica is probed and weighed in
// rebalancing from the next read on; liveness that decides a claim is asked of the stream
// leader (alive) whenever the view does not show the owner live with that epoch.
//
// The interval grows with the replicas, viewPerPeer per worker lease read, so that the reads
// cost each replica at most 1/viewPerPeer messages a second whatever their number: 5 s up to
// 50 replicas, 10 s at 100, 60 s at 600.
var viewEvery = 5 * time.Second

const viewPerPeer = 100 * time.Millisecond

// viewInterval is the wait before the next read when the last one showed n worker leases.
func viewInterval(n int) time.Duration { return max(viewEvery, time.Duration(n)*viewPerPeer) }

// followWorkers keeps o.view current by reading every worker lease (a watch until it has
// delivered its initial values) every viewEvery, and claims the sessions that waited for a
// dead owner as soon as a read shows its lease ended. Until the first read has succeeded,
// liveness is asked of the stream leader.
func (o *Manager) followWorkers() {
	defer o.wg.Done()
	for o.ctx.Err() == nil {
		n, err := o.readWorkers()
		if err != nil && o.ctx.Err() == nil {
			o.log.Warn("read worker leases; retrying", "err", err)
			select {
			case <-o.ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		select {
		case <-o.ctx.Done():
		case <-time.After(viewInterval(n)):
		}
	}
}

// readWorkers reads every worker lease and replaces the view with what it shows: a lease
// seen is kept at the largest epoch seen (a delete marker marks it gone); a peer the read no
// longer shows is dropped, unless it is gone and this replica has yet to take its sessions
// over (peerDead deletes it then).
// It returns the number of worker leases read.
func (o *Manager) readWorkers() (int, error) {
	ctx, cancel := context.WithCancel(o.ctx)
	defer cancel()
	evs, err := o.leases.WatchWorkers(ctx)
	if err != nil {
		return 0, err
	}
	var seen []store.WorkerLeaseEvent
	complete := false
	for ev := range evs {
		if ev.Initial {
			complete = true
			break
		}
		seen = append(seen, ev)
	}
	if !complete {
		if err := o.ctx.Err(); err != nil {
			return 0, err
		}
		return 0, errors.New("the watch of the worker leases ended before its initial values")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	view := make(map[string]workerSeen, len(seen))
	for _, ev := range seen {
		s, ok := view[ev.Worker]
		if !ok {
			s = o.view[ev.Worker]
		}
		view[ev.Worker] = o.applyLocked(s, ev)
	}
	for id, s := range o.view {
		if _, ok := view[id]; !ok && s.gone && s.epoch > o.adopted[id] {
			view[id] = s
		}
	}
	o.view, o.viewReady = view, true
	return len(seen), nil
}

// seeWorker applies one event of the worker leases to the view.
func (o *Manager) seeWorker(ev store.WorkerLeaseEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if ev.Initial {
		o.viewReady = true
		return
	}
	o.view[ev.Worker] = o.applyLocked(o.view[ev.Worker], ev)
}

// applyLocked is what the view shows of a worker, s, after ev: a delete marker ends the
// lease (and holds rebalancing while its sessions move, when the lease was seen live), a put
// of a larger or equal epoch replaces it.
func (o *Manager) applyLocked(s workerSeen, ev store.WorkerLeaseEvent) workerSeen {
	switch {
	case ev.Epoch == 0:
		if !s.gone && s.epoch > 0 { // once per lease seen live, not on each read of its marker
			holdRebalanceLocked(o, time.Now())
		}
		s.gone = true
	case ev.Epoch >= s.epoch:
		s = workerSeen{epoch: ev.Epoch, sessions: ev.Sessions}
	}
	return s
}

// staleLocked reports whether the watch has shown that owner's worker lease of epoch ended
// (gone, or acquired again with a larger epoch), or, once the watch has delivered every
// worker lease, shows no lease of owner at all (a dead peer is dropped from the view after
// its takeover). A hint it calls stale is looked up again in KV by a claim, so a false
// "stale" costs one round trip; a false "alive" sent deliveries to a dead doorbell, every
// AckWait, until the session's owner changed again.
func (o *Manager) staleLocked(owner string, epoch uint64) bool {
	s, ok := o.view[owner]
	if !ok {
		return o.viewReady
	}
	return epoch < s.epoch || epoch == s.epoch && s.gone
}

// alive is the store.AliveFunc of this replica's claims. The watch answers "alive" when it
// showed the owner's lease with that epoch (as of the last renewal it saw); anything else is
// asked of the stream leader, because an ended lease may be acquired again with the same
// epoch (a worker whose lease lapsed while it lived, see renewWorkerLease): only the leader's
// "gone" is certain.
func (o *Manager) alive(ctx context.Context, owner string, epoch uint64) (bool, error) {
	o.mu.Lock()
	s, ok := o.view[owner]
	ready := o.viewReady
	o.mu.Unlock()
	if ready && ok && epoch == s.epoch && !s.gone {
		return true, nil
	}
	return o.leases.WorkerAlive(ctx, owner, epoch)
}

// claim tries to claim sk and start its actor, then hands over the deliveries that waited for
// the claim. If another live replica owns the session, the deliveries are rung over to it.
func (o *Manager) claim(sk events.SessionKey) {
	defer o.wg.Done()
	key := sk.String()
	var c store.Claim
	var err error
	gen, wl, ok := awaitWorkerLease(o)
	if !ok {
		err = ErrNoWorkerLease
	} else {
		c, err = o.leases.Claim(o.ctx, sk, wl, o.alive)
	}
	o.mu.Lock()
	waiting := o.claiming[key]
	delete(o.claiming, key)
	if err != nil {
		var held *store.HeldError
		isHeld := errors.As(err, &held)
		if isHeld {
			o.owners[key] = ownerHint{owner: held.Owner, epoch: held.Epoch}
		}
		o.mu.Unlock()
		if isHeld {
			o.ring(sk, held.Owner, held.Epoch, waiting)
			return
		}
		if o.ctx.Err() == nil {
			o.log.Warn("claim session", "session", key, "err", err)
		}
		for _, d := range waiting {
			o.giveBack(d, time.Second)
		}
		return
	}
	delete(o.owners, key)
	if c.TookOver != "" && c.TookOver != o.cfg.ID {
		o.log.Info("took over session", "session", key, "from", c.TookOver)
		o.cfg.Metrics.TakeOver()
	}
	a := o.cfg.Sessions.Adopt(sk, &Claim{c: c, gen: gen})
	if o.killed {
		a.Kill()
	}
	o.sess[key] = a
	o.cfg.Metrics.Owned(1)
	for _, d := range waiting {
		a.Deliver(d.Msg, d.Seq)
	}
	o.wg.Add(1)
	o.mu.Unlock()
	go func() {
		defer o.wg.Done()
		a.Run()
		o.mu.Lock()
		if o.sess[key] == a {
			delete(o.sess, key)
		}
		o.mu.Unlock()
		o.cfg.Metrics.Owned(-1)
	}()
}

// claimLeaseWait bounds how long a claim waits for this replica's worker lease to be valid
// again (awaitWorkerLease).
const claimLeaseWait = 2 * time.Second

// awaitWorkerLease returns the lease generation and the worker lease a claim is made under, once
// the lease is valid and not being recovered, waiting up to claimLeaseWait for that; ok is false
// if it is not by then (or the replica stops). A claim made without a valid lease is refused,
// and its session then waits for its deliveries to come back; during a takeover of hundreds of
// sessions in one process the lease's renewal can lapse for a moment, and every session claimed
// in that moment waited a redelivery (seconds) instead of the renewal (tens of milliseconds).
// The lease and its generation are read after the wait, as before without it.
func awaitWorkerLease(o *Manager) (gen uint64, wl store.Lease, ok bool) {
	deadline := time.Now().Add(claimLeaseWait)
	for {
		gen = o.lease.leaseGen()
		wl = o.lease.get()
		if wl.Valid(time.Now()) && !o.lease.suspended() {
			return gen, wl, true
		}
		wait := time.Until(deadline)
		if wait <= 0 || o.ctx.Err() != nil {
			return 0, store.Lease{}, false
		}
		fence, _ := o.lease.fenceGen()
		select {
		case <-o.ctx.Done():
		case <-fence: // nil while not suspended: the timer below decides
		case <-time.After(min(wait, 50*time.Millisecond)):
		}
	}
}

// giveBack hands a delivery back to JetStream, to come again after delay.
func (o *Manager) giveBack(d Delivery, delay time.Duration) {
	o.progress.Remove(d.Msg)
	_ = d.Msg.NakWithDelay(delay)
}
