package ownership

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/pkg/store"
)

// ErrNoWorkerLease: this replica's liveness lease is not valid right now (it was lost and is
// being acquired again); no session can be claimed until it is.
var ErrNoWorkerLease = errors.New("turn: this worker holds no valid worker lease")

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

// WakeNotOwner is the answer to a doorbell request from a replica that did not run the session
// when rung (and the first word of a notOwnerNotice): it took the delivery and claims the
// session now (or passes it on to whoever owns it), and the ringer should not ring it for that
// session again without looking.
var WakeNotOwner = []byte("claiming")

// noticePrefix opens a notOwnerNotice: WakeNotOwner and a space, then the sender's id.
var noticePrefix = []byte("claiming ")

// leaseState is this replica's liveness lease, its generation and the commit fence, under a
// lock of its own (the last in the lock order: nothing is taken while holding it).
type leaseState struct {
	mu    sync.Mutex
	l     store.Lease   // its Token is the epoch this replica's claims carry
	gen   uint64        // one more each time the lease was acquired again
	fence chan struct{} // non-nil while the lease is being recovered: commits wait (AwaitFence)
}

func (s *leaseState) get() store.Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.l
}

func (s *leaseState) set(l store.Lease) {
	s.mu.Lock()
	s.l = l
	s.mu.Unlock()
}

// fenceGen returns the fence (nil when open) and the lease generation.
func (s *leaseState) fenceGen() (chan struct{}, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fence, s.gen
}

// WorkerLease returns this replica's current liveness lease.
func (o *Manager) WorkerLease() store.Lease { return o.lease.get() }

// acquireWorkerLease takes this replica's liveness lease (a new epoch), retrying until ctx ends.
func (o *Manager) acquireWorkerLease(ctx context.Context) error {
	wait := 100 * time.Millisecond
	for {
		l, err := o.leases.AcquireWorker(ctx, o.cfg.ID, o.cfg.LeaseTTL)
		if err == nil {
			o.lease.set(l)
			return nil
		}
		if ctx.Err() != nil || errors.Is(err, store.ErrInvalid) {
			return fmt.Errorf("turn: worker lease: %w", err)
		}
		o.log.Warn("acquire worker lease; retrying", "err", err)
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
func (o *Manager) renewWorkerLease() {
	defer o.wg.Done()
	t := time.NewTicker(o.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-o.ctx.Done():
			return
		case <-t.C:
		}
		l := o.lease.get()
		if l.Revision == 0 {
			o.newEpoch()
			continue
		}
		l.Sessions = o.Running()
		err := o.renewOnce(l)
		if o.ctx.Err() != nil {
			return
		}
		if err == nil {
			o.rebalance() // rebalance.go
			continue
		}
		o.lease.suspend()
		o.log.Warn("worker lease lapsed: keeping the sessions, commits wait until it is back", "err", err)
		if o.recoverLease(l, errors.Is(err, store.ErrLeaseLost)) {
			// Acquired again: another replica may have taken claims in the gap. (A lease
			// renewed at its old revision never ended on the server: nothing to confirm.)
			o.confirmClaims(o.lease.nextGen())
		}
		o.lease.unsuspend()
	}
}

// newEpoch is the last resort: every actor stops, and a new lease (a new epoch) is acquired.
func (o *Manager) newEpoch() {
	o.lease.set(store.Lease{})
	o.mu.Lock()
	for _, a := range o.sess {
		a.LeaseLost(ErrNoWorkerLease)
	}
	o.mu.Unlock()
	ctx, cancel := context.WithTimeout(o.ctx, o.cfg.LeaseTTL)
	err := o.acquireWorkerLease(ctx)
	cancel()
	if err != nil && o.ctx.Err() == nil {
		o.log.Warn("acquire worker lease", "err", err)
	}
}

// suspend closes the commit fence (awaitFence) while the lease is being recovered.
func (s *leaseState) suspend() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fence == nil {
		s.fence = make(chan struct{})
	}
}

// nextGen starts a new lease generation, after the lease was acquired again: claims made
// before it must be confirmed before their actors commit again. It returns the generation.
func (s *leaseState) nextGen() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	return s.gen
}

// unsuspend opens the fence again.
func (s *leaseState) unsuspend() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fence != nil {
		close(s.fence)
		s.fence = nil
	}
}

// suspended reports whether the lease is being recovered (no new claims meanwhile).
func (s *leaseState) suspended() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fence != nil
}

// leaseGen is the current lease generation (see suspend).
func (s *leaseState) leaseGen() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

// recoverLease gets the lapsed lease l back: renewed at its revision while the server has not
// ended it (lost false), else acquired again with its epoch. It reports whether the claims must
// be confirmed (the lease was acquired again); with the lease gone for good (another process
// holds this id) it falls back to newEpoch.
func (o *Manager) recoverLease(l store.Lease, lost bool) bool {
	wait := 100 * time.Millisecond
	for o.ctx.Err() == nil {
		var nl store.Lease
		var err error
		ctx, cancel := context.WithTimeout(o.ctx, o.cfg.LeaseTTL)
		if !lost {
			nl, err = o.leases.Renew(ctx, l)
			lost = errors.Is(err, store.ErrLeaseLost)
		}
		if lost {
			nl, err = o.leases.ReacquireWorker(ctx, o.cfg.ID, o.cfg.LeaseTTL, l.Token)
		}
		cancel()
		if err == nil {
			o.lease.set(nl)
			o.log.Info("worker lease back", "epoch", nl.Token, "reacquired", lost)
			return lost
		}
		if errors.Is(err, store.ErrLeaseHeld) || errors.Is(err, store.ErrInvalid) {
			o.log.Warn("worker lease cannot be had with its epoch: stopping every actor", "err", err)
			o.newEpoch()
			return false
		}
		o.log.Warn("recover worker lease; retrying", "err", err)
		select {
		case <-o.ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
	return false
}

// confirmClaims confirms the claim of every actor made before generation gen (see
// store.Leases.ConfirmClaim); actors whose session another replica took stop. An error other
// than a lost claim is retried while the lease holds.
func (o *Manager) confirmClaims(gen uint64) {
	for o.ctx.Err() == nil {
		o.mu.Lock()
		var todo []Session
		for _, a := range o.sess {
			if a.Alive() && a.Claim().Gen() < gen {
				todo = append(todo, a)
			}
		}
		o.mu.Unlock()
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
				switch err := o.confirm(a, gen); {
				case err == nil:
					kept.Add(1)
				case errors.Is(err, store.ErrLeaseLost):
					lost.Add(1)
					a.LeaseLost(err)
				default:
					failed.Add(1)
				}
			}()
		}
		wg.Wait()
		o.log.Info("claims confirmed after the lease came back", "kept", kept.Load(), "taken by others", lost.Load(), "to retry", failed.Load())
		if failed.Load() > 0 {
			select {
			case <-o.ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}

// renewOnce renews l, retrying until it succeeds, the lease is lost, or it lapses.
func (o *Manager) renewOnce(l store.Lease) error {
	for {
		ctx, cancel := context.WithDeadline(o.ctx, l.ValidUntil)
		nl, err := o.leases.Renew(ctx, l)
		cancel()
		if err == nil {
			o.lease.set(nl)
			return nil
		}
		if o.ctx.Err() != nil || errors.Is(err, store.ErrLeaseLost) || !l.Valid(time.Now().Add(100*time.Millisecond)) {
			return err
		}
		o.log.Warn("renew worker lease; retrying", "err", err)
		select {
		case <-o.ctx.Done():
			return o.ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
