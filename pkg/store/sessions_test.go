package store

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestSessionEpochs(t *testing.T) {
	ctx := context.Background()
	js := startJS(t)
	r, err := OpenSessions(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	sk := testKey("epochs")
	if _, err := r.Get(ctx, sk); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get before create: %v", err)
	}
	// Many workers race to create: all see the same epoch-1 record, and exactly one of them
	// learns that it created it (the turn worker skips its takeover look then).
	var wg sync.WaitGroup
	ids := make([]string, 8)
	var created atomic.Int32
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := r.GetOrCreate(ctx, sk)
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = s.SessionID
			if s.Created {
				created.Add(1)
			}
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != "qq:bot1:group:epochs#1" {
			t.Fatalf("ids %q", ids)
		}
	}
	if n := created.Load(); n != 1 {
		t.Fatalf("%d callers created the record, want 1", n)
	}
	if s, err := r.GetOrCreate(ctx, sk); err != nil || s.Created {
		t.Fatalf("GetOrCreate of an existing record: created %v, %v", s != nil && s.Created, err)
	}
	s, err := r.Update(ctx, sk, func(s *Session) error {
		s.InboxCursor, s.Model, s.ActiveLeaf = 42, "openai/gpt-x", "leaf-7"
		s.SetOpenTurn(OpenTurn{ID: "t1", State: "started", InboxSeq: 42})
		s.Epoch = 99 // ignored: key fields are not the callback's to change
		return nil
	})
	if err != nil || s.Epoch != 1 || s.OpenTurn("t1") == nil {
		t.Fatalf("update: %+v %v", s, err)
	}

	next, err := r.Archive(ctx, sk)
	if err != nil {
		t.Fatal(err)
	}
	want := Session{SessionKey: "qq:bot1:group:epochs", SessionID: "qq:bot1:group:epochs#2", Epoch: 2, Status: StatusActive,
		InboxCursor: 42, Model: "openai/gpt-x"}
	if next.SessionID != want.SessionID || next.Epoch != 2 || next.Status != StatusActive || next.InboxCursor != 42 ||
		next.Model != want.Model || next.ActiveLeaf != "" || len(next.OpenTurns) != 0 {
		t.Fatalf("after archive: %+v", next)
	}
	id, err := next.ID()
	if err != nil || id.Epoch != 2 || id.Key != sk {
		t.Fatalf("ID(): %v %v", id, err)
	}
	// The archived epoch is in the bucket's history.
	hist, err := r.kv.History(ctx, sk.Token())
	if err != nil {
		t.Fatal(err)
	}
	sawArchived := false
	for _, e := range hist {
		if v := string(e.Value()); strings.Contains(v, `"status":"archived"`) && strings.Contains(v, `#1"`) {
			sawArchived = true
		}
	}
	if !sawArchived {
		t.Fatal("no archived epoch-1 revision in history")
	}
	if s, _ := r.GetOrCreate(ctx, sk); s.Epoch != 2 {
		t.Fatalf("GetOrCreate after archive: epoch %d", s.Epoch)
	}
	if _, err := r.Update(ctx, testKey("missing"), func(*Session) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("update missing: %v", err)
	}
	boom := errors.New("boom")
	if _, err := r.Update(ctx, sk, func(*Session) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("callback error: %v", err)
	}
}

// TestSessionUpdateCAS: concurrent read-modify-writes never lose an increment.
func TestSessionUpdateCAS(t *testing.T) {
	ctx := context.Background()
	js := startJS(t)
	r, _ := OpenSessions(ctx, js, WithMaxRetries(200))
	sk := testKey("cas")
	if _, err := r.GetOrCreate(ctx, sk); err != nil {
		t.Fatal(err)
	}
	const workers, each = 6, 15
	var calls atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if _, err := r.Update(ctx, sk, func(s *Session) error { calls.Add(1); s.InboxCursor++; return nil }); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	s, _ := r.Get(ctx, sk)
	if s.InboxCursor != workers*each {
		t.Fatalf("cursor %d, want %d", s.InboxCursor, workers*each)
	}
	t.Logf("%d updates took %d callback runs (CAS retries)", workers*each, calls.Load())

	// With no retries allowed, a conflict surfaces as ErrConflict.
	tight := NewSessions(r.kv, WithMaxRetries(1))
	var conflicts atomic.Int64
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				if _, err := tight.Update(ctx, sk, func(s *Session) error { s.InboxCursor++; return nil }); errors.Is(err, ErrConflict) {
					conflicts.Add(1)
				} else if err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d conflicts with one attempt", conflicts.Load())
}

func TestArchiveIdle(t *testing.T) {
	ctx := context.Background()
	js := startJS(t)
	now := time.UnixMilli(1_000_000_000)
	r, _ := OpenSessions(ctx, js, WithClock(func() time.Time { return now }))
	old, fresh := testKey("old"), testKey("fresh")
	if _, err := r.GetOrCreate(ctx, old); err != nil {
		t.Fatal(err)
	}
	now = now.Add(50 * time.Minute)
	if _, err := r.GetOrCreate(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	now = now.Add(20 * time.Minute) // old idle 70m, fresh idle 20m
	if n, err := r.ArchiveIdle(ctx, 0); n != 0 || err != nil {
		t.Fatalf("idle 0 must be off: %d %v", n, err)
	}
	n, err := r.ArchiveIdle(ctx, time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("archived %d, %v", n, err)
	}
	if s, _ := r.Get(ctx, old); s.Status != StatusArchived || s.Epoch != 1 {
		t.Fatalf("old: %+v", s)
	}
	if s, _ := r.Get(ctx, fresh); s.Status != StatusActive {
		t.Fatalf("fresh: %+v", s)
	}
	// The next message to the archived session starts a new epoch.
	if s, _ := r.GetOrCreate(ctx, old); s.Epoch != 2 || s.Status != StatusActive {
		t.Fatalf("old after archive: %+v", s)
	}
	if n, _ := r.ArchiveIdle(ctx, time.Hour); n != 0 {
		t.Fatalf("second pass archived %d", n)
	}
}

// Current serves the owner's own writes from memory and reads the bucket only without a copy.
func TestSessionsCurrent(t *testing.T) {
	ctx := context.Background()
	js := startJS(t)
	owner, _ := OpenSessions(ctx, js)
	sk := testKey("current")
	if _, err := owner.Current(ctx, sk); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Current of a missing session: %v", err)
	}
	if _, err := owner.GetOrCreate(ctx, sk); err != nil {
		t.Fatal(err)
	}
	wrote, err := owner.Update(ctx, sk, func(s *Session) error { s.InboxCursor = 7; return nil })
	if err != nil {
		t.Fatal(err)
	}
	// Another process writes behind the owner's back: the owner's copy stays what it wrote
	// (owners are the only writers; a takeover re-reads with GetOrCreate).
	other, _ := OpenSessions(ctx, js)
	if _, err := other.Update(ctx, sk, func(s *Session) error { s.InboxCursor = 9; return nil }); err != nil {
		t.Fatal(err)
	}
	got, err := owner.Current(ctx, sk)
	if err != nil || got.InboxCursor != 7 || got.Revision != wrote.Revision {
		t.Fatalf("owner's Current = %+v, %v; want its own write (cursor 7, revision %d)", got, err, wrote.Revision)
	}
	got.InboxCursor = 100 // a copy: changing it does not change the cache
	if again, _ := owner.Current(ctx, sk); again.InboxCursor != 7 {
		t.Fatalf("Current returned the cache itself (cursor %d)", again.InboxCursor)
	}
	fresh, _ := OpenSessions(ctx, js)
	if got, err := fresh.Current(ctx, sk); err != nil || got.InboxCursor != 9 {
		t.Fatalf("a process without a copy reads the bucket: %+v, %v", got, err)
	}
	// The owner's next Update CASes on its stale copy, fails, re-reads and applies on top.
	s, err := owner.Update(ctx, sk, func(s *Session) error { s.InboxCursor++; return nil })
	if err != nil || s.InboxCursor != 10 {
		t.Fatalf("update after someone else's write: %+v, %v", s, err)
	}
}
