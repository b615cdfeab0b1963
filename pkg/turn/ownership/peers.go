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
const (
	probeEvery   = 200 * time.Millisecond
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

// probePeers probes its peers' doorbells every probeEvery (see the comment above and
// probeTargetsLocked).
func (o *Manager) probePeers() {
	defer o.wg.Done()
	t := time.NewTicker(probeEvery)
	defer t.Stop()
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
		peers := o.probeTargetsLocked()
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
	if time.Since(s.since) < deadAfter {
		return
	}
	delete(o.suspect, peer)
	o.adopted[peer] = epoch
	o.wg.Add(1)
	go o.peerDead(peer, epoch, time.Since(s.since))
}

// peerDead revokes the lease of peer's epoch and takes over the sessions it claimed.
func (o *Manager) peerDead(peer string, epoch uint64, silent time.Duration) {
	defer o.wg.Done()
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
	for attempt := 0; attempt < 5 && o.ctx.Err() == nil; attempt++ {
		ctx, cancel := context.WithTimeout(o.ctx, 10*time.Second)
		var err error
		keys, err = o.leases.ClaimsOf(ctx, peer, epoch)
		cancel()
		if err == nil {
			break
		}
		o.log.Warn("list a dead peer's sessions; retrying", "peer", peer, "err", err)
		select {
		case <-o.ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
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
