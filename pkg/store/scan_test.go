package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil"
)

// TestPaging runs the readers with tiny pages, so every multi-page path is exercised.
func TestPaging(t *testing.T) {
	old := scanPage
	scanPage = 3
	defer func() { scanPage = old }()
	ctx := context.Background()
	js := startJS(t)
	cold, _ := NewContextLog(ctx, js, ContextBounds{}, WithCacheSessions(0))
	tl, _ := NewTurnLog(ctx, js)
	id := sid("paging", 1)
	var last uint64
	var err error
	for i := 0; i < 10; i++ {
		if last, err = cold.AppendMessages(ctx, id, last, turn(int64(i+1), fmt.Sprint("u", i), fmt.Sprint("a", i))); err != nil {
			t.Fatal(err)
		}
		if _, err := tl.Append(ctx, id.Key, events.New(events.TurnFailed{Reason: events.FailError}, events.WithTurn(fmt.Sprint("t", i%2)))); err != nil {
			t.Fatal(err)
		}
	}
	got, err := cold.LoadContext(ctx, id)
	if err != nil || len(got.Messages) != 20 || got.Messages[19].TextContent() != "a9" || got.LastSeq != last {
		t.Fatalf("load: %d msgs, %v", len(got.Messages), err)
	}
	rs, err := tl.ReadTurn(ctx, id.Key, "t1", 0)
	if err != nil || len(rs) != 5 {
		t.Fatalf("read turn: %d, %v", len(rs), err)
	}
	n := 0
	for r, err := range tl.Replay(ctx, id.Key, ReplayFrom{Time: time.Now().Add(-time.Hour)}) {
		if err != nil {
			t.Fatal(err)
		}
		if r.Kind != events.EvtKindTurnFailed {
			t.Fatalf("kind %s", r.Kind)
		}
		n++
	}
	if n != 10 {
		t.Fatalf("replayed %d", n)
	}
}

// TestFullPagesFitTheSyncQueue reads more than two whole pages through a connection with
// agentbus's sync queue (natstest connects like the roles do): a page and its end marker
// must fit, or the batched get would fail with a slow consumer.
func TestFullPagesFitTheSyncQueue(t *testing.T) {
	if scanPage+1 > natsutil.SyncQueueLen {
		t.Fatalf("a page of %d messages and its end marker do not fit a sync queue of %d", scanPage, natsutil.SyncQueueLen)
	}
	ctx := context.Background()
	js := startJS(t)
	tl, _ := NewTurnLog(ctx, js)
	key := testKey("full-pages")
	want := 2*scanPage + 77
	for i := 0; i < want; i++ {
		if _, err := tl.Append(ctx, key, events.New(events.TurnFailed{Reason: events.FailError}, events.WithTurn("t1"))); err != nil {
			t.Fatal(err)
		}
	}
	rs, err := tl.ReadTurn(ctx, key, "t1", 0)
	if err != nil || len(rs) != want {
		t.Fatalf("read turn: %d records of %d, %v", len(rs), want, err)
	}
}
