package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/internal/testwait"
)

func TestLeaseContention(t *testing.T) {
	ctx := context.Background()
	js := startJS(t)
	l, err := NewLeases(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	sk := testKey("contended")
	const n = 16
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners []Lease
		held    int
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lease, err := l.Acquire(ctx, sk, fmt.Sprint("worker-", i), 30*time.Second)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				winners = append(winners, lease)
			case errors.Is(err, ErrLeaseHeld):
				held++
			default:
				t.Errorf("worker %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if len(winners) != 1 || held != n-1 {
		t.Fatalf("winners %d, held %d", len(winners), held)
	}
	w := winners[0]
	owner, rev, err := l.Holder(ctx, sk)
	if err != nil || owner != w.Owner || rev != w.Revision || w.Token != w.Revision {
		t.Fatalf("holder %q rev %d err %v; lease %+v", owner, rev, err, w)
	}
	// Renew moves the revision, keeps the token; a renew with the old revision is lost.
	r1, err := l.Renew(ctx, w)
	if err != nil || r1.Revision <= w.Revision || r1.Token != w.Token {
		t.Fatalf("renew: %+v %v", r1, err)
	}
	if _, err := l.Renew(ctx, w); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("renew with stale revision: %v", err)
	}
	// Release lets the next owner in at once, with a larger token.
	if err := l.Release(ctx, r1); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, r1); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("double release: %v", err)
	}
	next, err := l.Acquire(ctx, sk, "worker-next", 30*time.Second)
	if err != nil || next.Token <= w.Token {
		t.Fatalf("acquire after release: %+v %v", next, err)
	}
	if _, err := l.Renew(ctx, r1); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("old holder renew after hand-over: %v", err)
	}
	// The same owner re-acquiring (restart with a stable id) gets a fresh token.
	again, err := l.Acquire(ctx, sk, "worker-next", 30*time.Second)
	if err != nil || again.Token <= next.Token {
		t.Fatalf("re-acquire by owner: %+v %v", again, err)
	}
	if _, err := l.Renew(ctx, next); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("renew of the superseded lease: %v", err)
	}
}

func TestLeaseInvalid(t *testing.T) {
	ctx := context.Background()
	js := startJS(t)
	l, _ := NewLeases(ctx, js)
	for _, tc := range []struct {
		name  string
		owner string
		ttl   time.Duration
	}{
		{"no owner", "", time.Second},
		{"ttl below 1s", "w", 500 * time.Millisecond},
	} {
		if _, err := l.Acquire(ctx, testKey("x"), tc.owner, tc.ttl); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if _, err := l.Renew(ctx, Lease{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("renew zero lease: %v", err)
	}
}

// TestLeaseTTLSurvivesRenew is the point about TTLs: a renewal published with a fresh
// Nats-TTL keeps the lease alive past its first TTL and lets it expire TTL after the last renew,
// on a real server. An expired lease hands over to the next owner.
func TestLeaseTTLSurvivesRenew(t *testing.T) {
	ctx := context.Background()
	js := startJS(t)
	l, _ := NewLeases(ctx, js)
	sk := testKey("ttl")
	a, err := l.Acquire(ctx, sk, "a", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The contrast: a plain KV Update of a TTL'd key drops its TTL, so it never expires.
	plain := testKey("plain-update").Token()
	rev, err := l.kv.Create(ctx, plain, []byte("x"), jetstream.KeyTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.kv.Update(ctx, plain, []byte("y"), rev); err != nil {
		t.Fatal(err)
	}
	// Keep renewing for 2.5 TTLs: the lease must never lapse.
	deadline := time.Now().Add(2500 * time.Millisecond)
	var lastSent time.Time
	for time.Now().Before(deadline) {
		time.Sleep(300 * time.Millisecond) // the renewal pace: well inside the 1 s TTL
		lastSent = time.Now()
		if a, err = l.Renew(ctx, a); err != nil {
			t.Fatalf("renew at %v: %v", time.Until(deadline), err)
		}
		if _, err := l.Acquire(ctx, sk, "b", time.Second); !errors.Is(err, ErrLeaseHeld) {
			t.Fatalf("b acquired a renewed lease: %v", err)
		}
	}
	// Stop renewing: the server expires it and b takes over. The TTL runs from when the server
	// stored the last renewal, which is after it was sent.
	stopped := lastSent
	var b Lease
	testwait.Eventually(t, 0, func() error {
		b, err = l.Acquire(ctx, sk, "b", time.Second)
		if err != nil && !errors.Is(err, ErrLeaseHeld) {
			t.Fatal(err)
		}
		return err // held: not expired yet
	})
	if waited := time.Since(stopped); waited < 950*time.Millisecond {
		t.Fatalf("handed over after %v, before the TTL", waited)
	} else {
		t.Logf("hand-over %v after the last renew (ttl 1s)", waited)
	}
	if b.Token <= a.Token {
		t.Fatalf("token did not grow: %d -> %d", a.Token, b.Token)
	}
	if _, err := l.Renew(ctx, a); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("old holder renew: %v", err)
	}
	if _, err := l.kv.Get(ctx, plain); err != nil {
		t.Fatalf("plain-updated key after 3 TTLs: %v (expected it to have lost its TTL)", err)
	}
}

func TestLeaseRenewAll(t *testing.T) {
	ctx := context.Background()
	js := startJS(t)
	l, _ := NewLeases(ctx, js)
	var held []Lease
	for i := 0; i < 20; i++ {
		lease, err := l.Acquire(ctx, testKey(fmt.Sprint("many-", i)), "w", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, lease)
	}
	// One of them was lost (renewed elsewhere with its revision), one is garbage.
	if _, err := l.Renew(ctx, held[7]); err != nil {
		t.Fatal(err)
	}
	held = append(held, Lease{})
	out, errs := l.RenewAll(ctx, held)
	for i := range held {
		switch {
		case i == 7:
			if !errors.Is(errs[i], ErrLeaseLost) {
				t.Fatalf("lease 7: %v", errs[i])
			}
		case i == 20:
			if !errors.Is(errs[i], ErrInvalid) {
				t.Fatalf("zero lease: %v", errs[i])
			}
		default:
			if errs[i] != nil || out[i].Revision <= held[i].Revision || out[i].Token != held[i].Token {
				t.Fatalf("lease %d: %+v %v", i, out[i], errs[i])
			}
		}
	}
	// The renewed revisions are the current ones.
	if _, err := l.Renew(ctx, out[3]); err != nil {
		t.Fatal(err)
	}
}
