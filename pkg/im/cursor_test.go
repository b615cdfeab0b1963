package im_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/im"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

func TestCursorOrder(t *testing.T) {
	tests := []struct {
		name  string
		a, b  im.Cursor
		after bool
	}{
		{"later time", im.Cursor{ID: "1", Time: 20}, im.Cursor{ID: "2", Time: 10}, true},
		{"earlier time", im.Cursor{ID: "9", Time: 10}, im.Cursor{ID: "1", Time: 20}, false},
		{"same time, longer snowflake", im.Cursor{ID: "1000"}, im.Cursor{ID: "999"}, true},
		{"same time, same length", im.Cursor{ID: "1234"}, im.Cursor{ID: "1235"}, false},
		{"equal", im.Cursor{ID: "5", Time: 1}, im.Cursor{ID: "5", Time: 1}, false},
		{"non-numeric ids lexically", im.Cursor{ID: "b"}, im.Cursor{ID: "ab"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.a.After(tt.b); got != tt.after {
				t.Fatalf("%+v after %+v = %v, want %v", tt.a, tt.b, got, tt.after)
			}
		})
	}
}

// TestCursorsTakeover: a holder's notes reach KV on Flush; the next holder loads them; a stale
// holder flushing older notes afterwards cannot move a scene back.
func TestCursorsTakeover(t *testing.T) {
	srv := natstest.New(t, natstest.WithMemoryStorage())
	_, js := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func() *im.Cursors {
		c, err := im.OpenCursors(ctx, js, "discord", "dc1", nil)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	old, next := open(), open()
	old.Note("510", im.Cursor{Scope: "private", ID: "100"})
	old.Note("510", im.Cursor{Scope: "private", ID: "99"}) // older: ignored
	old.Note("610", im.Cursor{Scope: "group", ID: "200"})
	if err := old.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := next.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got["510"].ID != "100" || got["610"].ID != "200" || got["610"].Scope != "group" {
		t.Fatalf("loaded %+v", got)
	}
	next.Note("510", im.Cursor{Scope: "private", ID: "150"})
	if err := next.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	old.Note("610", im.Cursor{Scope: "group", ID: "201"})
	if err := old.Flush(ctx); err != nil { // carries 510 -> 100 too: must not win
		t.Fatal(err)
	}
	got, err = open().Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got["510"].ID != "150" || got["610"].ID != "201" {
		t.Fatalf("after a stale flush: %+v", got)
	}
	if err := open().Flush(ctx); err != nil { // nothing noted: nothing written, no error
		t.Fatal(err)
	}
}
