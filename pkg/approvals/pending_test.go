package approvals

import (
	"context"
	"errors"
	"testing"

	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

// The pending window: an Ask is recorded, "/approve always" can see it, "/approve" turns the
// newest into a one-time approval for its session, and Consume lets a command through once —
// after /approve, or when the owner answers in a later turn — never for the turn that asked.
func TestPendingConfirmations(t *testing.T) {
	ctx := context.Background()
	ns := natstest.New(t, natstest.WithMemoryStorage())
	s, err := Open(ctx, ns.JS)
	if err != nil {
		t.Fatal(err)
	}
	const p, b = "webhook", "b1"
	cmds := []string{"touch x"}
	if ok, err := s.HasPending(ctx, p, b); err != nil || ok {
		t.Fatalf("fresh endpoint has pending: %v %v", ok, err)
	}
	if _, err := s.ApproveOnce(ctx, p, b, "boss"); !errors.Is(err, ErrNothingPending) {
		t.Fatalf("/approve with nothing pending: %v", err)
	}
	record := func(session, turn string) {
		t.Helper()
		if err := s.Record(ctx, p, b, Request{Commands: cmds, Line: "touch x", Session: session, Turn: turn}); err != nil {
			t.Fatal(err)
		}
	}
	consume := func(session, turn string, master bool) bool {
		t.Helper()
		ok, err := s.Consume(ctx, p, b, Request{Commands: cmds, Session: session, Turn: turn}, master)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	record("chat-a", "t1")
	if ok, _ := s.HasPending(ctx, p, b); !ok {
		t.Fatal("recorded ask is not pending")
	}
	steps := []struct {
		name           string
		session, turn  string
		master, wantOK bool
	}{
		{"the asking turn cannot approve itself", "chat-a", "t1", true, false},
		{"a user's later answer is no approval", "chat-a", "t2", false, false},
		{"another chat's master answer does not count", "chat-b", "t2", true, false},
		{"the owner's answer in a later turn", "chat-a", "t2", true, true},
		{"used up", "chat-a", "t3", true, false},
	}
	for _, st := range steps {
		if got := consume(st.session, st.turn, st.master); got != st.wantOK {
			t.Errorf("%s: Consume = %v, want %v", st.name, got, st.wantOK)
		}
	}
	// A user's request approved by the owner with /approve runs once in that chat.
	record("chat-c", "t5")
	r, err := s.ApproveOnce(ctx, p, b, "boss")
	if err != nil || r.Session != "chat-c" || r.Line != "touch x" || !r.Once {
		t.Fatalf("ApproveOnce = %+v, %v", r, err)
	}
	if ok, _ := s.HasPending(ctx, p, b); ok {
		t.Error("an approved request still counts as waiting")
	}
	if consume("chat-a", "t6", false) {
		t.Error("a one-time approval was used in another chat")
	}
	if !consume("chat-c", "t6", false) {
		t.Error("the one-time approval did not let the command through")
	}
	if consume("chat-c", "t7", false) {
		t.Error("a one-time approval was used twice")
	}
}
