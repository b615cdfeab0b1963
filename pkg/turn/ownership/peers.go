package ownership

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/store"
)

// Death of a peer, told by its doorbell. A killed process's NATS connection closes at once,
// and with it the subscription to its doorbell (agent.wake.<id>): a request there gets "no
// responders" from the server right away, long before the process's worker lease would
// expire. Every replica probes the doorbell of every other replica it sees in the worker
// leases; a peer whose doorbell has had no responders for deadAfter (any answer in between
// clears it) is taken for dead. Its lease is then revoked (store.Leases.RevokeWorker), so that
// every replica sees its claims stale, and the sessions it claimed are claimed here at once
// (store.Leases.ClaimsOf): their actors read the inbox from the cursor and resume the open
// turns, without waiting for the dead replica's deliveries to come back after AckWait or for
// its lease's TTL. Each replica probes only its probeSuccessors successors in the ring of live
// replicas (probeTargetsLocked), so the probes grow with the replicas, not their square.
//
// "No responders" is not proof: a peer that is reconnecting (its NATS node died) has no
// subscription for a moment too. deadAfter covers a quick reconnect; a peer revoked while it
// lives loses nothing but the sessions taken meanwhile: its renewal fails, it acquires its
// lease again with the same epoch and keeps every claim still its own (renewWorkerLease).
// Correctness never depends on it: context commits stay fenced.
//
// A suspected peer is probed again every suspectEvery, not only with the next round: a death
// is heard up to probeEvery after it happens, but once heard it is decided deadAfter later on
// a fine grid. At one probe per probeEvery a decision that fell a millisecond short of
// deadAfter (the probes' round trips vary) waited a whole period more: 400–800 ms from the
// kill to the takeover, against 400–650 ms now, and a quiet replica sends no more probes than
// before (only a suspect is probed on the fine grid, and only while it is suspected).
const (
	probeEvery   = 200 * time.Millisecond
	suspectEvery = 50 * time.Millisecond
	deadAfter    = 400 * time.Millisecond
	probeTimeout = time.Second
	// probeSuccessors is how many live peers each replica probes (its successors in the ring
	// of worker ids): so many replicas must die at once before a death waits for the next
	// ring position (or the lease TTL) to be noticed.
	probeSuccessors = 2
)

// suspicion is a peer whose doorbell had no responders, since when, at which epoch.
type suspicion struct {
	since time.Time
	epoch uint64
}

// probePeers probes its peers' doorbells every probeEvery, and the suspected ones every
// suspectEvery (see the comment above and probeTargetsLocked).
func (o *Manager) probePeers() {
	defer o.wg.Done()
	t := time.NewTicker(suspectEvery)
	defer t.Stop()
	var lastRound time.Time
	for {
		select {
		case <-o.ctx.Done():
			return
		case <-t.C:
		}
		if !o.nc.IsConnected() {
			// Our own connection is down: every answer would be wrong.
			o.mu.Lock()
			clear(o.suspect)
			o.mu.Unlock()
			continue
		}
		o.mu.Lock()
		var peers map[string]uint64
		if now := time.Now(); now.Sub(lastRound) >= probeEvery-suspectEvery/2 {
			peers, lastRound = o.probeTargetsLocked(), now
		} else if len(o.suspect) > 0 {
			// Between rounds only the suspects that are still targets (a peer that left the
			// view meanwhile is not decided on an old suspicion).
			peers = o.probeTargetsLocked()
			for id, epoch := range peers {
				if s, ok := o.suspect[id]; !ok || s.epoch != epoch {
					delete(peers, id)
				}
			}
		}
		o.mu.Unlock()
		done := make(chan struct{}, len(peers))
		for id, epoch := range peers {
			go func() {
				defer func() { done <- struct{}{} }()
				o.probe(id, epoch)
			}()
		}
		for range peers {
			<-done
		}
	}
}

// probeTargetsLocked picks the peers to probe now, with their epochs: the probeSuccessors
// replicas that follow this one in the ring of live worker leases (sorted by id), and every
// peer whose lease the watch showed ended but whose sessions this replica has not yet taken
// over. Each live replica is so watched by probeSuccessors others: N replicas send
// probeSuccessors × N probes per round, not N × (N-1). A dead peer is found by its
// predecessors in the ring; their revocation shows it gone to everyone, who then probe it too
// and help take its sessions over, as when all probed all. When its watchers die with it, the
// ring closes over them once they are taken for dead (adopted), and the next replica probes it.
func (o *Manager) probeTargetsLocked() map[string]uint64 {
	peers := make(map[string]uint64, 2*probeSuccessors)
	live := make([]string, 0, len(o.view))
	for id, s := range o.view {
		if id == o.cfg.ID || s.epoch <= o.adopted[id] {
			continue
		}
		if s.gone {
			peers[id] = s.epoch
			continue
		}
		live = append(live, id)
	}
	if len(live) <= probeSuccessors {
		for _, id := range live {
			peers[id] = o.view[id].epoch
		}
		return peers
	}
	slices.Sort(live)
	// The first live peer after this replica's id, wrapping around.
	i, _ := slices.BinarySearch(live, o.cfg.ID)
	for k := range probeSuccessors {
		id := live[(i+k)%len(live)]
		peers[id] = o.view[id].epoch
	}
	return peers
}

// probe asks peer's doorbell once: an answer clears a suspicion, no responders adds to it, a
// timeout (a starved peer) says nothing.
func (o *Manager) probe(peer string, epoch uint64) {
	_, err := o.nc.Request(events.AgentWakeSubject(peer), nil, probeTimeout)
	switch {
	case err == nil:
		o.mu.Lock()
		delete(o.suspect, peer)
		o.mu.Unlock()
	case errors.Is(err, nats.ErrNoResponders):
		o.suspectPeer(peer, epoch)
	}
}

// suspectPeer notes that peer's doorbell had no responders now; once that has lasted
// deadAfter, the peer is taken for dead (peerDead).
func (o *Manager) suspectPeer(peer string, epoch uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ctx.Err() != nil || o.adopted[peer] >= epoch {
		return
	}
	s, ok := o.suspect[peer]
	if !ok || s.epoch != epoch {
		o.suspect[peer] = suspicion{since: time.Now(), epoch: epoch}
		return
	}
	// The probes that decide land on a suspectEvery grid: half a period of slack keeps a round
	// trip a little faster than the first one from putting the decision a period later.
	if time.Since(s.since) < deadAfter-suspectEvery/2 {
		return
	}
	delete(o.suspect, peer)
	o.adopted[peer] = epoch
	o.wg.Add(1)
	go o.peerDead(peer, epoch, time.Since(s.since))
}

// peerDead revokes the lease of peer's epoch and takes over the sessions it claimed. The claims
// are listed while the lease is being revoked: the list is a pass over the whole bucket (a
// consumer's creation and every claim's value) and the revocation a round trip of its own, and
// nothing in one waits for the other; only the claims themselves must wait for the revocation,
// after which every replica's liveness check calls the dead peer's claims stale. A claim the
// peer wrote during the pass can only be missed if it was alive after all (revoked by
// mistake), and a missed session is claimed when its next delivery comes (ClaimsOf).
func (o *Manager) peerDead(peer string, epoch uint64, silent time.Duration) {
	defer o.wg.Done()
	listCtx, stopList := context.WithCancel(o.ctx)
	defer stopList()
	listed := make(chan []events.SessionKey, 1)
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		listed <- claimsOf(listCtx, o, peer, epoch)
	}()
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		ctx, cancel := context.WithTimeout(o.ctx, 5*time.Second)
		err := o.leases.RevokeWorker(ctx, peer, epoch)
		cancel()
		if o.ctx.Err() != nil {
			return
		}
		if err == nil {
			break
		}
		if errors.Is(err, store.ErrConflict) { // it renewed meanwhile: alive
			o.log.Info("peer's doorbell had no responders but it renews its lease", "peer", peer)
			o.mu.Lock()
			if o.adopted[peer] == epoch {
				delete(o.adopted, peer)
			}
			o.mu.Unlock()
			return
		}
		o.log.Warn("revoke a dead peer's lease; retrying", "peer", peer, "err", err)
		select {
		case <-o.ctx.Done():
			return
		case <-time.After(wait):
		}
	}
	o.mu.Lock()
	if s := o.view[peer]; s.epoch <= epoch {
		o.view[peer] = workerSeen{epoch: epoch, gone: true}
	}
	holdRebalanceLocked(o, time.Now())
	o.mu.Unlock()
	var keys []events.SessionKey
	select {
	case keys = <-listed:
	case <-o.ctx.Done():
		return
	}
	o.log.Info("peer gone (no responders on its doorbell): taking over its sessions", "peer", peer, "epoch", epoch,
		"silent", silent.Round(time.Millisecond), "sessions", len(keys))
	sem := make(chan struct{}, claimSlots)
	for _, sk := range keys {
		key := sk.String()
		o.mu.Lock()
		_, claiming := o.claiming[key]
		if a := o.sess[key]; o.ctx.Err() != nil || claiming || a != nil && a.Alive() {
			o.mu.Unlock()
			continue
		}
		o.claiming[key] = nil
		delete(o.owners, key)
		o.wg.Add(1)
		o.mu.Unlock()
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			o.claim(sk)
		}()
	}
	o.mu.Lock()
	if s := o.view[peer]; s.gone && s.epoch <= epoch {
		delete(o.view, peer) // nothing more to learn from it; a later lease of it comes by the watch
	}
	o.mu.Unlock()
}

// claimsOf lists the sessions peer claimed under epoch (store.Leases.ClaimsOf), trying up to
// five times; nil if every try failed or ctx ended. A function, not a method: Manager is at the
// size limit (internal/layering).
func claimsOf(ctx context.Context, o *Manager, peer string, epoch uint64) []events.SessionKey {
	for attempt := 0; attempt < 5 && ctx.Err() == nil; attempt++ {
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		keys, err := o.leases.ClaimsOf(tctx, peer, epoch)
		cancel()
		if err == nil {
			return keys
		}
		if ctx.Err() != nil {
			return nil
		}
		o.log.Warn("list a dead peer's sessions; retrying", "peer", peer, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}
