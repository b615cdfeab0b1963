package ownership

import (
	"github.com/agentbus/agentbus/pkg/events"
)

// Internals reaches into a Manager's state for the tests of the package that runs it (pkg/turn
// drives whole replicas and checks what ownership made of them). Nothing in production calls
// it.
type Internals struct{ o *Manager }

// Internals returns the Manager's test access.
func (o *Manager) Internals() Internals { return Internals{o} }

// Stale reports whether the watch shows owner's lease of epoch ended (see staleLocked).
func (i Internals) Stale(owner string, epoch uint64) bool {
	i.o.mu.Lock()
	defer i.o.mu.Unlock()
	return i.o.staleLocked(owner, epoch)
}

// Claim claims sk now, as a delivery for a session nobody here runs would.
func (i Internals) Claim(sk events.SessionKey) {
	o := i.o
	o.mu.Lock()
	o.claiming[sk.String()] = nil
	o.wg.Add(1)
	o.mu.Unlock()
	go o.claim(sk)
}

// Suspended reports whether the lease is being recovered.
func (i Internals) Suspended() bool { return i.o.lease.suspended() }

// Hint notes that owner (of epoch) runs sk, as a HeldError would.
func (i Internals) Hint(sk events.SessionKey, owner string, epoch uint64) {
	i.o.mu.Lock()
	i.o.owners[sk.String()] = ownerHint{owner: owner, epoch: epoch}
	i.o.mu.Unlock()
}

// Hinted reports whether a hint for sk is held.
func (i Internals) Hinted(sk events.SessionKey) bool {
	i.o.mu.Lock()
	defer i.o.mu.Unlock()
	_, ok := i.o.owners[sk.String()]
	return ok
}

// Ring queues one ring of owner's doorbell per key, each a handed-over delivery of inbox
// sequence seq without an ack subject; batch sends them at once as one ring instead.
func (i Internals) Ring(owner string, epoch, seq uint64, batch bool, keys ...events.SessionKey) {
	var rs []ringEntry
	for _, k := range keys {
		d := Delivery{Msg: &adoptedMsg{nc: i.o.nc, subject: events.AgentInSubject(k)}, Seq: seq}
		if !batch {
			i.o.ring(k, owner, epoch, []Delivery{d})
			continue
		}
		rs = append(rs, ringEntry{sk: k, epoch: epoch, d: d})
	}
	if batch {
		i.o.ringBatch(owner, rs)
	}
}

// Sees reports whether the watch of the worker leases has delivered its initial values and
// shows a lease of worker id.
func (i Internals) Sees(id string) bool {
	i.o.mu.Lock()
	defer i.o.mu.Unlock()
	_, ok := i.o.view[id]
	return i.o.viewReady && ok
}
