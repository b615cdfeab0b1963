package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/testwait"
)

// TestClaims walks a session claim through its owners: a claim holds while its owner's worker
// lease lives with the same epoch, and is taken over (by CAS, with a larger token) once that
// lease is released, has expired, or was acquired again by a restarted process.
func TestClaims(t *testing.T) {
	ctx := context.Background()
	js := startJS(t)
	l, err := NewLeases(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name string
		// end makes worker a's claim stale (or not: held).
		end      func(t *testing.T, a Lease) Lease
		wantHeld bool
	}{
		{"owner alive", func(t *testing.T, a Lease) Lease { return a }, true},
		{"owner released its worker lease", func(t *testing.T, a Lease) Lease {
			if err := l.Release(ctx, a); err != nil {
				t.Fatal(err)
			}
			return a
		}, false},
		{"owner restarted with the same id", func(t *testing.T, a Lease) Lease {
			again, err := l.AcquireWorker(ctx, a.Worker, 30*time.Second)
			if err != nil || again.Token <= a.Token {
				t.Fatalf("re-acquire: %+v %v", again, err)
			}
			return again
		}, false},
		{"owner's worker lease expired", func(t *testing.T, a Lease) Lease {
			start := time.Now()
			testwait.Eventually(t, 0, func() error {
				_, err := l.WorkerEpoch(ctx, a.Worker)
				if err != nil && !errors.Is(err, ErrNotFound) {
					t.Fatal(err)
				}
				return testwait.Want(errors.Is(err, ErrNotFound), "the worker lease of %s has not expired", a.Worker)
			})
			t.Logf("worker lease gone %v after it was acquired (ttl 1s)", time.Since(start).Round(time.Millisecond))
			return a
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sk := testKey(fmt.Sprint("claim-", i))
			ttl := 30 * time.Second
			if tc.name == "owner's worker lease expired" {
				ttl = time.Second
			}
			a, err := l.AcquireWorker(ctx, "wa-"+sk.Scene, ttl)
			if err != nil {
				t.Fatal(err)
			}
			b, err := l.AcquireWorker(ctx, "wb-"+sk.Scene, 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			ca, err := l.Claim(ctx, sk, a, l.WorkerAlive)
			if err != nil || ca.Owner != a.Worker || ca.Epoch != a.Token || ca.Token == 0 {
				t.Fatalf("claim by a: %+v %v", ca, err)
			}
			// a claims again (its actor ended without unclaiming): a fresh token, and the
			// first claim's Unclaim cannot remove the second.
			again, err := l.Claim(ctx, sk, a, l.WorkerAlive)
			if err != nil || again.Token <= ca.Token || again.TookOver != a.Worker {
				t.Fatalf("second claim by a: %+v %v", again, err)
			}
			if err := l.Unclaim(ctx, ca); !errors.Is(err, ErrLeaseLost) {
				t.Fatalf("unclaim of the first claim: %v", err)
			}
			ca = again
			var held *HeldError
			a2 := tc.end(t, a)
			claimer := b
			if a2.Token != a.Token { // the restarted a claims its own session back
				claimer = a2
			}
			cb, err := l.Claim(ctx, sk, claimer, l.WorkerAlive)
			if tc.wantHeld {
				if !errors.As(err, &held) || held.Owner != a.Worker || held.Epoch != a.Token || !errors.Is(err, ErrLeaseHeld) {
					t.Fatalf("claim by b of a live owner's session: %+v %v", cb, err)
				}
				if err := l.Unclaim(ctx, ca); err != nil {
					t.Fatal(err)
				}
				if cb, err = l.Claim(ctx, sk, b, l.WorkerAlive); err != nil || cb.TookOver != "" {
					t.Fatalf("claim after unclaim: %+v %v", cb, err)
				}
			} else if err != nil || cb.TookOver != a.Worker || cb.Owner != claimer.Worker {
				t.Fatalf("take-over: %+v %v", cb, err)
			}
			if cb.Token <= ca.Token {
				t.Fatalf("token did not grow: %d -> %d", ca.Token, cb.Token)
			}
			if err := l.Unclaim(ctx, ca); !errors.Is(err, ErrLeaseLost) {
				t.Fatalf("unclaim of the superseded claim: %v", err)
			}
			if err := l.Unclaim(ctx, cb); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestClaimOfTTLLease: a record of the older per-session TTL leases (no epoch) is in force
// until the server expires it; a claim waits for that.
func TestClaimOfTTLLease(t *testing.T) {
	ctx := context.Background()
	js := startJS(t)
	l, _ := NewLeases(ctx, js)
	sk := testKey("old-lease")
	if _, err := l.Acquire(ctx, sk, "old-worker", time.Second); err != nil {
		t.Fatal(err)
	}
	w, err := l.AcquireWorker(ctx, "new-worker", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	never := func(context.Context, string, uint64) (bool, error) {
		t.Error("liveness asked for a TTL lease")
		return false, nil
	}
	if _, err := l.Claim(ctx, sk, w, never); !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("claim of a TTL-leased session: %v", err)
	}
	testwait.Eventually(t, 0, func() error {
		c, err := l.Claim(ctx, sk, w, never)
		if err != nil && !errors.Is(err, ErrLeaseHeld) {
			t.Fatalf("claim after the TTL: %v", err)
		}
		if err == nil && c.TookOver != "" {
			t.Fatalf("claim after expiry took over %q", c.TookOver)
		}
		return err // held: the TTL lease has not expired yet
	})
}

// TestWatchWorkers: the watch shows an acquisition, renewals (same epoch), and the expiry of a
// worker lease that is no longer renewed (epoch 0), in order.
func TestWatchWorkers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	js := startJS(t)
	l, _ := NewLeases(ctx, js)
	early, err := l.AcquireWorker(ctx, "early", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := l.WatchWorkers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := func() WorkerLeaseEvent {
		t.Helper()
		select {
		case ev := <-evs:
			return ev
		case <-time.After(20 * time.Second):
			t.Fatal("no worker lease event")
		}
		return WorkerLeaseEvent{}
	}
	if ev := next(); ev.Worker != "early" || ev.Epoch != early.Token {
		t.Fatalf("initial value: %+v", ev)
	}
	if ev := next(); !ev.Initial {
		t.Fatalf("want the end of the initial values, got %+v", ev)
	}
	w, err := l.AcquireWorker(ctx, "w.1 x", time.Second) // any id: the key is token-encoded
	if err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Worker != "w.1 x" || ev.Epoch != w.Token || ev.Sessions != -1 {
		t.Fatalf("acquired: %+v (want no load reported yet: -1)", ev)
	}
	w.Sessions = 7 // the load a renewal reports
	if _, err := l.Renew(ctx, w); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Worker != "w.1 x" || ev.Epoch != w.Token || ev.Sessions != 7 {
		t.Fatalf("renewed: %+v (token %d, want 7 sessions)", ev, w.Token)
	}
	start := time.Now()
	if ev := next(); ev.Worker != "w.1 x" || ev.Epoch != 0 {
		t.Fatalf("expired: %+v", ev)
	}
	t.Logf("expiry seen %v after the last renewal (ttl 1s)", time.Since(start).Round(time.Millisecond))
}

// TestLapsedWorkerKeepsItsEpoch: a worker lease that ended while its process lived (revoked
// by a replica that took it for dead, or expired, or released) is acquired again with the same
// epoch; each of its claims is then confirmed by a CAS, which fails only for a claim another
// worker took in the gap, and a claimer that found the claim stale in the gap loses its CAS
// once the claim is confirmed. ClaimsOf lists exactly the claims of one owner's epoch.
func TestLapsedWorkerKeepsItsEpoch(t *testing.T) {
	ctx := context.Background()
	js := startJS(t)
	l, err := NewLeases(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name string
		end  func(t *testing.T, a Lease) // ends a's lease on the server
	}{
		{"revoked by a peer", func(t *testing.T, a Lease) {
			if err := l.RevokeWorker(ctx, a.Worker, a.Token); err != nil {
				t.Fatal(err)
			}
		}},
		{"released", func(t *testing.T, a Lease) {
			if err := l.Release(ctx, a); err != nil {
				t.Fatal(err)
			}
		}},
		{"still there (a renewal's ack was lost)", func(t *testing.T, a Lease) {
			if _, err := l.Renew(ctx, a); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wa, wb := fmt.Sprint("lapse-a", i), fmt.Sprint("lapse-b", i)
			a, err := l.AcquireWorker(ctx, wa, 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			b, err := l.AcquireWorker(ctx, wb, 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			keep, take := testKey(fmt.Sprint("keep-", i)), testKey(fmt.Sprint("take-", i))
			ck, err := l.Claim(ctx, keep, a, l.WorkerAlive)
			if err != nil {
				t.Fatal(err)
			}
			ct, err := l.Claim(ctx, take, a, l.WorkerAlive)
			if err != nil {
				t.Fatal(err)
			}
			if keys, err := l.ClaimsOf(ctx, wa, a.Token); err != nil || len(keys) != 2 {
				t.Fatalf("claims of a: %v %v", keys, err)
			}
			tc.end(t, a)
			gone := tc.name != "still there (a renewal's ack was lost)"
			if alive, err := l.WorkerAlive(ctx, wa, a.Token); err != nil || alive == gone {
				t.Fatalf("alive after the end: %v %v", alive, err)
			}
			if gone {
				// b takes one of a's sessions in the gap.
				if _, err := l.Claim(ctx, take, b, l.WorkerAlive); err != nil {
					t.Fatalf("b's claim in the gap: %v", err)
				}
			}
			again, err := l.ReacquireWorker(ctx, wa, 30*time.Second, a.Token)
			if err != nil || again.Token != a.Token {
				t.Fatalf("reacquire: %+v %v", again, err)
			}
			if alive, err := l.WorkerAlive(ctx, wa, a.Token); err != nil || !alive {
				t.Fatalf("alive after the reacquire: %v %v", alive, err)
			}
			ck2, err := l.ConfirmClaim(ctx, ck)
			if err != nil || ck2.Token <= ck.Token {
				t.Fatalf("confirm kept claim: %+v %v", ck2, err)
			}
			_, err = l.ConfirmClaim(ctx, ct)
			if gone && !errors.Is(err, ErrLeaseLost) || !gone && err != nil {
				t.Fatalf("confirm of the claim b took (b took it: %v): %v", gone, err)
			}
			// The kept claim is in force again: b cannot take it, even with the old token's view.
			var held *HeldError
			if _, err := l.Claim(ctx, keep, b, l.WorkerAlive); !errors.As(err, &held) || held.Owner != wa {
				t.Fatalf("b's claim of the kept session: %v", err)
			}
			if _, err := l.ConfirmClaim(ctx, ck); !errors.Is(err, ErrLeaseLost) {
				t.Fatalf("confirm with the old token: %v", err)
			}
			if keys, err := l.ClaimsOf(ctx, wb, b.Token); err != nil || gone != (len(keys) == 1) {
				t.Fatalf("claims of b: %v %v", keys, err)
			}
			// RevokeWorker of an epoch that is not the lease's changes nothing.
			if err := l.RevokeWorker(ctx, wb, b.Token+1000); err != nil {
				t.Fatal(err)
			}
			if alive, err := l.WorkerAlive(ctx, wb, b.Token); err != nil || !alive {
				t.Fatalf("b after a revoke of another epoch: %v %v", alive, err)
			}
		})
	}
}
