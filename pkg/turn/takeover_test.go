package turn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/faux"
	"github.com/agentbus/agentbus/pkg/store"
	"github.com/agentbus/agentbus/pkg/tools"
	"github.com/agentbus/agentbus/pkg/turn/ownership"
)

// Worker A is killed in the middle of a turn while worker B runs beside it (the fault test's
// shape, in one process): B must answer the turn in flight and the messages that arrive while
// A's lease has not expired yet, exactly once each, without repeating a model step that was
// persisted or a tool call that ran.
//
// The kill points are the ones the fault test's lost turns were in flight at: the first model
// step, the wait for a tool result, and the second model step. The message sent after the kill
// reaches B while A's claim still looks in force: B's ring gets no responders, B keeps the
// delivery and claims the session as soon as the watch shows A's worker lease gone.
func TestKillMidTurnOtherWorkerAnswers(t *testing.T) {
	for _, tc := range []struct {
		name      string
		killAt    string // "step1", "tool", "step2"
		wantCalls int    // model calls: a step whose message was persisted is not asked again
	}{
		// first message: the interrupted step is asked again, a persisted one is not; second: 2
		{"during the first model step", "step1", 3 + 2},
		{"while the tool runs", "tool", 2 + 2},
		{"during the second model step", "step2", 3 + 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu      sync.Mutex
				blocked = map[string]bool{}
			)
			hold := make(chan struct{})    // closed when A is dead: the blocked step may end
			inStep := make(chan string, 8) // which step is blocked now
			h := newHarness(t, nil, faux.WithResponder(func(c *llm.Context) faux.Response {
				last := c.Messages[len(c.Messages)-1]
				user := ""
				for _, m := range c.Messages {
					if m.Role == llm.RoleUser {
						user = m.TextContent()
					}
				}
				step := "step1"
				if last.Role == llm.RoleToolResult {
					step = "step2"
				}
				mu.Lock()
				block := strings.Contains(user, "first") && step == tc.killAt && !blocked[step]
				if block {
					blocked[step] = true
				}
				mu.Unlock()
				if block {
					inStep <- step
					<-hold
				}
				if step == "step2" {
					return faux.Response{Text: "answer to " + user}
				}
				return faux.Response{ToolCalls: []llm.Content{llm.ToolCall("c1", "record", map[string]any{"text": user})}}
			}))
			var runs sync.Map // tool call text -> runs
			toolStarted := make(chan struct{}, 8)
			h.startTools(tools.MustNew("record", "records", func(ctx context.Context, c tools.Call, a echoArgs) (tools.Result, error) {
				n, _ := runs.LoadOrStore(a.Text, new(atomic.Int32))
				n.(*atomic.Int32).Add(1)
				if tc.killAt == "tool" && strings.Contains(a.Text, "first") {
					toolStarted <- struct{}{}
					<-hold
				}
				return tools.TextResult("recorded " + a.Text), nil
			}))
			a := h.worker("wA")
			h.waitTools(a, 1)
			h.send(sk, "m1", "first message")
			select {
			case <-inStep:
			case <-toolStarted:
			case <-time.After(20 * time.Second):
				t.Fatal("the turn never reached the kill point")
			}
			b := h.worker("wB")
			h.waitTools(b, 1)
			// Kill waits for A's goroutines, and the blocked step is one: it may end once A's
			// context is cancelled, as a dead process's request would never return.
			killed := time.Now()
			go a.Kill()
			testwait.Eventually(t, 0, func() error { return testwait.Want(a.ctx.Err() != nil, "actor A not stopped yet") })
			close(hold)
			h.send(sk, "m2", "second message")
			got := h.replies(sk, 2)
			took := time.Since(killed)
			if got[0] != "answer to first message" || got[1] != "answer to second message" {
				t.Fatalf("replies %q", got)
			}
			t.Logf("kill → both replies %v (lease TTL and AckWait 2s)", took.Round(time.Millisecond))
			time.Sleep(time.Second) // a duplicate would show up now
			if out := h.outbound(sk); len(out) != 2 {
				t.Fatalf("%d replies %q, want 2", len(out), out)
			}
			runs.Range(func(k, v any) bool {
				if n := v.(*atomic.Int32).Load(); n != 1 {
					t.Errorf("tool ran %d times for %q", n, k)
				}
				return true
			})
			if calls := h.faux.Calls(); calls != tc.wantCalls {
				t.Errorf("model called %d times, want %d", calls, tc.wantCalls)
			}
			waitClosed(t, b, sk)
		})
	}
}

// A delivery that reaches a replica which does not own the session is handed over by the
// doorbell: the owner holds and acks it, the ringer neither NAKs nor keeps it, so nothing is
// redelivered and no message waits for a NAK delay. With two replicas and many sessions,
// every delivery is acked exactly once by the consumer's count.
func TestRingHandsDeliveryOver(t *testing.T) {
	h := newHarness(t, nil, faux.WithResponder(func(c *llm.Context) faux.Response {
		return faux.Response{Text: "ok " + c.Messages[len(c.Messages)-1].TextContent()}
	}))
	// Only rebalancing may move a session here: the harness's idle release (5 s) would race the
	// rebalance, which waits for the next read of the worker leases (up to 5 s, viewEvery).
	keep := func(o *Options) { o.IdleRelease = time.Minute }
	a := h.workerWith("wA", keep)
	keys := make([]string, 0, 8)
	for i := range 8 {
		k := sk
		k.Scene = "ring-" + string(rune('a'+i))
		keys = append(keys, k.Scene)
		h.send(k, "m0", "warm up")
		h.replies(k, 1)
	}
	// A owns every session now; B joins and gets about half of the next deliveries. B also
	// takes its share of the sessions (rebalance.go): that settles first, so that no move
	// races a delivery here.
	b := h.workerWith("wB", keep)
	testwait.Eventually(t, 0, func() error {
		return testwait.Want(b.own.Running() == len(keys)/2 && a.own.Running() == len(keys)/2, "actors running: A %d, B %d; want %d each", a.own.Running(), b.own.Running(), len(keys)/2)
	})
	for round := 1; round <= 3; round++ {
		for _, scene := range keys {
			k := sk
			k.Scene = scene
			h.send(k, "m"+string(rune('0'+round)), "round")
		}
		for _, scene := range keys {
			k := sk
			k.Scene = scene
			h.replies(k, round+1)
		}
	}
	ctx := context.Background()
	cons, err := h.ns.JS.Consumer(ctx, "SESSION_IN", ConsumerName)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 0, func() error {
		info, err := cons.Info(ctx)
		return testwait.Want(err == nil && info.NumAckPending == 0 && info.NumPending == 0, "deliveries still pending or unacked (err %v)", err)
	})
	info, _ := cons.Info(ctx)
	if info.NumRedelivered != 0 || info.Delivered.Consumer != uint64(len(keys)*4) {
		t.Errorf("consumer delivered %d (want %d), redelivered %d (want 0)", info.Delivered.Consumer, len(keys)*4, info.NumRedelivered)
	}
	// Ownership did not move again: each replica still runs its half.
	if na, nb := a.own.Running(), b.own.Running(); na != len(keys)/2 || nb != len(keys)/2 {
		t.Errorf("actors: A %d, B %d; want %d each", na, nb, len(keys)/2)
	}
}

// A worker whose liveness lease ended while the process lived (the server expired it while a
// NATS node failed over; here: released by hand, as the TTL would) keeps its sessions: it
// acquires the lease again with the same epoch and confirms every claim by a CAS. The one
// session another replica claimed in the gap is dropped and answered there; the others stay
// with the same actor, and nothing is answered twice.
func TestLapsedLeaseKeepsOwnClaims(t *testing.T) {
	h := newHarness(t, nil, faux.WithResponder(func(c *llm.Context) faux.Response {
		return faux.Response{Text: "ok " + c.Messages[len(c.Messages)-1].TextContent()}
	}))
	// A renews every 10 s, so the gap between the lease's end and A's next renewal holds at
	// least one of B's reads of the worker leases (every 5 s, ownership's viewEvery): B can
	// only call A's token stale from a read that falls in the gap. With 5 s renewals it was luck
	// whether one did (the test failed now and then under load); with a 2 s gap CI once saw A
	// renew before B had claimed. Both workers' idle actors outlive the test.
	a := h.workerWith("wA", func(o *Options) { o.LeaseTTL, o.IdleRelease = 30*time.Second, 2*time.Minute })
	keep, take := sk, sk
	keep.Scene, take.Scene = "keep", "take"
	for _, k := range []events.SessionKey{keep, take} {
		h.send(k, "m1", "one")
		h.replies(k, 1)
	}
	b := h.workerWith("wB", func(o *Options) { o.IdleRelease = time.Minute })
	old := a.own.WorkerLease()
	actorOf := func(w *Worker, k events.SessionKey) ownership.Session { return w.own.Session(k.String()) }
	kept := actorOf(a, keep)
	if kept == nil || actorOf(a, take) == nil {
		t.Fatal("A does not run both sessions")
	}
	// Right after a renewal of A, so that A's next one is 10 s away.
	testwait.Eventually(t, 0, func() error {
		return testwait.Want(a.own.WorkerLease().Revision != old.Revision, "A's worker lease not renewed yet (revision %d)", a.own.WorkerLease().Revision)
	})
	ctx := context.Background()
	if err := a.leases.Release(ctx, a.own.WorkerLease()); err != nil {
		t.Fatal(err)
	}
	// B claims one of A's sessions while A's lease is gone (as a delivery would make it), once
	// its watch has shown the lease ended: until then B's claim trusts the view, finds A
	// alive and rings A's doorbell instead (CI under load once ran the claim first).
	testwait.Eventually(t, 0, func() error {
		return testwait.Want(b.own.Internals().Stale("wA", old.Token), "B does not see wA's old lease token as stale yet")
	})
	b.own.Internals().Claim(take)
	testwait.Eventually(t, 0, func() error { return testwait.Want(actorOf(b, take) != nil, "no actor on B for the claimed session") })
	// A comes back with its epoch at its next renewal (up to 10 s away), keeps "keep" with the
	// same actor and drops "take".
	testwait.Eventually(t, time.Minute, func() error {
		l := a.own.WorkerLease()
		return testwait.Want(l.Valid(time.Now()) && l.Revision != old.Revision && !a.own.Internals().Suspended() && actorOf(a, take) == nil, "A not back with a renewed lease, unsuspended and without the taken session yet (suspended %v)", a.own.Internals().Suspended())
	})
	if l := a.own.WorkerLease(); l.Token != old.Token {
		t.Fatalf("epoch %d after the lapse, want %d", l.Token, old.Token)
	}
	if actorOf(a, keep) != kept {
		t.Fatal("A's actor of the session nobody took was stopped")
	}
	for _, k := range []events.SessionKey{keep, take} {
		h.send(k, "m2", "two")
		if got := h.replies(k, 2); got[1] != "ok two" {
			t.Fatalf("%s: replies %q", k.Scene, got)
		}
	}
	if actorOf(b, take) == nil || actorOf(a, take) != nil || actorOf(a, keep) != kept {
		t.Error("ownership moved after the lapse beyond the one session B took")
	}
	time.Sleep(time.Second) // a duplicate would show up now
	for _, k := range []events.SessionKey{keep, take} {
		if out := h.outbound(k); len(out) != 2 {
			t.Errorf("%s: %d replies %q, want 2", k.Scene, len(out), out)
		}
	}
}

// A killed worker's session, with its turn in flight, is taken over by the replica that finds
// its doorbell without responders: with a lease TTL and an AckWait of a minute, nothing here
// waits for either; the turn is answered in seconds, once, with the tool run once.
func TestKilledWorkerTakenOverWithoutWaitingForTTL(t *testing.T) {
	hold := make(chan struct{})
	inStep := make(chan struct{}, 1)
	var blockOnce sync.Once
	h := newHarness(t, nil, faux.WithResponder(func(c *llm.Context) faux.Response {
		last := c.Messages[len(c.Messages)-1]
		if last.Role == llm.RoleToolResult {
			return faux.Response{Text: "answer"}
		}
		blocked := false
		blockOnce.Do(func() { blocked = true })
		if blocked {
			inStep <- struct{}{}
			<-hold
		}
		return faux.Response{ToolCalls: []llm.Content{llm.ToolCall("c1", "record", map[string]any{"text": "x"})}}
	}))
	var runs atomic.Int32
	h.startTools(tools.MustNew("record", "records", func(ctx context.Context, c tools.Call, a echoArgs) (tools.Result, error) {
		runs.Add(1)
		return tools.TextResult("recorded"), nil
	}))
	slow := func(o *Options) { o.LeaseTTL, o.AckWait = time.Minute, time.Minute }
	a := h.workerWith("wA", slow)
	h.waitTools(a, 1)
	b := h.workerWith("wB", slow)
	h.waitTools(b, 1)
	h.send(sk, "m1", "first")
	select {
	case <-inStep:
	case <-time.After(20 * time.Second):
		t.Fatal("the turn never reached the model")
	}
	owned := a.own.Session(sk.String()) != nil
	if !owned {
		t.Fatal("A does not run the session")
	}
	killed := time.Now()
	go a.Kill()
	testwait.Eventually(t, 0, func() error { return testwait.Want(a.ctx.Err() != nil, "actor A not stopped yet") })
	close(hold)
	got := h.replies(sk, 1) // waits 20 s at most: a third of the TTL and the AckWait
	t.Logf("kill → reply %v (lease TTL and AckWait 1 min)", time.Since(killed).Round(time.Millisecond))
	if got[0] != "answer" {
		t.Fatalf("replies %q", got)
	}
	time.Sleep(time.Second) // a duplicate would show up now
	if out := h.outbound(sk); len(out) != 1 {
		t.Fatalf("%d replies %q, want 1", len(out), out)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("tool ran %d times", n)
	}
}

// workerWith starts a worker like harness.worker, with its options changed by mutate.
func (h *harness) workerWith(id string, mutate func(*Options)) *Worker {
	h.t.Helper()
	o := h.options(id)
	o.LeaseTTL, o.AckWait, o.IdleRelease = 2*time.Second, 2*time.Second, 5*time.Second
	mutate(&o)
	w, err := New(context.Background(), h.ns.NC, h.ns.JS, o)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = w.Stop(context.Background()) })
	return w
}

// A publish whose reply never comes (the request or its answer was lost while a NATS node
// died; here: a subscriber swallows the request) ends after busTimeout even when the
// caller's ctx runs for minutes, as a turn's does (ai.agent.timeout): the fault test's lost
// turn waited on such a tool-call publish until the test gave up on it.
func TestPublishWithoutReplyEndsAfterTimeout(t *testing.T) {
	h := newHarness(t, nil)
	w := h.worker("wA")
	sub, err := h.ns.NC.Subscribe("swallow.calls", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := w.publishOnce(ctx, &nats.Msg{Subject: "swallow.calls", Data: []byte("x")})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("publish without a reply: %v", err)
		}
		t.Logf("publish without a reply ended after %v", time.Since(start).Round(time.Millisecond))
	case <-time.After(40 * time.Second):
		t.Fatal("a publish without a reply waited for the caller's whole ctx")
	}
}

// A new owner continues the inbox from the last commit's trigger, not from the session
// record's cursor (which a turn started from its inbox event does not move): with the last
// turn committed but its turn_committed record missing, as at a kill between the two, only that
// turn is finished from its commit; the turns before it are not read and re-published again.
func TestTakeoverStartsAtTheLastCommit(t *testing.T) {
	h := newHarness(t, nil, faux.WithResponder(faux.Echo))
	ctx := context.Background()
	a := h.worker("wA")
	for i := range 5 {
		h.send(sk, fmt.Sprint("m", i), fmt.Sprint("question ", i))
		h.replies(sk, i+1)
	}
	a.Kill()
	// The sixth message's turn committed on A, which died before its turn_committed record.
	h.send(sk, "m5", "question 5")
	trigger := h.lastInboxSeq(t, sk)
	turn := turnID(trigger)
	loaded, err := a.ctxlog.LoadContext(ctx, events.NewSessionID(sk, 1))
	if err != nil {
		t.Fatal(err)
	}
	answer := llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.Text("the committed answer")}, StopReason: llm.StopReasonStop, Timestamp: time.Now().UnixMilli()}
	if _, err := a.ctxlog.AppendMessages(ctx, events.NewSessionID(sk, 1), loaded.LastSeq, []llm.Message{llm.UserText("question 5", time.Now().UnixMilli()), answer},
		store.WithMsgID(turn+":commit"), store.WithTurn(turn), store.WithInboxSeq(trigger)); err != nil {
		t.Fatal(err)
	}
	calls := h.faux.Calls()
	resumed := &countingHandler{msg: "resuming turn"}
	b := h.workerWith("wB", func(o *Options) { o.Log = slog.New(resumed) })
	if got := h.replies(sk, 6); got[5] != "the committed answer" {
		t.Fatalf("replies %q", got)
	}
	if n := h.faux.Calls() - calls; n != 0 {
		t.Errorf("model called %d times, want 0", n)
	}
	if n := resumed.n.Load(); n != 1 {
		t.Errorf("%d turns resumed by the new owner, want 1 (the one in flight)", n)
	}
	waitClosed(t, b, sk)
}

// countingHandler counts the log records with one message.
type countingHandler struct {
	msg string
	n   atomic.Int32
}

func (c *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (c *countingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == c.msg {
		c.n.Add(1)
	}
	return nil
}
func (c *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *countingHandler) WithGroup(string) slog.Handler      { return c }

// A hint that names a replica which is gone is not believed. Here B's hint for the session
// names wGone, a replica the worker-lease watch does not show (as after another replica took
// a dead peer's sessions over first and the peer dropped out of the view): B claims instead,
// finds C owning the session and rings C. When B believed such a hint, it rang a doorbell
// nobody listens on, and the delivery waited for the ack wait, again on every redelivery
// (the fault test's replies 10-16 s late, with no turn worker killed).
func TestHintNamingAGoneReplicaIsLookedUp(t *testing.T) {
	h := newHarness(t, nil, faux.WithResponder(func(c *llm.Context) faux.Response {
		return faux.Response{Text: "ok " + c.Messages[len(c.Messages)-1].TextContent()}
	}))
	slow := func(o *Options) { o.LeaseTTL, o.AckWait = time.Minute, 5*time.Minute }
	c := h.workerWith("wC", slow)
	h.send(sk, "m0", "warm up")
	h.replies(sk, 1) // C owns the session
	b := h.workerWith("wB", slow)
	testwait.Eventually(t, 0, func() error { return testwait.Want(b.own.Internals().Sees("wC"), "B does not see worker wC yet") })
	b.own.Internals().Hint(sk, "wGone", 1)
	const n = 16 // about half reach B: the chance that none does is 2^-16
	for i := 1; i <= n; i++ {
		h.send(sk, fmt.Sprintf("m%d", i), "again")
		h.replies(sk, i+1)
	}
	ctx := context.Background()
	cons, err := h.ns.JS.Consumer(ctx, "SESSION_IN", ConsumerName)
	if err != nil {
		t.Fatal(err)
	}
	// Well inside the 5-minute ack wait a lost ring would wait for.
	testwait.Eventually(t, 0, func() error {
		info, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		return testwait.Want(info.NumAckPending == 0 && info.NumPending == 0, "deliveries still unacked: %d pending, %d unacked", info.NumPending, info.NumAckPending)
	})
	if c.own.Running() != 1 || b.own.Running() != 0 {
		t.Errorf("actors: C %d, B %d; want the session on C", c.own.Running(), b.own.Running())
	}
}
