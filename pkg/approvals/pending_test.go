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
	if _, err := s.ApproveOnce(ctx, p, b, "boss", "chat-a", ""); !errors.Is(err, ErrNothingPending) {
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
	r, err := s.ApproveOnce(ctx, p, b, "boss", "chat-c", "")
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

// TestApproveOnceBoundToChat: "/approve" without an id approves only a request of the chat it
// is typed in, never the newest of the endpoint (issue 36: the owner's /approve in private
// approved a group member's command of another chat, which the member then ran); another chat's
// request is approved by its id, which names exactly one request.
func TestApproveOnceBoundToChat(t *testing.T) {
	ctx := context.Background()
	ns := natstest.New(t, natstest.WithMemoryStorage())
	s, err := Open(ctx, ns.JS)
	if err != nil {
		t.Fatal(err)
	}
	const p, b = "webhook", "b1"
	record := func(session, line string) Request {
		t.Helper()
		if err := s.Record(ctx, p, b, Request{Commands: []string{line}, Line: line, Session: session, Turn: "t-" + line}); err != nil {
			t.Fatal(err)
		}
		pend, _, err := s.LoadPending(ctx, p, b)
		if err != nil {
			t.Fatal(err)
		}
		r := pend.Requests[len(pend.Requests)-1]
		if len(r.ID) != 8 {
			t.Fatalf("request id %q, want 8 hex digits", r.ID)
		}
		return r
	}
	own := record("private-boss", "touch own")
	group := record("group-g1", "rm -rf victim") // the newest of the endpoint

	// In the owner's private chat, /approve approves the owner's own request, not the newer
	// group one.
	r, err := s.ApproveOnce(ctx, p, b, "boss", "private-boss", "")
	if err != nil || r.ID != own.ID || r.Session != "private-boss" {
		t.Fatalf("/approve in private = %+v, %v; want the private request", r, err)
	}
	// Nothing more of this chat waits: the group request is not taken instead.
	if _, err := s.ApproveOnce(ctx, p, b, "boss", "private-boss", ""); !errors.Is(err, ErrNothingPending) {
		t.Fatalf("second /approve in private = %v, want ErrNothingPending", err)
	}
	if ok, _ := s.Consume(ctx, p, b, Request{Commands: []string{"rm -rf victim"}, Session: "group-g1", Turn: "t9"}, false); ok {
		t.Fatal("the group member's command runs without the owner naming it")
	}
	// Ids: unknown, too short, then the request's own id (or a unique prefix of 4+ digits).
	for _, id := range []string{"ffffffff", "abc", ""} {
		if _, err := s.ApproveOnce(ctx, p, b, "boss", "private-boss", id+"z"); !errors.Is(err, ErrUnknownRequest) {
			t.Errorf("/approve %sz = %v, want ErrUnknownRequest", id, err)
		}
	}
	r, err = s.ApproveOnce(ctx, p, b, "boss", "private-boss", group.ID[:5])
	if err != nil || r.ID != group.ID || r.Session != "group-g1" || r.Line != "rm -rf victim" {
		t.Fatalf("/approve %s = %+v, %v", group.ID[:5], r, err)
	}
	if ok, _ := s.Consume(ctx, p, b, Request{Commands: []string{"rm -rf victim"}, Session: "group-g1", Turn: "t9"}, false); !ok {
		t.Fatal("the request approved by id does not run in its chat")
	}
	// In the group itself, /approve without an id takes that chat's request.
	g2 := record("group-g1", "touch g")
	record("group-g2", "touch other")
	if r, err := s.ApproveOnce(ctx, p, b, "boss", "group-g1", ""); err != nil || r.ID != g2.ID {
		t.Fatalf("/approve in group-g1 = %+v, %v; want %s", r, err, g2.ID)
	}
}
