package im

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/internal/jsconflict"
	"github.com/agentbus/agentbus/pkg/events"
)

// DefaultConnTTL is the lease TTL of a single connection: a dead holder's connection is
// taken over within about TTL + TTL/3.
const DefaultConnTTL = 6 * time.Second

// ConnKey is the leases-bucket key of the connection of bot on platform:
// "im-conn.<platform>.<bot>" (tokens encoded with events.EncodeToken). Session keys encode to
// tokens without dots, so it cannot collide with a session lease.
func ConnKey(platform, bot string) string {
	return "im-conn." + events.EncodeToken(platform) + "." + events.EncodeToken(bot)
}

// HoldOptions configure Hold.
type HoldOptions struct {
	// JS is the JetStream context; the "leases" bucket must be provisioned (per-message TTLs).
	JS jetstream.JetStream
	// Key is the lease key (ConnKey).
	Key string
	// Owner names this replica (a process-unique id).
	Owner string
	// TTL of the lease (default DefaultConnTTL, at least 1s, whole seconds).
	TTL time.Duration
	// Log (default slog.Default()).
	Log *slog.Logger
	// OnState, when set, is told when this replica starts (true) and stops (false) holding
	// the lease. Tests and health checks use it.
	OnState func(held bool)
}

type connRecord struct {
	Owner     string `json:"owner"`
	RenewedAt int64  `json:"renewedAt"`
	TTLms     int64  `json:"ttlMs"`
}

// Hold runs run while this replica holds the lease o.Key, until ctx ends. Every replica of
// the ingest role calls Hold for the same key; at most one of them runs run at a time:
//
//   - the lease is a KV entry created with a per-message TTL and renewed every TTL/3 by a
//     publish that expects the entry's last revision, so only the holder can extend it;
//   - run's context is cancelled as soon as a renewal fails (another replica took the lease
//     after this one stalled) or no renewal succeeded for 2/3 TTL (the bus is unreachable: the
//     server may expire the lease any moment), so two replicas never run the connection at
//     once for longer than a renewal round trip;
//   - a replica that does not hold the lease tries again every TTL/3, so when the holder dies
//     (process killed, machine gone) another one runs the connection TTL + TTL/3 later at most;
//   - when run returns (connection failed) or ctx ends, the lease is released at once so a
//     standby can take over; after a failed run this replica waits TTL/3 before competing again.
//
// Hold returns ctx's error once ctx ends and run has returned.
func Hold(ctx context.Context, o HoldOptions, run func(ctx context.Context) error) error {
	if o.JS == nil || o.Key == "" || o.Owner == "" {
		return errors.New("im: Hold needs JS, Key and Owner")
	}
	if o.TTL <= 0 {
		o.TTL = DefaultConnTTL
	}
	if o.TTL < time.Second {
		o.TTL = time.Second
	}
	if r := o.TTL % time.Second; r != 0 {
		o.TTL += time.Second - r
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	log := o.Log.With("lease", o.Key, "owner", o.Owner)
	var kv jetstream.KeyValue
	for kv == nil {
		var err error
		kv, err = o.JS.KeyValue(ctx, events.BucketLeases)
		if err != nil {
			log.Warn("im: leases bucket not available yet", "err", err)
			if !Sleep(ctx, o.TTL/3) {
				return ctx.Err()
			}
		}
	}
	h := &holder{o: o, kv: kv, log: log}
	for {
		rev, err := h.acquire(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, errHeld) {
				setState(ctx, ConnStandby, nil)
			} else {
				log.Warn("im: acquire connection lease", "err", err)
				setState(ctx, ConnDisconnected, fmt.Errorf("connection lease: %w", err))
			}
			if !Sleep(ctx, o.TTL/3) {
				return ctx.Err()
			}
			continue
		}
		// Not yet "connected": that is the adapter's to say (Connected), once the platform
		// answered; a connection that keeps failing must not log success every round.
		log.Debug("im: connection lease taken; connecting")
		rctx, tr := connRun(ctx)
		if tr != nil && tr.Status().State != ConnDisconnected {
			tr.Set(ConnConnecting, nil)
		}
		if o.OnState != nil {
			o.OnState(true)
		}
		err = h.runHeld(rctx, rev, run)
		if o.OnState != nil {
			o.OnState(false)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		log.Warn("im: connection ended, lease released", "err", err)
		if err == nil {
			err = errors.New("connection ended")
		}
		setState(ctx, ConnDisconnected, err)
		if !Sleep(ctx, o.TTL/3) {
			return ctx.Err()
		}
	}
}

var errHeld = errors.New("held by another replica")

type holder struct {
	o   HoldOptions
	kv  jetstream.KeyValue
	log *slog.Logger
}

func (h *holder) record() []byte {
	b, _ := json.Marshal(connRecord{Owner: h.o.Owner, RenewedAt: time.Now().UnixMilli(), TTLms: h.o.TTL.Milliseconds()})
	return b
}

func (h *holder) acquire(ctx context.Context) (uint64, error) {
	rev, err := h.kv.Create(ctx, h.o.Key, h.record(), jetstream.KeyTTL(h.o.TTL))
	if err == nil {
		return rev, nil
	}
	if jsconflict.Is(err) {
		return 0, errHeld
	}
	return 0, err
}

// runHeld runs run under the lease at revision rev, renewing it, and releases it afterwards.
func (h *holder) runHeld(ctx context.Context, rev uint64, run func(context.Context) error) error {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(runCtx) }()
	tick := time.NewTicker(h.o.TTL / 3)
	defer tick.Stop()
	lastOK := time.Now()
	subject := "$KV." + events.BucketLeases + "." + h.o.Key
	for {
		select {
		case err := <-done:
			h.release(rev)
			return err
		case <-tick.C:
			sent := time.Now()
			rctx, rcancel := context.WithTimeout(ctx, h.o.TTL/3)
			ack, err := h.o.JS.PublishMsg(rctx, &nats.Msg{Subject: subject, Data: h.record()},
				jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(h.o.TTL))
			rcancel()
			switch {
			case err == nil:
				rev, lastOK = ack.Sequence, sent
			case jsconflict.Is(err):
				h.log.Warn("im: connection lease lost to another replica; closing the connection")
				cancel()
				err := <-done
				return fmt.Errorf("lease lost: %w", errors.Join(err, context.Canceled))
			default:
				h.log.Warn("im: renew connection lease", "err", err)
				if time.Since(lastOK) > 2*h.o.TTL/3 {
					h.log.Warn("im: connection lease could not be renewed in time; closing the connection")
					cancel()
					err := <-done
					return fmt.Errorf("lease not renewed: %w", errors.Join(err, context.Canceled))
				}
			}
		}
	}
}

// release purges the key at our revision, so the next replica can take it at once (a CAS:
// a lease someone else holds by now is left alone).
func (h *holder) release(rev uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := h.kv.Purge(ctx, h.o.Key, jetstream.LastRevision(rev), jetstream.PurgeTTL(time.Minute)); err != nil {
		h.log.Debug("im: release connection lease", "err", err)
	}
}
