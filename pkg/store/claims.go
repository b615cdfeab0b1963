package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil"
)

// Worker leases and session claims: ownership whose cost does not grow with the sessions held.
//
// A worker process holds one liveness lease, KV leases key "worker.<id>" (WorkerLeaseKey): a
// TTL lease like a session lease (per-message TTL, renewed by a CAS publish with a fresh
// Nats-TTL), renewed every TTL/3 however many sessions the worker owns. Its Token, the revision
// at which it was acquired, is the worker's epoch: a process that restarts with the same id
// acquires again and gets a new epoch.
//
// A session's entry (key <sk>) is then a claim, not a lease: {owner worker, worker epoch},
// written once when the owner's actor starts (Claim) and purged when it stops (Unclaim), never
// renewed. A claim is in force while its owner's worker lease exists with the same epoch; once
// that lease has expired (the worker died or stalled past its TTL) or carries another epoch (the
// worker restarted), the claim is stale and the next Claim takes it over by a CAS on its
// revision. The claim's revision is the session's fencing token, as a session lease's was.
//
// A worker lease may end while its process lives: it lapsed on the server while the bus was
// unavailable, or a replica that took the worker for dead revoked it (RevokeWorker). The
// worker then acquires it again with the same epoch (ReacquireWorker) and confirms each of its
// claims by a CAS on its token (ConfirmClaim): a claim nobody took in the gap is in force again,
// one another worker took is lost. Since an ended lease can come back with its epoch, only the
// stream leader's "gone" (WorkerAlive) is certain when a claim is taken over.
//
// Session keys never contain '.', so "worker." keys cannot collide with them.

// WorkerLeasePrefix starts the KV leases key of every worker lease.
const WorkerLeasePrefix = "worker."

// WorkerLeaseKey is the KV leases key of worker's liveness lease.
func WorkerLeaseKey(worker string) string { return WorkerLeasePrefix + events.EncodeToken(worker) }

// Claim says that Owner's actor is the one writer of a session, while the worker lease of
// Owner with epoch Epoch lives.
type Claim struct {
	Key   events.SessionKey
	Owner string
	Epoch uint64
	// Token is the fencing token: the KV revision of the claim. Tokens only grow.
	Token uint64
	// TookOver names the owner of the stale claim this one replaced ("" when the key was free).
	TookOver string
}

// claimRecord is the KV value of a session claim.
type claimRecord struct {
	Owner     string `json:"owner"`
	Epoch     uint64 `json:"epoch"`
	ClaimedAt int64  `json:"claimedAt"`
	// TTLms is set only by the older per-session TTL leases (leaseRecord); a record with
	// Epoch 0 is such a lease and is in force while it exists.
	TTLms int64 `json:"ttlMs,omitempty"`
}

// AliveFunc reports whether the worker lease of owner exists with the given epoch. It must not
// report false unless that is certain (the lease is gone, or has another epoch, on the server):
// a false answer hands the session to another worker.
type AliveFunc func(ctx context.Context, owner string, epoch uint64) (bool, error)

// AcquireWorker takes worker's liveness lease. A lease of an earlier life of the same worker id
// is taken over with a new epoch (its claims become stale at once); a lease held by a live
// process with the same id fails with a *HeldError only if its record names another owner,
// which cannot happen with one id per process. Renew, RenewAll and Release work on it as on a
// session lease.
func (l *Leases) AcquireWorker(ctx context.Context, worker string, ttl time.Duration) (Lease, error) {
	if worker == "" {
		return Lease{}, fmt.Errorf("%w: worker id is empty", ErrInvalid)
	}
	lease, err := l.acquire(ctx, WorkerLeaseKey(worker), "worker "+worker, worker, ttl)
	if err != nil {
		return Lease{}, err
	}
	lease.Worker = worker
	return lease, nil
}

// WorkerEpoch returns the epoch of worker's liveness lease as the stream leader sees it, or
// ErrNotFound when there is none (it expired or was released). The answer reflects every
// acknowledged write, so a claimer may act on ErrNotFound or on an epoch that differs.
func (l *Leases) WorkerEpoch(ctx context.Context, worker string) (uint64, error) {
	raw, err := natsutil.LeaderGetMsg(ctx, l.js, "KV_"+bucketLeases, natsutil.MsgQuery{LastFor: l.subPre + WorkerLeaseKey(worker)})
	if errors.Is(err, jetstream.ErrMsgNotFound) || err == nil && leaseGone(raw.Header) {
		return 0, fmt.Errorf("worker lease %s: %w", worker, ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("worker lease %s: %w", worker, err)
	}
	e, _, err := workerRecord(raw.Data, raw.Sequence)
	return e, err
}

// WorkerAlive is the AliveFunc that asks the stream leader (WorkerEpoch).
func (l *Leases) WorkerAlive(ctx context.Context, owner string, epoch uint64) (bool, error) {
	e, err := l.WorkerEpoch(ctx, owner)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return e == epoch, nil
}

// workerRecord decodes a worker lease record stored at revision rev: its epoch (its token, or
// rev itself for the acquiring write, which carries no token yet) and the number of sessions
// its holder ran when it was written (-1 when the record does not say).
func workerRecord(data []byte, rev uint64) (epoch uint64, sessions int, err error) {
	var rec leaseRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return 0, 0, fmt.Errorf("decode worker lease: %w", err)
	}
	sessions = -1
	if rec.Sessions != nil {
		sessions = *rec.Sessions
	}
	if rec.Token != 0 {
		return rec.Token, sessions, nil
	}
	return rev, sessions, nil
}

// leaseGone reports a KV delete or purge, or the marker the server writes when a TTL expires.
func leaseGone(h nats.Header) bool {
	if h == nil {
		return false
	}
	switch h.Get("KV-Operation") {
	case "DEL", "PURGE":
		return true
	}
	return h.Get(jetstream.MarkerReasonHeader) != ""
}

// WorkerLeaseEvent is one change of a worker lease seen by WatchWorkers.
type WorkerLeaseEvent struct {
	Worker string
	// Epoch is the lease's epoch; 0 when the lease is gone (expired, released).
	Epoch uint64
	// Sessions is how many sessions the worker ran at this write (see Lease.Sessions), or -1
	// when the record does not say (its acquiring write, or a version that did not report it).
	Sessions int
	// Initial is set on the nil event that ends the initial values (Worker is "" then).
	Initial bool
}

// WatchWorkers follows every worker lease: first the current ones, then one Initial event, then
// each change (an acquisition, a renewal, an expiry or a release) in the order the server
// stored them. Because the events are the stream's history in order, "gone" or a new epoch seen
// here is true on the server; "alive" may be outdated by the time it is read. The watch ends
// with ctx.
func (l *Leases) WatchWorkers(ctx context.Context) (<-chan WorkerLeaseEvent, error) {
	w, err := l.kv.Watch(ctx, WorkerLeasePrefix+">")
	if err != nil {
		return nil, fmt.Errorf("watch worker leases: %w", err)
	}
	out := make(chan WorkerLeaseEvent, 64)
	go func() {
		defer close(out)
		defer func() { _ = w.Stop() }()
		for {
			var e jetstream.KeyValueEntry
			var ok bool
			select {
			case <-ctx.Done():
				return
			case e, ok = <-w.Updates():
				if !ok {
					return
				}
			}
			var ev WorkerLeaseEvent
			if e == nil {
				ev.Initial = true
			} else {
				worker, err := events.DecodeToken(strings.TrimPrefix(e.Key(), WorkerLeasePrefix))
				if err != nil {
					continue
				}
				ev.Worker = worker
				if e.Operation() == jetstream.KeyValuePut {
					if ev.Epoch, ev.Sessions, err = workerRecord(e.Value(), e.Revision()); err != nil {
						continue
					}
				}
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// Claim makes worker (whose liveness lease is w) the owner of sk's session. It fails with a
// *HeldError when another worker claimed the session and alive reports that worker live with
// the claim's epoch. A stale claim (its owner's worker lease is gone or has another epoch) is
// taken over by a CAS on its revision, so of two workers that both found it stale only one
// wins; the other sees the winner's claim. A claim of this worker itself (an earlier epoch, or
// an actor that ended without unclaiming) is taken over the same way, with a new token, so
// that the old claim's Unclaim cannot remove the new one.
func (l *Leases) Claim(ctx context.Context, sk events.SessionKey, w Lease, alive AliveFunc) (Claim, error) {
	if err := sk.Validate(); err != nil {
		return Claim{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if w.Worker == "" || w.Token == 0 {
		return Claim{}, fmt.Errorf("%w: claim without a worker lease", ErrInvalid)
	}
	key := sk.Token()
	data, _ := json.Marshal(claimRecord{Owner: w.Worker, Epoch: w.Token, ClaimedAt: l.now().UnixMilli()})
	for attempt := 0; attempt < 8; attempt++ {
		rev, err := l.kv.Create(ctx, key, data)
		if err == nil {
			return Claim{Key: sk, Owner: w.Worker, Epoch: w.Token, Token: rev}, nil
		}
		if !isCASConflict(err) {
			return Claim{}, fmt.Errorf("claim session %s: %w", sk, err)
		}
		// Any replica may answer: a stale copy only makes the CAS below fail.
		e, err := l.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // unclaimed between our create and get
		}
		if err != nil {
			return Claim{}, fmt.Errorf("claim session %s: %w", sk, err)
		}
		var cur claimRecord
		if err := json.Unmarshal(e.Value(), &cur); err != nil || cur.Owner == "" {
			return Claim{}, fmt.Errorf("claim session %s: %w: undecodable lease record %q", sk, ErrInvalid, e.Value())
		}
		held := &HeldError{Key: sk.String(), Owner: cur.Owner, Epoch: cur.Epoch, TTL: time.Duration(cur.TTLms) * time.Millisecond}
		if cur.Epoch == 0 {
			return Claim{}, held // a per-session TTL lease: in force until the server expires it
		}
		if cur.Owner != w.Worker { // our own claims are ours to take, of any epoch
			ok, err := alive(ctx, cur.Owner, cur.Epoch)
			if err != nil {
				return Claim{}, fmt.Errorf("claim session %s: owner %s: %w", sk, cur.Owner, err)
			}
			if ok {
				return Claim{}, held
			}
		}
		rev, err = l.kv.Update(ctx, key, data, e.Revision())
		if isCASConflict(err) {
			continue
		}
		if err != nil {
			return Claim{}, fmt.Errorf("claim session %s: %w", sk, err)
		}
		return Claim{Key: sk, Owner: w.Worker, Epoch: w.Token, Token: rev, TookOver: cur.Owner}, nil
	}
	return Claim{}, fmt.Errorf("claim session %s: %w", sk, ErrConflict)
}

// Unclaim gives the session up so that another worker can claim it at once. Unclaiming a claim
// that was taken over returns ErrLeaseLost and changes nothing.
func (l *Leases) Unclaim(ctx context.Context, c Claim) error {
	if c.Token == 0 {
		return fmt.Errorf("%w: unclaim of a claim never made", ErrInvalid)
	}
	err := l.kv.Purge(ctx, c.Key.Token(), jetstream.LastRevision(c.Token), jetstream.PurgeTTL(time.Minute))
	if isCASConflict(err) {
		return fmt.Errorf("unclaim session %s (token %d): %w", c.Key, c.Token, ErrLeaseLost)
	}
	if err != nil {
		return fmt.Errorf("unclaim session %s: %w", c.Key, err)
	}
	return nil
}

// ReacquireWorker takes worker's liveness lease again with the epoch it had: for a worker
// process that is alive but whose lease lapsed (a renewal could not reach the bus while a NATS
// node failed over, say) or was revoked by a replica that took it for dead. Its claims of that
// epoch are then in force again, except those another worker took over meanwhile: the caller
// confirms each one (ConfirmClaim) before it acts on it again. A record of the same worker id
// that is still there (a renewal whose ack was lost moved its revision) is overwritten by a
// CAS; a record of another owner fails with a *HeldError.
func (l *Leases) ReacquireWorker(ctx context.Context, worker string, ttl time.Duration, epoch uint64) (Lease, error) {
	if worker == "" || epoch == 0 {
		return Lease{}, fmt.Errorf("%w: reacquire needs a worker id and its epoch", ErrInvalid)
	}
	ttl, err := checkTTL(ttl)
	if err != nil {
		return Lease{}, err
	}
	key := WorkerLeaseKey(worker)
	for attempt := 0; attempt < 8; attempt++ {
		sent := l.now()
		rec := leaseRecord{Owner: worker, Token: epoch, AcquiredAt: sent.UnixMilli(), RenewedAt: sent.UnixMilli(), TTLms: ttl.Milliseconds()}
		data, _ := json.Marshal(rec)
		lease := Lease{Worker: worker, Owner: worker, Token: epoch, TTL: ttl, Acquired: sent, ValidUntil: sent.Add(ttl)}
		rev, err := l.kv.Create(ctx, key, data, jetstream.KeyTTL(ttl))
		if err == nil {
			lease.Revision = rev
			return lease, nil
		}
		if !isCASConflict(err) {
			return Lease{}, fmt.Errorf("reacquire lease worker %s: %w", worker, err)
		}
		e, err := l.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return Lease{}, fmt.Errorf("reacquire lease worker %s: %w", worker, err)
		}
		var cur leaseRecord
		_ = json.Unmarshal(e.Value(), &cur)
		if cur.Owner != worker {
			return Lease{}, &HeldError{Key: "worker " + worker, Owner: cur.Owner, TTL: time.Duration(cur.TTLms) * time.Millisecond}
		}
		rev, err = l.publish(ctx, key, rec, e.Revision(), ttl)
		if isWrongLastSeq(err) {
			continue
		}
		if err != nil {
			return Lease{}, fmt.Errorf("reacquire lease worker %s: %w", worker, err)
		}
		lease.Revision = rev
		return lease, nil
	}
	return Lease{}, fmt.Errorf("reacquire lease worker %s: %w", worker, ErrConflict)
}

// RevokeWorker ends the liveness lease of worker's epoch at once, for a replica that has good
// reason to take that worker for dead (its doorbell has no responders: its connection is
// gone). Every claim of that epoch is stale from then on, for every replica. It returns nil
// when the lease of that epoch is gone after the call (revoked now, or already expired,
// released or replaced by another epoch), and ErrConflict when the worker kept renewing it
// meanwhile: it is alive. A worker that is alive after all learns of the revocation at its
// next renewal (ErrLeaseLost), acquires its lease again with the same epoch and keeps the
// claims nobody took (ReacquireWorker, ConfirmClaim).
func (l *Leases) RevokeWorker(ctx context.Context, worker string, epoch uint64) error {
	key := WorkerLeaseKey(worker)
	for attempt := 0; attempt < 3; attempt++ {
		raw, err := natsutil.LeaderGetMsg(ctx, l.js, "KV_"+bucketLeases, natsutil.MsgQuery{LastFor: l.subPre + key})
		if errors.Is(err, jetstream.ErrMsgNotFound) || err == nil && leaseGone(raw.Header) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("revoke worker lease %s: %w", worker, err)
		}
		e, _, err := workerRecord(raw.Data, raw.Sequence)
		if err != nil {
			return fmt.Errorf("revoke worker lease %s: %w", worker, err)
		}
		if e != epoch {
			return nil
		}
		err = l.kv.Purge(ctx, key, jetstream.LastRevision(raw.Sequence), jetstream.PurgeTTL(time.Minute))
		if err == nil {
			return nil
		}
		if !isCASConflict(err) {
			return fmt.Errorf("revoke worker lease %s: %w", worker, err)
		}
	}
	return fmt.Errorf("revoke worker lease %s (epoch %d): renewed meanwhile: %w", worker, epoch, ErrConflict)
}

// ConfirmClaim rewrites c by a CAS on its token, after its worker's lease lapsed and was
// acquired again with the same epoch: a claim no other worker took during the gap is the
// worker's again, with a new token (returned); a claim another worker took fails with
// ErrLeaseLost, and its actor must stop. Any worker that found the claim stale during the gap
// and tries to take it now fails its own CAS and finds the claim in force.
func (l *Leases) ConfirmClaim(ctx context.Context, c Claim) (Claim, error) {
	if c.Token == 0 || c.Owner == "" || c.Epoch == 0 {
		return Claim{}, fmt.Errorf("%w: confirm of a claim never made", ErrInvalid)
	}
	data, _ := json.Marshal(claimRecord{Owner: c.Owner, Epoch: c.Epoch, ClaimedAt: l.now().UnixMilli()})
	rev, err := l.kv.Update(ctx, c.Key.Token(), data, c.Token)
	if isCASConflict(err) || errors.Is(err, jetstream.ErrKeyNotFound) {
		return Claim{}, fmt.Errorf("confirm claim %s (token %d): %w", c.Key, c.Token, ErrLeaseLost)
	}
	if err != nil {
		return Claim{}, fmt.Errorf("confirm claim %s: %w", c.Key, err)
	}
	c.Token = rev
	c.TookOver = ""
	return c, nil
}

// ClaimsOf lists the sessions whose claims name owner with epoch: the sessions a dead worker
// was running, for a replica that takes them over at once instead of waiting for their
// deliveries to come back. It reads the bucket's current values in one pass (a KV watch of
// every key, stopped after its initial values); a claim written during the pass may be
// missed, which costs only speed (that session is taken over when a delivery for it comes).
func (l *Leases) ClaimsOf(ctx context.Context, owner string, epoch uint64) ([]events.SessionKey, error) {
	w, err := l.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("list claims of %s: %w", owner, err)
	}
	defer func() { _ = w.Stop() }()
	var out []events.SessionKey
	for {
		var e jetstream.KeyValueEntry
		var ok bool
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("list claims of %s: %w", owner, ctx.Err())
		case e, ok = <-w.Updates():
		}
		if !ok {
			return nil, fmt.Errorf("list claims of %s: watch ended", owner)
		}
		if e == nil {
			return out, nil
		}
		if strings.HasPrefix(e.Key(), WorkerLeasePrefix) || e.Operation() != jetstream.KeyValuePut {
			continue
		}
		var rec claimRecord
		if json.Unmarshal(e.Value(), &rec) != nil || rec.Owner != owner || rec.Epoch != epoch {
			continue
		}
		sk, err := events.ParseSessionKeyToken(e.Key())
		if err != nil {
			continue
		}
		out = append(out, sk)
	}
}
