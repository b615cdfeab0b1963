package toolworker

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/tools"
)

// logBuffer is a slog destination tests read back (the handlers log from many goroutines).
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// TestKilledMidCallAnsweredByAnother: a worker killed (as a process is: its NATS connection
// closes) while it runs a call; the other worker answers the call with the right outcome. An
// idempotent tool runs again; a non-idempotent one is answered "interrupted" without running
// again, and the other worker learns that the attempt is over by asking the attempt's process
// (no responders), not by waiting for its marker to stand still. How long after the kill the
// result came is logged: it is about AckWait (the redelivery) plus one request.
func TestKilledMidCallAnsweredByAnother(t *testing.T) {
	for _, tc := range []struct {
		name       string
		opts       []tools.Option
		wantText   string // in the result
		wantError  bool
		wantRuns   int
		wantLogged string // in the answering worker's log
	}{
		{name: "idempotent runs again", opts: []tools.Option{tools.Idempotent()}, wantText: "second run", wantRuns: 2},
		{name: "non-idempotent is answered interrupted", wantText: "interrupted after it started on worker w1", wantError: true,
			wantRuns: 1, wantLogged: "probe=gone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t)
			var c counter
			started := make(chan string, 1)
			tool := blockingTool("charge", &c, started, tc.opts...)
			o := fastOpts(srv, mustRegistry(t, tool), "w1")
			o.DefaultTimeout = time.Minute // the attempt's own timeout never ends the wait here
			o.NC, o.JS = srv.Connect(t)    // w1's own connection, closed when it is killed
			w1, err := Run(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			call := newCall("charge", callID("k"), nil)
			publishCall(t, srv.JS, call, "")
			select {
			case <-started:
			case <-time.After(30 * time.Second):
				t.Fatal("the call did not start")
			}
			// The other replica is up and waiting for calls when w1 dies.
			var logs logBuffer
			o2 := fastOpts(srv, mustRegistry(t, tool), "w2")
			o2.DefaultTimeout, o2.Log = time.Minute, logs.logger()
			startWorker(t, o2)

			killed := time.Now()
			w1.Kill()
			o.NC.Close()
			r := waitResult(t, srv.JS, testSK, call.CallID)
			t.Logf("answered %s after the kill by %s: %q", time.Since(killed).Round(time.Millisecond), r.Data.Worker, text(r))
			if r.Data.IsError != tc.wantError || !strings.Contains(text(r), tc.wantText) || r.Data.Worker != "w2" {
				t.Fatalf("result = %q (error %v, worker %s), want %q (error %v) from w2", text(r), r.Data.IsError, r.Data.Worker, tc.wantText, tc.wantError)
			}
			waitDrained(t, srv.JS, "charge")
			if n := c.get(call.CallID); n != tc.wantRuns {
				t.Fatalf("executed %d times, want %d", n, tc.wantRuns)
			}
			if n := countResults(t, srv.JS, testSK, call.CallID); n != 1 {
				t.Fatalf("%d results stored, want 1", n)
			}
			if tc.wantLogged != "" && !strings.Contains(logs.String(), tc.wantLogged) {
				t.Fatalf("w2's log does not say %q:\n%s", tc.wantLogged, logs.String())
			}
		})
	}
}

// TestLiveAttemptIsWaitedFor: a second delivery of a non-idempotent call that reaches another
// worker while the first attempt still runs (a redelivery after missed in-progress acks, or
// the same call published again) waits for that attempt's result: the attempt's process
// answers its probe "running", so the call is neither run again nor answered "interrupted".
func TestLiveAttemptIsWaitedFor(t *testing.T) {
	srv := newServer(t)
	var c counter
	started := make(chan string, 1)
	release := make(chan struct{})
	tool := tools.MustRaw("charge", "charges once", nil, func(ctx context.Context, call tools.Call) (tools.Result, error) {
		c.add(call.ID)
		started <- call.ID
		select {
		case <-release:
			return tools.TextResult("charged"), nil
		case <-ctx.Done():
			return tools.Result{}, ctx.Err()
		}
	})
	o := fastOpts(srv, mustRegistry(t, tool), "w1")
	o.DefaultTimeout, o.Concurrency = time.Minute, 1 // busy with the first attempt, w1 fetches no more
	startWorker(t, o)
	call := newCall("charge", callID("live"), nil)
	publishCall(t, srv.JS, call, "")
	<-started

	var logs logBuffer
	o2 := fastOpts(srv, mustRegistry(t, tool), "w2")
	o2.DefaultTimeout, o2.Log = time.Minute, logs.logger()
	startWorker(t, o2)
	publishCall(t, srv.JS, call, call.CallID+".again") // the same call id under another msg id
	testwait.Eventually(t, 0, func() error {
		return testwait.Want(strings.Contains(logs.String(), "waiting for that attempt's result"), "w2 waiting for w1's attempt")
	})
	time.Sleep(attemptDead + attemptBeat) // longer than a silent attempt would be trusted
	close(release)

	r := waitResult(t, srv.JS, testSK, call.CallID)
	if r.Data.IsError || text(r) != "charged" || r.Data.Worker != "w1" {
		t.Fatalf("result = %q (error %v, worker %s), want w1's %q", text(r), r.Data.IsError, r.Data.Worker, "charged")
	}
	waitDrained(t, srv.JS, "charge")
	if n := c.get(call.CallID); n != 1 {
		t.Fatalf("executed %d times, want 1", n)
	}
	if n := countResults(t, srv.JS, testSK, call.CallID); n != 1 {
		t.Fatalf("%d results stored, want 1", n)
	}
}

// TestOlderMarkerWatchedByItsBeats: a started marker written by an older version (in KV
// delivered, before issue 41) names no instance to ask; the worker honours it (the call does not
// run), watches the marker's beats and answers "interrupted" once it has stood still for
// attemptDead.
func TestOlderMarkerWatchedByItsBeats(t *testing.T) {
	srv := newServer(t)
	var c counter
	started := make(chan string, 1)
	tool := blockingTool("charge", &c, started)
	call := newCall("charge", callID("old"), nil)
	kv, err := srv.JS.KeyValue(context.Background(), events.BucketDelivered)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	old, _ := json.Marshal(map[string]any{"worker": "w0", "tool": "charge", "startedAt": now.UnixMilli(), "until": now.Add(time.Minute).UnixMilli()})
	if _, err := kv.Create(context.Background(), LegacyMarkerKey(call.CallID), old); err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	o := fastOpts(srv, mustRegistry(t, tool), "w1")
	o.DefaultTimeout, o.Log = time.Minute, logs.logger()
	startWorker(t, o)
	publishCall(t, srv.JS, call, "")
	r := waitResult(t, srv.JS, testSK, call.CallID)
	if !r.Data.IsError || !strings.Contains(text(r), "interrupted after it started on worker w0") {
		t.Fatalf("result = %q (error %v)", text(r), r.Data.IsError)
	}
	if n := c.get(call.CallID); n != 0 {
		t.Fatalf("executed %d times, want 0", n)
	}
	if !strings.Contains(logs.String(), "stopped beating") {
		t.Fatalf("w1's log does not say the marker stopped beating:\n%s", logs.String())
	}
}

// TestEarlierAttemptInThisProcess: a call comes back to the process whose earlier attempt
// started it (that attempt gave the call back without a result, e.g. its result could not be
// stored). The process does not ask itself, which would find the very handler asking: the
// attempt is over, and the call is answered "interrupted" at once, without waiting for beats.
func TestEarlierAttemptInThisProcess(t *testing.T) {
	srv := newServer(t)
	var c counter
	started := make(chan string, 1)
	tool := blockingTool("charge", &c, started)
	var logs logBuffer
	o := fastOpts(srv, mustRegistry(t, tool), "w1")
	o.DefaultTimeout, o.Log = time.Minute, logs.logger()
	w := startWorker(t, o)
	call := newCall("charge", callID("self"), nil)
	kv, err := srv.JS.KeyValue(context.Background(), events.BucketToolMarkers)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	m, _ := json.Marshal(marker{Worker: "w1", Instance: w.instance, Tool: "charge", StartedAt: now.UnixMilli(), Until: now.Add(time.Minute).UnixMilli()})
	if _, err := kv.Create(context.Background(), MarkerKey(call.CallID), m); err != nil {
		t.Fatal(err)
	}
	publishCall(t, srv.JS, call, "")
	r := waitResult(t, srv.JS, testSK, call.CallID)
	if !r.Data.IsError || !strings.Contains(text(r), "interrupted after it started on worker w1") {
		t.Fatalf("result = %q (error %v)", text(r), r.Data.IsError)
	}
	if n := c.get(call.CallID); n != 0 {
		t.Fatalf("executed %d times, want 0", n)
	}
	if !strings.Contains(logs.String(), "probe=idle") {
		t.Fatalf("w1's log does not say the earlier attempt was idle:\n%s", logs.String())
	}
}
