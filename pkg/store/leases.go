package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil"
)

// Lease says that Owner is the one writer of a session until it expires.
//
// The authority is the server: the lease is a KV entry with a per-message TTL, so it vanishes
// TTL after its last write unless renewed, whatever the clocks of the workers say. A renewal is a
// publish to the key's subject with expected-last-subject-sequence = Revision and a fresh Nats-TTL
// header (a plain KV Update would drop the TTL), so only the holder of the current revision can
// extend it.
type Lease struct {
	// Key is the session of a session lease (zero for a worker lease).
	Key events.SessionKey
	// Worker is the worker of a worker lease (AcquireWorker; "" for a session lease).
	Worker string
	Owner  string
	// Token is the fencing token: the KV revision at which this owner acquired the lease. Tokens
	// only grow (they are stream sequences), so a newer holder always has a larger token.
	Token uint64
	// Revision is the KV revision of the last acquire/renew; Renew and Release CAS on it.
	Revision uint64
	TTL      time.Duration
	// Sessions is, for a worker lease, the number of sessions its holder runs: Renew and
	// RenewAll write it into the record, so that WatchWorkers shows every worker's load as of
	// its last renewal (the turn workers balance their sessions by it). Zero for a session
	// lease.
	Sessions int
	// Acquired is when this owner acquired it (local clock).
	Acquired time.Time
	// ValidUntil is the local time until which the holder may act: the time the last
	// acquire/renew request was sent plus TTL. The server stamps the entry later than that, so it
	// cannot expire before ValidUntil.
	ValidUntil time.Time
}

// Valid reports whether the holder may still act at t.
func (l Lease) Valid(t time.Time) bool { return t.Before(l.ValidUntil) }

// sessions is what a renewal writes as the record's Sessions: the load of a worker lease.
func (l Lease) sessions() *int {
	if l.Worker == "" {
		return nil
	}
	n := l.Sessions
	return &n
}

// kvKey is the lease's key in KV leases.
func (l Lease) kvKey() string {
	if l.Worker != "" {
		return WorkerLeaseKey(l.Worker)
	}
	return l.Key.Token()
}

// name is the lease for messages: the session key, or "worker <id>".
func (l Lease) name() string {
	if l.Worker != "" {
		return "worker " + l.Worker
	}
	return l.Key.String()
}

// leaseRecord is the KV value: who holds it, and since when (for operators; decisions use only
// revisions and the server's TTL).
type leaseRecord struct {
	Owner      string `json:"owner"`
	Token      uint64 `json:"token,omitempty"` // 0 in the acquiring write (its revision is the token)
	AcquiredAt int64  `json:"acquiredAt"`
	RenewedAt  int64  `json:"renewedAt"`
	TTLms      int64  `json:"ttlMs"`
	// Sessions is, in a worker lease, how many sessions its holder ran at the renewal; absent
	// in session leases, in a worker lease's acquiring write, and from versions that did not
	// report it.
	Sessions *int `json:"sessions,omitempty"`
}

// Leases manages session leases on KV leases. The bucket must allow per-message TTLs (KV
// LimitMarkerTTL > 0, which sets AllowMsgTTL on its stream).
type Leases struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	subPre string // "$KV.leases."
	now    func() time.Time
}

// NewLeases binds the provisioned leases bucket.
func NewLeases(ctx context.Context, js jetstream.JetStream) (*Leases, error) {
	kv, err := natsutil.KeyValue(ctx, js, bucketLeases)
	if err != nil {
		return nil, fmt.Errorf("open KV %s: %w", bucketLeases, err)
	}
	return &Leases{js: js, kv: kv, subPre: "$KV." + bucketLeases + ".", now: time.Now}, nil
}

func checkTTL(ttl time.Duration) (time.Duration, error) {
	// Nats-TTL has whole-second resolution and a 1s minimum; round up so the server never
	// expires a lease earlier than asked.
	if ttl < time.Second {
		return 0, fmt.Errorf("%w: lease ttl %v is below the server's 1s minimum", ErrInvalid, ttl)
	}
	if r := ttl % time.Second; r != 0 {
		ttl += time.Second - r
	}
	return ttl, nil
}

// Acquire takes the session's lease for owner. It fails with a *HeldError (matching
// ErrLeaseHeld) when another owner holds it (until the server expires it); when owner itself holds it (e.g. a restarted worker
// with a stable id), the lease is taken over with a new token. Each acquisition gets a new,
// larger fencing token.
func (l *Leases) Acquire(ctx context.Context, sk events.SessionKey, owner string, ttl time.Duration) (Lease, error) {
	if err := sk.Validate(); err != nil {
		return Lease{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if owner == "" {
		return Lease{}, fmt.Errorf("%w: lease owner is empty", ErrInvalid)
	}
	lease, err := l.acquire(ctx, sk.Token(), sk.String(), owner, ttl)
	if err != nil {
		return Lease{}, err
	}
	lease.Key = sk
	return lease, nil
}

// acquire takes the TTL lease at key for owner (what names it in errors).
func (l *Leases) acquire(ctx context.Context, key, what, owner string, ttl time.Duration) (Lease, error) {
	ttl, err := checkTTL(ttl)
	if err != nil {
		return Lease{}, err
	}
	for attempt := 0; attempt < 8; attempt++ {
		sent := l.now()
		rec := leaseRecord{Owner: owner, AcquiredAt: sent.UnixMilli(), RenewedAt: sent.UnixMilli(), TTLms: ttl.Milliseconds()}
		data, _ := json.Marshal(rec)
		rev, err := l.kv.Create(ctx, key, data, jetstream.KeyTTL(ttl))
		if err == nil {
			return Lease{Owner: owner, Token: rev, Revision: rev, TTL: ttl, Acquired: sent, ValidUntil: sent.Add(ttl)}, nil
		}
		if !isCASConflict(err) {
			return Lease{}, fmt.Errorf("acquire lease %s: %w", what, err)
		}
		e, err := l.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // expired or released between our create and get
		}
		if err != nil {
			return Lease{}, fmt.Errorf("acquire lease %s: %w", what, err)
		}
		var cur leaseRecord
		_ = json.Unmarshal(e.Value(), &cur)
		if cur.Owner != owner {
			return Lease{}, &HeldError{Key: what, Owner: cur.Owner,
				RenewedAgo: sent.Sub(time.UnixMilli(cur.RenewedAt)), TTL: time.Duration(cur.TTLms) * time.Millisecond}
		}
		// Our own lease from an earlier life: take it over by CAS, with a fresh token.
		rec.Token = 0
		rev, err = l.publish(ctx, key, rec, e.Revision(), ttl)
		if isWrongLastSeq(err) {
			continue
		}
		if err != nil {
			return Lease{}, fmt.Errorf("acquire lease %s: %w", what, err)
		}
		return Lease{Owner: owner, Token: rev, Revision: rev, TTL: ttl, Acquired: sent, ValidUntil: sent.Add(ttl)}, nil
	}
	return Lease{}, fmt.Errorf("acquire lease %s: %w", what, ErrConflict)
}

// publish writes rec to the key's subject with a CAS on rev and a per-message TTL: the
// TTL-preserving update that kv.Update cannot do.
func (l *Leases) publish(ctx context.Context, key string, rec leaseRecord, rev uint64, ttl time.Duration) (uint64, error) {
	data, _ := json.Marshal(rec)
	msg := &nats.Msg{Subject: l.subPre + key, Data: data}
	ack, err := l.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(ttl))
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// Renew extends the lease by its TTL from now. If the lease's revision moved (it expired, was
// released, or another owner acquired it) it returns ErrLeaseLost and the caller must stop
// acting for the session.
func (l *Leases) Renew(ctx context.Context, lease Lease) (Lease, error) {
	if lease.Revision == 0 || lease.Owner == "" {
		return Lease{}, fmt.Errorf("%w: renew of a lease that was never acquired", ErrInvalid)
	}
	sent := l.now()
	rec := leaseRecord{Owner: lease.Owner, Token: lease.Token, AcquiredAt: lease.Acquired.UnixMilli(), RenewedAt: sent.UnixMilli(), TTLms: lease.TTL.Milliseconds(), Sessions: lease.sessions()}
	rev, err := l.publish(ctx, lease.kvKey(), rec, lease.Revision, lease.TTL)
	if isWrongLastSeq(err) {
		return Lease{}, fmt.Errorf("renew lease %s (token %d): %w", lease.name(), lease.Token, ErrLeaseLost)
	}
	if err != nil {
		return Lease{}, fmt.Errorf("renew lease %s: %w", lease.name(), err)
	}
	lease.Revision = rev
	lease.ValidUntil = sent.Add(lease.TTL)
	return lease, nil
}

// Release gives the lease up so another worker can acquire it at once. Releasing a lease that
// was already lost returns ErrLeaseLost (and changes nothing).
func (l *Leases) Release(ctx context.Context, lease Lease) error {
	if lease.Revision == 0 {
		return fmt.Errorf("%w: release of a lease that was never acquired", ErrInvalid)
	}
	// A purge (not a delete) so the key's history does not grow; the marker itself expires.
	err := l.kv.Purge(ctx, lease.kvKey(), jetstream.LastRevision(lease.Revision), jetstream.PurgeTTL(time.Minute))
	if isCASConflict(err) {
		return fmt.Errorf("release lease %s (token %d): %w", lease.name(), lease.Token, ErrLeaseLost)
	}
	if err != nil {
		return fmt.Errorf("release lease %s: %w", lease.name(), err)
	}
	return nil
}

// Holder returns the current holder's owner id and revision, or ErrNotFound.
func (l *Leases) Holder(ctx context.Context, sk events.SessionKey) (owner string, revision uint64, err error) {
	e, err := l.kv.Get(ctx, sk.Token())
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", 0, fmt.Errorf("lease %s: %w", sk, ErrNotFound)
	}
	if err != nil {
		return "", 0, fmt.Errorf("lease %s: %w", sk, err)
	}
	var rec leaseRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return "", 0, fmt.Errorf("decode lease %s: %w", sk, err)
	}
	return rec.Owner, e.Revision(), nil
}

// RenewAll renews many leases at once (a worker's ticker over the sessions it owns): the CAS
// publishes are pipelined, so the batch costs about one round trip instead of one per lease.
// out[i] and errs[i] are the result for leases[i], exactly as Renew would return them.
func (l *Leases) RenewAll(ctx context.Context, leases []Lease) (out []Lease, errs []error) {
	out = make([]Lease, len(leases))
	errs = make([]error, len(leases))
	futures := make([]jetstream.PubAckFuture, len(leases))
	sent := l.now()
	for i, lease := range leases {
		if lease.Revision == 0 || lease.Owner == "" {
			errs[i] = fmt.Errorf("%w: renew of a lease that was never acquired", ErrInvalid)
			continue
		}
		rec := leaseRecord{Owner: lease.Owner, Token: lease.Token, AcquiredAt: lease.Acquired.UnixMilli(), RenewedAt: sent.UnixMilli(), TTLms: lease.TTL.Milliseconds(), Sessions: lease.sessions()}
		data, _ := json.Marshal(rec)
		msg := &nats.Msg{Subject: l.subPre + lease.kvKey(), Data: data}
		f, err := l.js.PublishMsgAsync(msg, jetstream.WithExpectLastSequencePerSubject(lease.Revision), jetstream.WithMsgTTL(lease.TTL))
		if err != nil {
			errs[i] = fmt.Errorf("renew lease %s: %w", lease.name(), err)
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		lease := leases[i]
		select {
		case ack := <-f.Ok():
			lease.Revision = ack.Sequence
			lease.ValidUntil = sent.Add(lease.TTL)
			out[i] = lease
		case err := <-f.Err():
			if isWrongLastSeq(err) {
				errs[i] = fmt.Errorf("renew lease %s (token %d): %w", lease.name(), lease.Token, ErrLeaseLost)
			} else {
				errs[i] = fmt.Errorf("renew lease %s: %w", lease.name(), err)
			}
		case <-ctx.Done():
			errs[i] = fmt.Errorf("renew lease %s: %w", lease.name(), ctx.Err())
		}
	}
	return out, errs
}
