package turn

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/faux"
	"github.com/agentbus/agentbus/pkg/store"
	"github.com/agentbus/agentbus/pkg/toolbus"
	"github.com/agentbus/agentbus/pkg/tools"
	"github.com/agentbus/agentbus/pkg/toolworker"
)

// Tests of the tool-asking step carried on its tool call requests (issue 40, records.go
// carryStep, store.ReadCarried): kills at each boundary the carrying adds, against a real
// embedded nats-server, real tool workers and real turn workers.

// startToolWorker runs a real tool worker serving ts with o's settings (NC, JS, Registry set
// here).
func (h *harness) startToolWorker(o toolworker.Options, ts ...tools.Tool) *toolworker.Handle {
	h.t.Helper()
	reg, err := tools.NewRegistry(ts...)
	if err != nil {
		h.t.Fatal(err)
	}
	o.NC, o.JS, o.Registry = h.ns.NC, h.ns.JS, reg
	if o.PollWait == 0 {
		o.PollWait = 200 * time.Millisecond
	}
	tw, err := toolworker.Run(context.Background(), o)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = tw.Stop(context.Background()) })
	return tw
}

// announceGhost lists tool name in KV tools as served by a worker that copies steps, with no
// worker behind it: requests stay queued in TOOL_CALLS. The returned func withdraws it.
func (h *harness) announceGhost(name string, timeout time.Duration) func() {
	h.t.Helper()
	ctx := context.Background()
	kv, err := h.ns.JS.KeyValue(ctx, events.BucketTools)
	if err != nil {
		h.t.Fatal(err)
	}
	ann := &toolbus.Announcer{KV: kv, ID: "ghost", Window: time.Minute, CopiesStep: true}
	entry := events.ToolEntry{Name: name, Description: "nobody runs it yet", Parameters: []byte(`{"type":"object"}`), TimeoutMs: timeout.Milliseconds()}
	if err := ann.Announce(ctx, entry); err != nil {
		h.t.Fatal(err)
	}
	return func() {
		if err := ann.Withdraw(ctx, name); err != nil {
			h.t.Fatal(err)
		}
	}
}

// streamMsgs is how many messages stream holds on filter.
func (h *harness) streamMsgs(stream, filter string) uint64 {
	h.t.Helper()
	s, err := h.ns.JS.Stream(context.Background(), stream)
	if err != nil {
		h.t.Fatal(err)
	}
	if filter == "" {
		info, err := s.Info(context.Background())
		if err != nil {
			h.t.Fatal(err)
		}
		return info.State.Msgs
	}
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(filter))
	if err != nil {
		h.t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// evtKinds is the kinds of the turn's records in AGENT_EVENTS, in order.
func evtKinds(t *testing.T, w *Worker, turn string) []string {
	t.Helper()
	recs, err := w.turnlog.ReadTurn(context.Background(), sk, turn, 0)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, r := range recs {
		kinds = append(kinds, r.Kind)
	}
	return kinds
}

// closingKinds is the kinds of the records the session's closing commits stand for.
func closingKinds(t *testing.T, w *Worker) []string {
	t.Helper()
	sid := events.NewSessionID(sk, 1)
	var kinds []string
	for r, err := range w.ctxlog.History(context.Background(), sid) {
		if err != nil {
			t.Fatal(err)
		}
		for _, cr := range store.ClosingRecords(sk, sid, r) {
			kinds = append(kinds, cr.Kind)
		}
	}
	return kinds
}

// A tool turn whose tool workers copy the step writes nothing to AGENT_EVENTS: the step rides
// on the request, then on the result, and the closing commit stands for the whole turn (its
// start included). With a tool worker of the earlier layout serving the tool, alone or next to
// a new one, the step goes to AGENT_EVENTS as before.
func TestToolTurnStepLayout(t *testing.T) {
	cases := []struct {
		name    string
		workers []bool // NoStepCopy of each tool worker
		carried bool
	}{
		{"new tool worker", []bool{false}, true},
		{"old tool worker", []bool{true}, false},
		{"old and new tool workers", []bool{false, true}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, nil, faux.WithResponses(
				faux.Response{Text: "checking", ToolCalls: []llm.Content{llm.ToolCall("c1", "echo", map[string]any{"text": "ping"})}},
				faux.Response{Text: "the tool said pong"},
			))
			echo := tools.MustNew("echo", "echoes", func(ctx context.Context, c tools.Call, a echoArgs) (tools.Result, error) {
				return tools.TextResult("pong:" + a.Text), nil
			}, tools.Idempotent())
			for i, old := range c.workers {
				h.startToolWorker(toolworker.Options{ID: fmt.Sprintf("tw%d", i), NoStepCopy: old}, echo)
			}
			w := h.worker("w1")
			testwait.Eventually(t, 0, func() error {
				_ = w.tools.Refresh(context.Background())
				e, _ := w.tools.Entry("echo")
				return testwait.Want(len(e.Workers) == len(c.workers), "echo served by %v", e.Workers)
			})
			h.send(sk, "m1", "use the tool")
			if got := h.replies(sk, 1); got[0] != "the tool said pong" {
				t.Fatalf("reply %q", got)
			}
			kinds, closing := evtKinds(t, w, turnID(1)), closingKinds(t, w)
			wantEvt, wantClosing := "[turn_started message_end]", "[message_end message_end turn_committed]"
			if c.carried {
				wantEvt, wantClosing = "[]", "[turn_started message_end message_end message_end turn_committed]"
			}
			if fmt.Sprint(kinds) != wantEvt || fmt.Sprint(closing) != wantClosing {
				t.Errorf("AGENT_EVENTS holds %v (want %s), the closing commit stands for %v (want %s)", kinds, wantEvt, closing, wantClosing)
			}
			// The result carries the step exactly when the turn did not record it.
			carried, err := w.turnlog.ReadCarried(context.Background(), w.calls, w.results, sk, turnID(1), time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if (len(carried) > 0) != c.carried {
				t.Errorf("TOOL_RESULTS carries %d records of the turn", len(carried))
			}
			tl, err := w.readTurn(context.Background(), sk, turnID(1))
			if err != nil {
				t.Fatal(err)
			}
			if !tl.committed || len(tl.messages) != 4 || tl.messages[1].ToolCalls()[0].ID != "c1" || tl.messages[3].TextContent() != "the tool said pong" {
				t.Errorf("resume would see committed=%v %d messages: %+v", tl.committed, len(tl.messages), tl.messages)
			}
			// Replay's view (store.ClosingRecords) still has the turn's start with its input.
			sid := events.NewSessionID(sk, 1)
			for r, err := range w.ctxlog.History(context.Background(), sid) {
				if err != nil {
					t.Fatal(err)
				}
				for _, cr := range store.ClosingRecords(sk, sid, r) {
					if s, ok := cr.Event.(*events.Event[events.TurnStarted]); ok {
						if len(s.Data.Input) != 1 || s.Data.Input[0].TextContent() != "use the tool" || s.Data.Model.ID != "demo-1" || s.Data.Worker != "w1" {
							t.Errorf("closing commit's turn_started: %+v", s.Data)
						}
					}
				}
			}
		})
	}
}

// The turn worker dies at each moment the step is stored only on its tool call: while the
// request is queued (no tool worker took it yet), while the tool runs, and after the result is
// stored (the model's next step in flight, before the commit). The next owner finds the step,
// asks the tool for the same call id, the tool runs once, the model is not asked for that step
// again, and one reply goes out. "old layout" is "running" with a tool worker of the earlier
// version: the step is in AGENT_EVENTS, and resumes from there as before.
func TestCarriedStepSurvivesKill(t *testing.T) {
	for _, name := range []string{"queued", "running", "stored", "old layout"} {
		at, oldLayout := name, name == "old layout"
		if oldLayout {
			at = "running"
		}
		t.Run(name, func(t *testing.T) {
			var firstSteps atomic.Int32
			nextStep := make(chan struct{})
			var nextOnce sync.Once
			stepping := make(chan struct{}, 4)
			h := newHarness(t, nil, faux.WithResponder(func(c *llm.Context) faux.Response {
				last := c.Messages[len(c.Messages)-1]
				if last.Role == llm.RoleUser {
					firstSteps.Add(1)
					return faux.Response{Text: "let me look", ToolCalls: []llm.Content{llm.ToolCall("c1", "slow", map[string]any{"text": "x"})}}
				}
				if at == "stored" {
					stepping <- struct{}{}
					<-nextStep
				}
				return faux.Response{Text: "done after " + last.TextContent()}
			}))
			t.Cleanup(func() { nextOnce.Do(func() { close(nextStep) }) })
			var mu sync.Mutex
			var ran []string
			started := make(chan struct{}, 4)
			release := make(chan struct{})
			slow := tools.MustNew("slow", "waits", func(ctx context.Context, c tools.Call, a echoArgs) (tools.Result, error) {
				mu.Lock()
				ran = append(ran, c.ID)
				mu.Unlock()
				started <- struct{}{}
				if at == "running" {
					<-release
				}
				return tools.TextResult("slow result"), nil
			})
			var withdraw func()
			if at == "queued" {
				withdraw = h.announceGhost("slow", time.Minute)
			} else {
				h.startToolWorker(toolworker.Options{NoStepCopy: oldLayout}, slow)
			}
			a := h.worker("wA")
			h.waitTools(a, 1)
			h.send(sk, "m1", "do the slow thing")
			wait := func(ch chan struct{}, what string) {
				select {
				case <-ch:
				case <-time.After(30 * time.Second):
					t.Fatal(what)
				}
			}
			switch at {
			case "queued":
				testwait.Eventually(t, 0, func() error {
					return testwait.Want(h.streamMsgs(events.StreamToolCalls, "") == 1, "the request is not queued yet")
				})
			case "running":
				wait(started, "tool never started")
			case "stored":
				wait(stepping, "the model's next step never started")
			}
			if kinds := evtKinds(t, a, turnID(1)); (len(kinds) == 0) == oldLayout {
				t.Fatalf("AGENT_EVENTS holds %v of the turn before the kill (old layout: %v)", kinds, oldLayout)
			}
			if at == "stored" {
				// Kill waits for the turn's goroutine, which is inside the model call: let the
				// call end once the worker is going away (what the loop produces then is not
				// recorded). Had it ended first, the turn would commit, and the checks below
				// hold all the same.
				killed := make(chan struct{})
				go func() { a.Kill(); close(killed) }()
				time.Sleep(time.Second)
				nextOnce.Do(func() { close(nextStep) })
				wait(killed, "Kill did not return")
			} else {
				a.Kill()
			}
			switch at {
			case "queued":
				withdraw()
				h.startToolWorker(toolworker.Options{}, slow)
			case "running":
				close(release)
			}
			b := h.worker("wB")
			h.waitTools(b, 1)
			got := h.replies(sk, 1)
			if got[0] != "done after slow result" {
				t.Fatalf("reply = %q", got)
			}
			waitClosed(t, b, sk)
			if out := h.outboundEvents(sk); len(out) != 1 {
				t.Errorf("%d replies, want exactly 1", len(out))
			}
			mu.Lock()
			defer mu.Unlock()
			if fmt.Sprint(ran) != "[t1-c1]" {
				t.Errorf("tool ran as %v, want once as [t1-c1]", ran)
			}
			if n := firstSteps.Load(); n != 1 {
				t.Errorf("the model was asked for the tool-asking step %d times, want 1", n)
			}
			// The resumed turn stored what it found in AGENT_EVENTS before going on.
			if kinds := evtKinds(t, b, turnID(1)); len(kinds) == 0 || kinds[0] != events.EvtKindTurnStarted {
				t.Errorf("AGENT_EVENTS after the resume: %v", kinds)
			}
		})
	}
}

// A step that calls two tools served by two tool workers: one call's result is stored, the
// other's tool still runs, when the turn worker dies. The next owner finds the step on either,
// and neither tool runs again.
func TestCarriedMultiCallStepOnTwoToolWorkers(t *testing.T) {
	var firstSteps atomic.Int32
	h := newHarness(t, nil, faux.WithResponder(func(c *llm.Context) faux.Response {
		last := c.Messages[len(c.Messages)-1]
		if last.Role == llm.RoleUser {
			firstSteps.Add(1)
			return faux.Response{ToolCalls: []llm.Content{
				llm.ToolCall("c1", "quick", map[string]any{"text": "a"}),
				llm.ToolCall("c2", "slow", map[string]any{"text": "b"}),
			}}
		}
		var results []string
		for _, m := range c.Messages {
			if m.Role == llm.RoleToolResult {
				results = append(results, m.TextContent())
			}
		}
		return faux.Response{Text: "got " + strings.Join(results, ",")}
	}))
	var mu sync.Mutex
	ran := map[string]int{}
	started := make(chan struct{}, 4)
	release := make(chan struct{})
	quick := tools.MustNew("quick", "answers", func(ctx context.Context, c tools.Call, a echoArgs) (tools.Result, error) {
		mu.Lock()
		ran[c.ID]++
		mu.Unlock()
		return tools.TextResult("quick:" + a.Text), nil
	})
	slow := tools.MustNew("slow", "waits", func(ctx context.Context, c tools.Call, a echoArgs) (tools.Result, error) {
		mu.Lock()
		ran[c.ID]++
		mu.Unlock()
		started <- struct{}{}
		<-release
		return tools.TextResult("slow:" + a.Text), nil
	})
	h.startToolWorker(toolworker.Options{ID: "tw-quick"}, quick)
	h.startToolWorker(toolworker.Options{ID: "tw-slow"}, slow)
	a := h.worker("wA")
	h.waitTools(a, 2)
	h.send(sk, "m1", "use both")
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("slow tool never started")
	}
	testwait.Eventually(t, 0, func() error {
		return testwait.Want(h.streamMsgs(events.StreamToolResults, events.ToolResultSubject(sk)) == 1, "quick's result not stored yet")
	})
	a.Kill()
	close(release)
	b := h.worker("wB")
	h.waitTools(b, 2)
	got := h.replies(sk, 1)
	if got[0] != "got quick:a,slow:b" {
		t.Fatalf("reply = %q", got)
	}
	waitClosed(t, b, sk)
	mu.Lock()
	defer mu.Unlock()
	if ran["t1-c1"] != 1 || ran["t1-c2"] != 1 || len(ran) != 2 {
		t.Errorf("tools ran %v, want each call once", ran)
	}
	if n := firstSteps.Load(); n != 1 {
		t.Errorf("the model was asked for the tool-asking step %d times, want 1", n)
	}
	if out := h.outboundEvents(sk); len(out) != 1 {
		t.Errorf("%d replies, want 1", len(out))
	}
}

// A request that carries the step and that no tool worker serves is withdrawn after its
// deadline: the turn first writes the step to AGENT_EVENTS (the withdrawal deletes the only
// copy), then tells the model, and its commit does not stand for the start a second time.
func TestWithdrawnRequestStoresTheStepFirst(t *testing.T) {
	h := newHarness(t, nil, faux.WithResponder(func(c *llm.Context) faux.Response {
		last := c.Messages[len(c.Messages)-1]
		if last.Role == llm.RoleUser {
			return faux.Response{ToolCalls: []llm.Content{llm.ToolCall("c1", "gone", map[string]any{"text": "x"})}}
		}
		return faux.Response{Text: "tool said: " + last.TextContent()}
	}))
	withdraw := h.announceGhost("gone", time.Second)
	w := h.worker("w1")
	h.waitTools(w, 1)
	h.send(sk, "m1", "use the tool")
	testwait.Eventually(t, 0, func() error {
		return testwait.Want(h.streamMsgs(events.StreamToolCalls, "") == 1, "the request is not queued yet")
	})
	withdraw() // nobody serves it any more: after its deadline the turn withdraws it
	got := h.replies(sk, 1)
	if !strings.Contains(got[0], "was not run") {
		t.Fatalf("reply %q", got)
	}
	if n := h.streamMsgs(events.StreamToolCalls, ""); n != 0 {
		t.Errorf("TOOL_CALLS still holds %d requests", n)
	}
	if kinds := evtKinds(t, w, turnID(1)); fmt.Sprint(kinds) != "[turn_started message_end]" {
		t.Errorf("AGENT_EVENTS holds %v, want the step recorded before the withdrawal", kinds)
	}
	if closing := closingKinds(t, w); slices.Contains(closing, events.EvtKindTurnStarted) || fmt.Sprint(closing) != "[message_end message_end turn_committed]" {
		t.Errorf("the closing commit stands for %v", closing)
	}
}

// A turn whose step rode on its tool call and that ends without its usual commit (cancelled
// while the tool runs) still has its start and that step in the turn log exactly once: in
// AGENT_EVENTS (spillTail records what was carried) or on its closing commit.
func TestCancelledTurnKeepsItsCarriedStart(t *testing.T) {
	h := newHarness(t, nil, faux.WithResponder(func(c *llm.Context) faux.Response {
		last := c.Messages[len(c.Messages)-1]
		if last.Role == llm.RoleUser {
			return faux.Response{Text: "looking", ToolCalls: []llm.Content{llm.ToolCall("c1", "slow", map[string]any{"text": "x"})}}
		}
		return faux.Response{Text: "after " + last.TextContent()}
	}))
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	h.startToolWorker(toolworker.Options{}, tools.MustNew("slow", "waits", func(ctx context.Context, c tools.Call, a echoArgs) (tools.Result, error) {
		started <- struct{}{}
		<-release
		return tools.TextResult("late"), nil
	}))
	t.Cleanup(func() { close(release) }) // before the tool worker stops (cleanups run last first)
	w := h.worker("w1")
	h.waitTools(w, 1)
	h.send(sk, "m1", "do the slow thing")
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("tool never started")
	}
	h.publish(sk, events.New(events.Abort{Reason: "stop", Sender: events.Sender{ID: "u1", Roles: []string{"user"}}}))
	h.replies(sk, 1)
	waitClosed(t, w, sk)
	var starts, steps int
	count := func(recs []store.TurnRecord) {
		for _, r := range recs {
			switch e := r.Event.(type) {
			case *events.Event[events.TurnStarted]:
				starts++
			case *events.Event[events.MessageEnd]:
				if len(e.Data.Message.ToolCalls()) > 0 {
					steps++
				}
			}
		}
	}
	recs, err := w.turnlog.ReadTurn(context.Background(), sk, turnID(1), 0)
	if err != nil {
		t.Fatal(err)
	}
	count(recs)
	sid := events.NewSessionID(sk, 1)
	for r, err := range w.ctxlog.History(context.Background(), sid) {
		if err != nil {
			t.Fatal(err)
		}
		count(store.ClosingRecords(sk, sid, r))
	}
	if starts != 1 || steps != 1 {
		t.Errorf("the cancelled turn's log holds %d turn_started and %d tool-asking steps, want 1 each (AGENT_EVENTS %v, closing %v)",
			starts, steps, evtKinds(t, w, turnID(1)), closingKinds(t, w))
	}
}
