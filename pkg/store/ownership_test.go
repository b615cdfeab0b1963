package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/testwait"
)

// TestExpiredOwnerIsFenced walks DESIGN.md §4 end to end: worker A owns a session and has loaded
// its context; A stalls past its lease TTL; B takes the lease after expiry, loads and commits;
// A wakes up: its renew fails and its commit (at the sequence it loaded) is rejected, so the
// log holds exactly B's turn.
func TestExpiredOwnerIsFenced(t *testing.T) {
	ctx := context.Background()
	js := startJS(t)
	leases, err := NewLeases(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	sessions, err := OpenSessions(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	logA, _ := NewContextLog(ctx, js, ContextBounds{})
	logB, _ := NewContextLog(ctx, js, ContextBounds{})
	sk := testKey("owned")
	sess, err := sessions.GetOrCreate(ctx, sk)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := sess.ID()

	a, err := leases.Acquire(ctx, sk, "worker-a", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	base, err := logA.AppendMessages(ctx, id, 0, turn(1, "hello", "hi"))
	if err != nil {
		t.Fatal(err)
	}
	loadedA, _ := logA.LoadContext(ctx, id)

	// A stalls. B keeps trying and gets the lease once the server expired A's.
	var b Lease
	testwait.Eventually(t, 0, func() error {
		b, err = leases.Acquire(ctx, sk, "worker-b", 5*time.Second)
		if err != nil && !errors.Is(err, ErrLeaseHeld) {
			t.Fatalf("B acquire: %v", err)
		}
		return err // held: A's lease has not expired yet
	})
	if b.Token <= a.Token {
		t.Fatalf("fencing token did not grow: %d -> %d", a.Token, b.Token)
	}
	loadedB, _ := logB.LoadContext(ctx, id)
	if _, err := logB.AppendMessages(ctx, id, loadedB.LastSeq, turn(2, "B's question", "B's answer")); err != nil {
		t.Fatal(err)
	}

	if _, err := leases.Renew(ctx, a); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("A renew: %v", err)
	}
	if _, err := logA.AppendMessages(ctx, id, loadedA.LastSeq, turn(3, "A's stale question", "A's stale answer")); !errors.Is(err, ErrFenced) {
		t.Fatalf("A commit: %v", err)
	}
	final, _ := logB.LoadContext(ctx, id)
	if got := texts(final.Messages); len(got) != 4 || got[2] != "B's question" || final.LastSeq != base+1 {
		t.Fatalf("log: %q last %d", got, final.LastSeq)
	}
}
