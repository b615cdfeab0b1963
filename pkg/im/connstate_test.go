package im_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/im"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

// Hold reports a connection's state to the tracker in its ctx: connecting while the adapter
// has not said Connected, connected once it did, disconnected with the error after a failed
// run (and while it tries again), standby in the replica that does not hold the lease.
func TestHoldReportsConnectionState(t *testing.T) {
	srv := natstest.New(t, natstest.WithMemoryStorage())
	_, js := srv.Connect(t)
	var changes atomic.Int32
	states := im.NewConnStates(func() { changes.Add(1) })
	ta := states.Track("test", "bot1", "inbound")
	if s := ta.Status(); s.State != im.ConnConnecting || s.Ready() {
		t.Fatalf("new tracker: %+v", s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	attempt := make(chan int, 8)
	proceed := make(chan error)
	n := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = im.Hold(im.WithConnTracker(ctx, ta), im.HoldOptions{JS: js, Key: im.ConnKey("test", "bot1"), Owner: "a", TTL: 3 * time.Second},
			func(ctx context.Context) error {
				n++
				attempt <- n
				if n == 1 {
					return <-proceed // the first attempt fails before connecting
				}
				im.Connected(ctx, nil)
				im.Connected(ctx, nil) // once per connection
				<-ctx.Done()
				return ctx.Err()
			})
	}()
	wait := func(what string, cond func(im.ConnStatus) bool) im.ConnStatus {
		t.Helper()
		var s im.ConnStatus
		testwait.Eventually(t, 0, func() error {
			s = ta.Status()
			return testwait.Want(cond(s), "%s: state %+v", what, s)
		})
		return s
	}
	<-attempt
	wait("connecting while the first attempt runs", func(s im.ConnStatus) bool { return s.State == im.ConnConnecting })
	proceed <- errors.New("platform says 401")
	s := wait("disconnected after it failed", func(s im.ConnStatus) bool { return s.State == im.ConnDisconnected })
	if s.Err != "platform says 401" || s.Ready() {
		t.Fatalf("after a failed attempt: %+v", s)
	}
	<-attempt
	wait("connected once the adapter says so", func(s im.ConnStatus) bool { return s.State == im.ConnConnected && s.Err == "" })

	// A second replica finds the lease held: standby, which is ready (the other one serves).
	tb := states.Track("test", "bot1", "inbound-b")
	bctx, bcancel := context.WithCancel(context.Background())
	bdone := make(chan struct{})
	go func() {
		defer close(bdone)
		_ = im.Hold(im.WithConnTracker(bctx, tb), im.HoldOptions{JS: js, Key: im.ConnKey("test", "bot1"), Owner: "b", TTL: 3 * time.Second},
			func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	}()
	testwait.Eventually(t, 0, func() error {
		return testwait.Want(tb.Status().State == im.ConnStandby, "second replica: %+v", tb.Status())
	})
	if !tb.Status().Ready() {
		t.Fatal("standby is not ready")
	}
	bcancel()
	<-bdone
	cancel()
	<-done
	if got := len(states.Snapshot()); got != 2 {
		t.Fatalf("snapshot: %d connections", got)
	}
	if c := changes.Load(); c < 3 {
		t.Fatalf("onChange called %d times", c)
	}
}
