package toolworker

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/tools"
)

func getEntry(t *testing.T, kv jetstream.KeyValue, name string) (events.ToolEntry, bool) {
	t.Helper()
	e, err := kv.Get(context.Background(), events.EncodeToken(name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return events.ToolEntry{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	te, err := events.UnmarshalToolEntry(e.Value())
	if err != nil {
		t.Fatal(err)
	}
	return te, true
}

func TestAnnounceHeartbeatWithdraw(t *testing.T) {
	srv := newServer(t)
	kv, err := srv.JS.KeyValue(context.Background(), events.BucketTools)
	if err != nil {
		t.Fatal(err)
	}
	gated := echoTool(nil, tools.WithRoles(tools.RoleMaster), tools.WithScopes(tools.ScopePrivate), tools.WithPlatforms("webhook"))
	o1 := fastOpts(srv, mustRegistry(t, gated), "w1")
	o1.Timeouts = map[string]time.Duration{"echo": 1500 * time.Millisecond}
	w1, err := Run(context.Background(), o1)
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Stop(context.Background())
	e, ok := getEntry(t, kv, "echo")
	if !ok {
		t.Fatal("echo not announced")
	}
	if !slices.Equal(e.Workers, []string{"w1"}) || e.TimeoutMs != 1500 || e.Idempotent || e.Source != "builtin" ||
		!slices.Equal(e.Roles, []string{"master"}) || !slices.Equal(e.Scopes, []string{"private"}) ||
		!slices.Equal(e.Platforms, []string{"webhook"}) || !strings.Contains(string(e.Parameters), `"text"`) {
		t.Fatalf("entry = %+v", e)
	}
	first := e.UpdatedAt
	testwait.Eventually(t, 0, func() error {
		e, _ := getEntry(t, kv, "echo")
		return testwait.Want(e.UpdatedAt > first, "a heartbeat refresh")
	})

	w2 := startWorker(t, fastOpts(srv, mustRegistry(t, gated), "w2"))
	testwait.Eventually(t, 0, func() error {
		e, _ := getEntry(t, kv, "echo")
		return testwait.Want(slices.Equal(e.Workers, []string{"w1", "w2"}), "both workers listed")
	})
	mustStop(t, w1)
	e, ok = getEntry(t, kv, "echo")
	if !ok || slices.Contains(e.Workers, "w1") {
		t.Fatalf("after w1 stopped: %v %+v", ok, e)
	}
	mustStop(t, w2)
	if _, ok := getEntry(t, kv, "echo"); ok {
		t.Fatal("entry still present after the last worker stopped")
	}
}

func TestCrashedWorkerDropsOutOfTheList(t *testing.T) {
	srv := newServer(t)
	kv, _ := srv.JS.KeyValue(context.Background(), events.BucketTools)
	w1, err := Run(context.Background(), fastOpts(srv, mustRegistry(t, echoTool(nil)), "w1"))
	if err != nil {
		t.Fatal(err)
	}
	startWorker(t, fastOpts(srv, mustRegistry(t, echoTool(nil)), "w2"))
	testwait.Eventually(t, 0, func() error {
		e, _ := getEntry(t, kv, "echo")
		return testwait.Want(len(e.Workers) == 2, "both listed")
	})
	w1.Kill()
	testwait.Eventually(t, 0, func() error {
		e, ok := getEntry(t, kv, "echo")
		return testwait.Want(ok && slices.Equal(e.Workers, []string{"w2"}), "the crashed worker dropped")
	})
}

func TestRegistryChangesFollowed(t *testing.T) {
	srv := newServer(t)
	kv, _ := srv.JS.KeyValue(context.Background(), events.BucketTools)
	reg := mustRegistry(t, echoTool(nil))
	startWorker(t, fastOpts(srv, reg, "w1"))
	other := tools.MustRaw("other", "x", nil, func(ctx context.Context, c tools.Call) (tools.Result, error) {
		return tools.TextResult("other ran"), nil
	})
	if err := reg.Add(other); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 0, func() error { _, ok := getEntry(t, kv, "other"); return testwait.Want(ok, "new tool announced") })
	publishCall(t, srv.JS, newCall("other", "c-other", nil), "")
	if r := waitResult(t, srv.JS, testSK, "c-other"); text(r) != "other ran" {
		t.Fatalf("result %q", text(r))
	}
	reg.Remove("echo")
	testwait.Eventually(t, 0, func() error { _, ok := getEntry(t, kv, "echo"); return testwait.Want(!ok, "removed tool withdrawn") })
}

func TestCallResultCorrelation(t *testing.T) {
	srv := newServer(t)
	startWorker(t, fastOpts(srv, mustRegistry(t, echoTool(nil)), "w1"))
	publishCall(t, srv.JS, newCall("echo", "c1", map[string]any{"text": "hi"}), "")
	r := waitResult(t, srv.JS, testSK, "c1")
	if r.Data.IsError || text(r) != "echo: hi" || r.Data.Worker != "w1" || r.Data.Tool != "echo" {
		t.Fatalf("result = %+v", r.Data)
	}
	if r.Session != events.NewSessionID(testSK, 1).String() || r.Turn != "t1" || r.Trace != traceID {
		t.Fatalf("correlation = %q %q %q", r.Session, r.Turn, r.Trace)
	}
	waitDrained(t, srv.JS, "echo")
}

func TestExecutedOnceForDuplicateRequests(t *testing.T) {
	srv := newServer(t)
	var c counter
	release := make(chan struct{})
	slow := tools.MustRaw("slow", "blocks until released", nil, func(ctx context.Context, call tools.Call) (tools.Result, error) {
		c.add(call.ID)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return tools.TextResult("done"), nil
	})
	startWorker(t, fastOpts(srv, mustRegistry(t, slow), "w1"))
	// Two requests for one call id with different Nats-Msg-Ids (stream dedupe does not catch
	// them): the second arrives while the first is running ...
	publishCall(t, srv.JS, newCall("slow", "dup1", nil), "a")
	publishCall(t, srv.JS, newCall("slow", "dup1", nil), "b")
	testwait.Eventually(t, 0, func() error { return testwait.Want(c.get("dup1") == 1, "first run") })
	// Both requests reach the worker while the first still runs.
	testwait.Eventually(t, 0, func() error {
		c, err := srv.JS.Consumer(context.Background(), events.StreamToolCalls, ConsumerName("slow"))
		if err != nil {
			return err
		}
		info, err := c.Info(context.Background())
		if err != nil {
			return err
		}
		return testwait.Want(info.Delivered.Consumer >= 2, "%d of 2 requests delivered", info.Delivered.Consumer)
	})
	close(release)
	waitResult(t, srv.JS, testSK, "dup1")
	waitDrained(t, srv.JS, "slow")
	// ... and a third long after the result was recorded.
	publishCall(t, srv.JS, newCall("slow", "dup1", nil), "c")
	waitDrained(t, srv.JS, "slow")
	if n := c.get("dup1"); n != 1 {
		t.Fatalf("executed %d times, want 1", n)
	}
	if n := countResults(t, srv.JS, testSK, "dup1"); n != 1 {
		t.Fatalf("%d results recorded, want 1", n)
	}
}

// blockingTool signals started and blocks until its context ends.
func blockingTool(name string, c *counter, started chan<- string, opts ...tools.Option) tools.Tool {
	return tools.MustRaw(name, "blocks", nil, func(ctx context.Context, call tools.Call) (tools.Result, error) {
		c.add(call.ID)
		if c.get(call.ID) == 1 {
			started <- call.ID
			<-ctx.Done()
			return tools.Result{}, ctx.Err()
		}
		return tools.TextResult("second run"), nil
	}, opts...)
}

// A non-idempotent call whose worker dies while it runs is answered "interrupted" by the next
// worker, never run again. The next worker does not wait for the dead attempt's whole timeout
// (here a minute, longer than waitResult waits): the attempt's process does not answer its
// probe, which tells it the attempt's worker is gone (TestKilledMidCallAnsweredByAnother).
func TestNonIdempotentInterruptedIsNotRerun(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
	}{
		{"short timeout", 1500 * time.Millisecond},
		{"worker gone", time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) { testNonIdempotentInterrupted(t, tc.timeout) })
	}
}

func testNonIdempotentInterrupted(t *testing.T, timeout time.Duration) {
	srv := newServer(t)
	var c counter
	started := make(chan string, 1)
	tool := blockingTool("charge", &c, started) // not idempotent
	o := fastOpts(srv, mustRegistry(t, tool), "w1")
	o.DefaultTimeout = timeout
	o.InterruptGrace = 5 * time.Second
	w1, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	publishCall(t, srv.JS, newCall("charge", "pay1", nil), "")
	<-started
	w1.Kill() // after the marker, before the result

	o.ID = "w2"
	startWorker(t, o)
	r := waitResult(t, srv.JS, testSK, "pay1")
	if !r.Data.IsError || !strings.Contains(text(r), "interrupted after it started") || !strings.Contains(text(r), "not idempotent") ||
		!strings.Contains(text(r), "w1") || r.Data.Worker != "w2" {
		t.Fatalf("result = %q (error %v, worker %s)", text(r), r.Data.IsError, r.Data.Worker)
	}
	waitDrained(t, srv.JS, "charge")
	if n := c.get("pay1"); n != 1 {
		t.Fatalf("executed %d times, want 1", n)
	}
}

func TestIdempotentRerunAfterCrash(t *testing.T) {
	srv := newServer(t)
	var c counter
	started := make(chan string, 1)
	tool := blockingTool("lookup", &c, started, tools.Idempotent())
	o := fastOpts(srv, mustRegistry(t, tool), "w1")
	w1, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	publishCall(t, srv.JS, newCall("lookup", "q1", nil), "")
	<-started
	w1.Kill()
	o.ID = "w2"
	startWorker(t, o)
	r := waitResult(t, srv.JS, testSK, "q1")
	if r.Data.IsError || text(r) != "second run" || c.get("q1") != 2 {
		t.Fatalf("result = %q, runs %d", text(r), c.get("q1"))
	}
}

func TestGivesUpAfterMaxAttempts(t *testing.T) {
	srv := newServer(t)
	var c counter
	started := make(chan string, 1)
	tool := blockingTool("flaky", &c, started, tools.Idempotent())
	o := fastOpts(srv, mustRegistry(t, tool), "w1")
	o.MaxAttempts = 1
	w1, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	publishCall(t, srv.JS, newCall("flaky", "f1", nil), "")
	<-started
	w1.Kill()
	o.ID = "w2"
	startWorker(t, o)
	r := waitResult(t, srv.JS, testSK, "f1")
	if !r.Data.IsError || !strings.Contains(text(r), "giving up") || c.get("f1") != 1 {
		t.Fatalf("result = %q, runs %d", text(r), c.get("f1"))
	}
	dl := lastDeadLetter(t, srv.JS, events.DLQMaxDeliveries)
	if dl.Data.Deliveries != 2 || dl.Data.Subject != events.ToolCallSubject("flaky") {
		t.Fatalf("dead letter = %+v", dl.Data)
	}
}

func lastDeadLetter(t *testing.T, js jetstream.JetStream, reason string) *events.Event[events.DeadLetter] {
	t.Helper()
	st, err := js.Stream(context.Background(), events.StreamDeadLetters)
	if err != nil {
		t.Fatal(err)
	}
	var raw *jetstream.RawStreamMsg
	testwait.Eventually(t, 0, func() error {
		subject := events.DeadLetterSubject(events.RoleToolWorker, reason)
		raw, err = st.GetLastMsgForSubject(context.Background(), subject)
		return testwait.Want(err == nil, "no dead letter on %s: %v", subject, err)
	})
	var ev events.Event[events.DeadLetter]
	if err := events.UnmarshalMsg(&nats.Msg{Data: raw.Data, Header: raw.Header}, &ev); err != nil {
		t.Fatal(err)
	}
	return &ev
}

func TestMalformedRequests(t *testing.T) {
	srv := newServer(t)
	var c counter
	startWorker(t, fastOpts(srv, mustRegistry(t, echoTool(&c)), "w1"))

	publishRaw(t, srv.JS, events.ToolCallSubject("echo"), []byte("not json at all"))
	dl := lastDeadLetter(t, srv.JS, events.DLQInvalid)
	if dl.Data.Text != "not json at all" || !strings.Contains(dl.Data.Error, "malformed JSON") || dl.Data.Role != events.RoleToolWorker {
		t.Fatalf("dead letter = %+v", dl.Data)
	}

	// Readable call id and session key, but no caller: dead letter and an error result.
	tc := newCall("echo", "bad1", map[string]any{"text": "x"})
	ev := events.New(tc)
	raw, _ := json.Marshal(ev)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	delete(m["data"].(map[string]any), "caller")
	raw, _ = json.Marshal(m)
	publishRaw(t, srv.JS, events.ToolCallSubject("echo"), raw)
	r := waitResult(t, srv.JS, testSK, "bad1")
	if !r.Data.IsError || !strings.Contains(text(r), "caller.platform is required") {
		t.Fatalf("result = %q", text(r))
	}
	dl = lastDeadLetter(t, srv.JS, events.DLQInvalid)
	if !strings.Contains(dl.Data.Error, "caller.platform") || len(dl.Data.JSON) == 0 {
		t.Fatalf("dead letter = %+v", dl.Data)
	}

	// A call naming another tool than its subject.
	publishCall(t, srv.JS, newCall("echo", "bad2", map[string]any{"text": "x"}), "")
	other := newCall("other", "bad3", nil)
	ev2 := events.New(other)
	msg, _ := events.NewMsg(events.ToolCallSubject("echo"), ev2)
	if _, err := srv.JS.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	if r := waitResult(t, srv.JS, testSK, "bad3"); !r.Data.IsError || !strings.Contains(text(r), "does not match subject") {
		t.Fatalf("result = %q", text(r))
	}
	waitResult(t, srv.JS, testSK, "bad2") // the worker kept working
	waitDrained(t, srv.JS, "echo")
	if calls, _ := c.total(); calls != 1 {
		t.Fatalf("%d calls executed, want 1 (bad2)", calls)
	}
}

func TestRefusalsAndValidation(t *testing.T) {
	srv := newServer(t)
	var c counter
	masterOnly := tools.MustRaw("admin_op", "master only", nil, func(ctx context.Context, call tools.Call) (tools.Result, error) {
		c.add(call.ID)
		return tools.TextResult("done"), nil
	}, tools.WithRoles(tools.RoleMaster))
	privOnly := tools.MustRaw("priv_op", "private only", nil, func(ctx context.Context, call tools.Call) (tools.Result, error) {
		c.add(call.ID)
		return tools.TextResult("done"), nil
	}, tools.WithScopes(tools.ScopePrivate))
	qqOnly := tools.MustRaw("qq_op", "qq only", nil, func(ctx context.Context, call tools.Call) (tools.Result, error) {
		c.add(call.ID)
		return tools.TextResult("done"), nil
	}, tools.WithPlatforms("qq"))
	adminOp := tools.MustRaw("group_op", "group admins", nil, func(ctx context.Context, call tools.Call) (tools.Result, error) {
		c.add(call.ID)
		return tools.TextResult("done"), nil
	}, tools.WithRoles(tools.RoleGroupAdmin))
	startWorker(t, fastOpts(srv, mustRegistry(t, masterOnly, privOnly, qqOnly, adminOp, echoTool(&c)), "w1"))

	cases := []struct {
		name    string
		call    func() events.ToolCall
		wantErr string // "" = success
	}{
		{"role refused", func() events.ToolCall { return newCall("admin_op", "r1", nil) }, "requires one of the roles master"},
		{"master allowed", func() events.ToolCall {
			tc := newCall("admin_op", "r2", nil)
			tc.Caller.Roles = []string{"user", "master"}
			return tc
		}, ""},
		{"platform admin alias", func() events.ToolCall {
			tc := newCall("group_op", "r3", nil)
			tc.Caller.Roles = []string{events.RoleAdmin}
			return tc
		}, ""},
		{"scope refused", func() events.ToolCall { return newCall("priv_op", "r4", nil) }, "not available in group chats"},
		{"platform refused", func() events.ToolCall { return newCall("qq_op", "r5", nil) }, `not available on platform "webhook"`},
		{"caller does not match session", func() events.ToolCall {
			tc := newCall("echo", "r6", map[string]any{"text": "x"})
			tc.Caller.Platform = "qq"
			return tc
		}, "does not match the session"},
		{"missing argument", func() events.ToolCall { return newCall("echo", "r7", nil) }, "text"},
		{"wrong type", func() events.ToolCall { return newCall("echo", "r8", map[string]any{"text": map[string]any{"a": 1}}) }, "text"},
		{"coerced argument", func() events.ToolCall { return newCall("echo", "r9", map[string]any{"text": 42}) }, ""},
		{"deadline passed", func() events.ToolCall {
			tc := newCall("echo", "r10", map[string]any{"text": "x"})
			tc.Deadline = time.Now().Add(-time.Second).UnixMilli()
			return tc
		}, "deadline passed"},
	}
	for _, tc := range cases {
		publishCall(t, srv.JS, tc.call(), "")
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			call := tc.call()
			r := waitResult(t, srv.JS, testSK, call.CallID)
			if tc.wantErr == "" {
				if r.Data.IsError || c.get(call.CallID) != 1 {
					t.Fatalf("want success, got %q (runs %d)", text(r), c.get(call.CallID))
				}
				return
			}
			if !r.Data.IsError || !strings.Contains(text(r), tc.wantErr) {
				t.Fatalf("want error containing %q, got %q", tc.wantErr, text(r))
			}
			if c.get(call.CallID) != 0 {
				t.Fatal("refused call was executed")
			}
		})
	}
	if r := waitResult(t, srv.JS, testSK, "r7"); !strings.Contains(text(r), "Validation failed") {
		t.Fatalf("validation message %q", text(r))
	}
}

func TestPanicTimeoutAndNeedsOwner(t *testing.T) {
	srv := newServer(t)
	boom := tools.MustRaw("boom", "panics", nil, func(ctx context.Context, call tools.Call) (tools.Result, error) {
		panic("kaboom")
	})
	var mu sync.Mutex
	stuckDone := make(chan struct{})
	stuck := tools.MustRaw("stuck", "ignores its context", nil, func(ctx context.Context, call tools.Call) (tools.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		<-stuckDone
		return tools.TextResult("late"), nil
	})
	polite := tools.MustRaw("polite", "honours its context", nil, func(ctx context.Context, call tools.Call) (tools.Result, error) {
		<-ctx.Done()
		return tools.Result{}, ctx.Err()
	})
	owner := tools.MustRaw("needs_owner", "asks", nil, func(ctx context.Context, call tools.Call) (tools.Result, error) {
		return tools.Result{Content: tools.TextResult("ask the owner").Content, NeedsOwner: true}, nil
	})
	o := fastOpts(srv, mustRegistry(t, boom, stuck, polite, owner), "w1")
	o.Timeouts = map[string]time.Duration{"stuck": 200 * time.Millisecond, "polite": 200 * time.Millisecond}
	startWorker(t, o)
	t.Cleanup(func() { close(stuckDone) })

	publishCall(t, srv.JS, newCall("boom", "p1", nil), "")
	if r := waitResult(t, srv.JS, testSK, "p1"); !r.Data.IsError || !strings.Contains(text(r), "kaboom") {
		t.Fatalf("panic result %q", text(r))
	}
	publishCall(t, srv.JS, newCall("stuck", "p2", nil), "")
	if r := waitResult(t, srv.JS, testSK, "p2"); !r.Data.IsError || !strings.Contains(text(r), "timed out after 200ms") {
		t.Fatalf("timeout result %q", text(r))
	}
	publishCall(t, srv.JS, newCall("polite", "p3", nil), "")
	if r := waitResult(t, srv.JS, testSK, "p3"); !r.Data.IsError || !strings.Contains(text(r), "timed out after 200ms") {
		t.Fatalf("timeout result %q", text(r))
	}
	tc := newCall("polite", "p4", nil)
	tc.Deadline = time.Now().Add(150 * time.Millisecond).UnixMilli()
	publishCall(t, srv.JS, tc, "")
	if r := waitResult(t, srv.JS, testSK, "p4"); !r.Data.IsError ||
		!(strings.Contains(text(r), "deadline") || strings.Contains(text(r), "timed out")) {
		t.Fatalf("deadline result %q", text(r))
	}
	publishCall(t, srv.JS, newCall("needs_owner", "p5", nil), "")
	if r := waitResult(t, srv.JS, testSK, "p5"); !tools.NeedsOwner(toLoop(r)) {
		t.Fatalf("needsOwner lost: %s", r.Data.Details)
	}
}

func TestTwoWorkersShareTheWork(t *testing.T) {
	srv := newServer(t)
	var c counter
	work := tools.MustRaw("work", "sleeps a little", nil, func(ctx context.Context, call tools.Call) (tools.Result, error) {
		c.add(call.ID)
		time.Sleep(5 * time.Millisecond) // busy long enough that the other worker gets calls too
		return tools.TextResult("ok"), nil
	}, tools.Idempotent())
	o := fastOpts(srv, mustRegistry(t, work), "w1")
	o.Concurrency = 2
	startWorker(t, o)
	o.ID = "w2"
	startWorker(t, o)
	const n = 120
	for i := range n {
		publishCall(t, srv.JS, newCall("work", "s"+itoa(int64(i)), nil), "")
	}
	by := map[string]int{}
	for i := range n {
		r := waitResult(t, srv.JS, testSK, "s"+itoa(int64(i)))
		by[r.Data.Worker]++
	}
	waitDrained(t, srv.JS, "work")
	if calls, runs := c.total(); calls != n || runs != n {
		t.Fatalf("%d calls, %d runs; want %d each", calls, runs, n)
	}
	if by["w1"] == 0 || by["w2"] == 0 {
		t.Fatalf("work not shared: %v", by)
	}
}

func TestStopFinishesRunningCalls(t *testing.T) {
	srv := newServer(t)
	started := make(chan struct{}, 1)
	slow := tools.MustRaw("slow", "takes a while", nil, func(ctx context.Context, call tools.Call) (tools.Result, error) {
		started <- struct{}{}
		time.Sleep(300 * time.Millisecond) // still running when Stop comes
		return tools.TextResult("finished"), nil
	})
	w, err := Run(context.Background(), fastOpts(srv, mustRegistry(t, slow), "w1"))
	if err != nil {
		t.Fatal(err)
	}
	publishCall(t, srv.JS, newCall("slow", "st1", nil), "")
	<-started
	mustStop(t, w)
	if n := countResults(t, srv.JS, testSK, "st1"); n != 1 {
		t.Fatalf("result not recorded before Stop returned (%d)", n)
	}
	waitDrained(t, srv.JS, "slow")
}

func TestOptionsErrors(t *testing.T) {
	srv := newServer(t)
	reg := mustRegistry(t)
	for _, o := range []Options{
		{JS: srv.JS, Registry: reg},
		{NC: srv.NC, Registry: reg},
		{NC: srv.NC, JS: srv.JS},
		{NC: srv.NC, JS: srv.JS, Registry: reg, Concurrency: -1},
	} {
		if _, err := Run(context.Background(), o); !errors.Is(err, ErrConfig) {
			t.Fatalf("Run(%+v) = %v, want ErrConfig", o, err)
		}
	}
}

// TestInProgressKeepsSlowCall: a call that runs for several AckWaits is not redelivered while it
// runs, because the worker keeps sending in-progress acks.
func TestInProgressKeepsSlowCall(t *testing.T) {
	srv := newServer(t)
	slow := tools.MustRaw("slow", "takes three ack waits", nil, func(ctx context.Context, call tools.Call) (tools.Result, error) {
		time.Sleep(1800 * time.Millisecond) // three AckWaits: the point of the test
		return tools.TextResult("finished"), nil
	}, tools.Idempotent())
	o := fastOpts(srv, mustRegistry(t, slow), "w1")
	o.AckWait = 600 * time.Millisecond
	startWorker(t, o)
	publishCall(t, srv.JS, newCall("slow", "ip1", nil), "")
	waitResult(t, srv.JS, testSK, "ip1")
	waitDrained(t, srv.JS, "slow")
	cons, err := srv.JS.Consumer(context.Background(), events.StreamToolCalls, ConsumerName("slow"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Delivered.Consumer != 1 {
		t.Fatalf("call delivered %d times, want 1 (in-progress acks missing)", info.Delivered.Consumer)
	}
}
