package schedule

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var sk = events.SessionKey{Platform: "webhook", Bot: "b", Scope: events.ScopePrivate, Scene: "u1"}

// inboxCount is the number of events in the session's inbox.
func inboxCount(t *testing.T, ctx context.Context, js jetstream.JetStream) uint64 {
	s, err := js.Stream(ctx, events.StreamSessionIn)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(events.AgentInSubject(sk)))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[events.AgentInSubject(sk)]
}

// TestPutReplaceListCancel checks the server-side promises the package relies on: a second
// Put on the same id replaces the first (only the new one fires), Cancel stops it, List sees
// exactly the pending ones, and an @at schedule is gone once it fired.
func TestPutReplaceListCancel(t *testing.T) {
	srv := natstest.New(t)
	ctx := testCtx(t)
	s, err := Open(ctx, srv.JS)
	if err != nil {
		t.Fatal(err)
	}
	ev := events.Scheduled{Text: "first", CreatedBy: events.Sender{ID: "u1"}, Kind: events.ScheduleFollowUp}
	if _, err := s.Put(ctx, sk, "followup", At(time.Now().Add(time.Hour)), "", ev); err != nil {
		t.Fatal(err)
	}
	ev.Text = "second"
	old, err := s.Put(ctx, sk, "followup", At(time.Now().Add(2*time.Second)), "", ev)
	if err != nil {
		t.Fatal(err)
	}
	if old == nil || old.Event.Text != "first" {
		t.Fatalf("replaced = %+v, want the first reminder", old)
	}
	ev.Text = "other"
	if _, err := s.Put(ctx, sk, "job-x", At(time.Now().Add(time.Hour)), "", ev); err != nil {
		t.Fatal(err)
	}
	list, err := s.List(ctx, sk)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != "followup" || list[0].Event.Text != "second" || list[1].ID != "job-x" {
		t.Fatalf("list = %+v", list)
	}
	if _, err := s.Cancel(ctx, sk, "job-x"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Cancel(ctx, sk, "job-x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second cancel: %v, want ErrNotFound", err)
	}
	testwait.Eventually(t, 0, func() error { return testwait.Want(inboxCount(t, ctx, srv.JS) > 0, "the reminder did not fire") })
	time.Sleep(1500 * time.Millisecond) // a second firing (the replaced one) would show now
	if n := inboxCount(t, ctx, srv.JS); n != 1 {
		t.Fatalf("%d inbox events, want exactly 1", n)
	}
	raw, err := srv.JS.Stream(ctx, events.StreamSessionIn)
	if err != nil {
		t.Fatal(err)
	}
	m, err := raw.GetLastMsgForSubject(ctx, events.AgentInSubject(sk))
	if err != nil {
		t.Fatal(err)
	}
	var got events.Event[events.Scheduled]
	if err := events.Unmarshal(m.Data, &got); err != nil || got.Data.Text != "second" {
		t.Fatalf("fired %+v (%v), want the second reminder", got.Data, err)
	}
	if list, _ := s.List(ctx, sk); len(list) != 0 {
		t.Fatalf("after firing, pending = %+v", list)
	}
}

func TestEnsureWritesOnce(t *testing.T) {
	srv := natstest.New(t)
	ctx := testCtx(t)
	s, err := Open(ctx, srv.JS)
	if err != nil {
		t.Fatal(err)
	}
	ev := events.Scheduled{Text: "digest", CreatedBy: events.Sender{ID: "operator"}, Kind: events.ScheduleJob}
	for i, want := range []bool{true, false, false} {
		wrote, err := s.Ensure(ctx, sk, "job-digest", Every(time.Hour), "", ev)
		if err != nil || wrote != want {
			t.Fatalf("ensure %d: wrote=%v err=%v, want %v", i, wrote, err, want)
		}
	}
	ev.Text = "digest v2"
	if wrote, err := s.Ensure(ctx, sk, "job-digest", "0 0 9 * * *", "Asia/Shanghai", ev); err != nil || !wrote {
		t.Fatalf("changed job: wrote=%v err=%v", wrote, err)
	}
	p, err := s.Get(ctx, sk, "job-digest")
	if err != nil || p.Pattern != "0 0 9 * * *" || p.Event.Text != "digest v2" {
		t.Fatalf("get = %+v, %v", p, err)
	}
}

func TestCheckPattern(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		p  string
		ok bool
	}{
		{At(now.Add(time.Minute)), true},
		{At(now.Add(-time.Minute)), false},
		{"@at tomorrow", false},
		{Every(30 * time.Minute), true},
		{"@every 10ms", false},
		{"0 30 9 * * *", true},
		{"30 9 * * *", false},
		{"@daily", true},
	} {
		if err := CheckPattern(c.p, now); (err == nil) != c.ok {
			t.Errorf("CheckPattern(%q) = %v, want ok=%v", c.p, err, c.ok)
		}
	}
}
