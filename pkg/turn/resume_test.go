package turn

import (
	"context"
	"fmt"
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
	"github.com/agentbus/agentbus/pkg/tasks"
	"github.com/agentbus/agentbus/pkg/tools"
	"github.com/agentbus/agentbus/pkg/toolworker"
)

// startTools runs a real tool worker serving ts.
func (h *harness) startTools(ts ...tools.Tool) {
	h.t.Helper()
	reg, err := tools.NewRegistry(ts...)
	if err != nil {
		h.t.Fatal(err)
	}
	tw, err := toolworker.Run(context.Background(), toolworker.Options{NC: h.ns.NC, JS: h.ns.JS, Registry: reg, PollWait: 200 * time.Millisecond})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = tw.Stop(context.Background()) })
}

func (h *harness) waitTools(w *Worker, n int) {
	h.t.Helper()
	testwait.Eventually(h.t, 0, func() error {
		_ = w.tools.Refresh(context.Background())
		return testwait.Want(w.tools.Count() >= n, "tool catalog has %d tools, want %d", w.tools.Count(), n)
	})
}

type echoArgs struct {
	Text string `json:"text"`
}

func TestToolTurn(t *testing.T) {
	h := newHarness(t, nil, faux.WithResponses(
		faux.Response{Text: "checking", ToolCalls: []llm.Content{llm.ToolCall("c1", "echo", map[string]any{"text": "ping"})}},
		faux.Response{Text: "the tool said pong"},
	))
	var runs atomic.Int32
	h.startTools(tools.MustNew("echo", "echoes", func(ctx context.Context, c tools.Call, a echoArgs) (tools.Result, error) {
		runs.Add(1)
		return tools.TextResult("pong:" + a.Text), nil
	}, tools.Idempotent()))
	w := h.worker("w1")
	h.waitTools(w, 1)
	h.send(sk, "m1", "use the tool")
	got := h.replies(sk, 1)
	if got[0] != "the tool said pong" || runs.Load() != 1 {
		t.Fatalf("reply %q, tool runs %d", got, runs.Load())
	}
	// No append to AGENT_EVENTS: the assistant message that asked for the tool rode on the
	// tool call request and its result (TestToolTurnStepLayout). The context commit closes
	// the turn and carries its start and every message from that step on. Read back, the
	// turn has every message.
	ctx := context.Background()
	info, err := w.evts.Info(ctx, jetstream.WithSubjectFilter(events.AgentEvtSessionFilter(sk)))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Errorf("AGENT_EVENTS holds %d records of the turn, want 0: %v", info.State.Msgs, info.State.Subjects)
	}
	if closing := closingKinds(t, w); fmt.Sprint(closing) != "[turn_started message_end message_end message_end turn_committed]" {
		t.Errorf("the closing commit stands for %v, want the start, the step, the tool result, the answer and the commit", closing)
	}
	tl, err := w.readTurn(ctx, sk, turnID(1))
	if err != nil {
		t.Fatal(err)
	}
	if !tl.committed || !tl.closes || len(tl.messages) != 4 || tl.messages[2].Role != llm.RoleToolResult || tl.messages[3].TextContent() != "the tool said pong" {
		t.Errorf("resume would see committed=%v closes=%v %d messages: %+v", tl.committed, tl.closes, len(tl.messages), tl.messages)
	}
	// A turn nobody started before promises egress a first publication.
	if out := h.outboundEvents(sk); len(out) != 1 || !out[0].Fresh {
		t.Errorf("reply of a fresh turn: %+v", out)
	}
}

// Models reuse call ids from one step to the next ("call_0" twice): each call still runs with
// its own arguments and gets its own result, because bus ids count the reuse.
func TestReusedToolCallIDs(t *testing.T) {
	h := newHarness(t, nil, faux.WithResponses(
		faux.Response{ToolCalls: []llm.Content{llm.ToolCall("call_0", "echo", map[string]any{"text": "a"})}},
		faux.Response{ToolCalls: []llm.Content{llm.ToolCall("call_0", "echo", map[string]any{"text": "b"})}},
		faux.Response{Text: "both done"},
	))
	var mu sync.Mutex
	var ran []string
	h.startTools(tools.MustNew("echo", "echoes", func(ctx context.Context, c tools.Call, a echoArgs) (tools.Result, error) {
		mu.Lock()
		ran = append(ran, a.Text)
		mu.Unlock()
		return tools.TextResult("pong:" + a.Text), nil
	}, tools.Idempotent()))
	w := h.worker("w1")
	h.waitTools(w, 1)
	h.send(sk, "m1", "twice")
	if got := h.replies(sk, 1); got[0] != "both done" {
		t.Fatalf("reply %q", got)
	}
	tl, err := w.readTurn(context.Background(), sk, turnID(1))
	if err != nil {
		t.Fatal(err)
	}
	var results []string
	for _, m := range tl.messages {
		if m.Role == llm.RoleToolResult {
			results = append(results, m.TextContent())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(ran) != "[a b]" || fmt.Sprint(results) != "[pong:a pong:b]" {
		t.Fatalf("tool ran %v, results %v; want [a b] and [pong:a pong:b]", ran, results)
	}
}

// A worker dies after its tool call was published: another worker takes the session over and
// finishes the turn. The tool runs once, the LLM step before it is not repeated, and exactly
// one reply goes out.
func TestCrashAfterToolCallResumesOnOtherWorker(t *testing.T) {
	h := newHarness(t, nil, faux.WithResponses(
		faux.Response{Text: "let me look", ToolCalls: []llm.Content{llm.ToolCall("c1", "slow", map[string]any{"text": "x"})}},
		faux.Response{Text: "done after the tool"},
	))
	var runs atomic.Int32
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	h.startTools(tools.MustNew("slow", "waits", func(ctx context.Context, c tools.Call, a echoArgs) (tools.Result, error) {
		runs.Add(1)
		started <- struct{}{}
		<-release
		return tools.TextResult("slow result"), nil
	}))
	a := h.worker("wA")
	h.waitTools(a, 1)
	h.send(sk, "m1", "do the slow thing")
	select {
	case <-started:
	case <-time.After(15 * time.Second):
		t.Fatal("tool never started")
	}
	a.Kill() // the owner dies while waiting for the result
	close(release)

	b := h.worker("wB")
	h.waitTools(b, 1)
	got := h.replies(sk, 1)
	if got[0] != "done after the tool" {
		t.Fatalf("reply = %q", got)
	}
	time.Sleep(500 * time.Millisecond) // a duplicate would show up now
	out := h.outboundEvents(sk)
	if len(out) != 1 {
		t.Errorf("%d replies, want exactly 1", len(out))
	} else if out[0].Fresh {
		t.Error("a resumed turn's reply is marked fresh; egress would skip its delivered check")
	}
	if runs.Load() != 1 {
		t.Errorf("tool ran %d times, want 1", runs.Load())
	}
	if calls := h.faux.Calls(); calls != 2 {
		t.Errorf("model called %d times, want 2 (the step before the tool is not repeated)", calls)
	}
	waitClosed(t, b, sk)
	if !strings.Contains(got[0], "done") {
		t.Fatal(got)
	}
}

func TestPreExecutableToolGoesIntoPrompt(t *testing.T) {
	var prompt atomic.Value
	h := newHarness(t, nil, faux.WithResponder(func(c *llm.Context) faux.Response {
		prompt.Store(c.SystemPrompt)
		return faux.Response{Text: "ok"}
	}))
	h.startTools(tools.MustRaw("weather_now", "current weather", nil, func(ctx context.Context, c tools.Call) (tools.Result, error) {
		return tools.TextResult("sunny, 21°C"), nil
	}, tools.PreExecutable(), tools.Idempotent()))
	w := h.worker("w1")
	h.waitTools(w, 1)
	h.send(sk, "m1", "hello")
	h.replies(sk, 1)
	if p, _ := prompt.Load().(string); !strings.Contains(p, "weather_now: sunny, 21°C") {
		t.Fatalf("system prompt lacks the pre-executed result:\n%s", p)
	}
}

// spawn_task hands work to a subagent; its result comes back into the chat as a new turn, and
// the subagent's tools run on tool workers like the main conversation's.
func TestSubagentResultReturnsToChat(t *testing.T) {
	h := newHarness(t, nil, faux.WithResponder(func(c *llm.Context) faux.Response {
		last := c.Messages[len(c.Messages)-1]
		text := last.TextContent()
		switch {
		case strings.Contains(c.SystemPrompt, "background worker") && last.Role == llm.RoleUser:
			return faux.Response{ToolCalls: []llm.Content{llm.ToolCall("s1", "echo", map[string]any{"text": "sub"})}}
		case strings.Contains(c.SystemPrompt, "background worker"):
			return faux.Response{Text: "subagent report: " + text}
		case last.Role == llm.RoleUser && strings.Contains(text, "background task"):
			return faux.Response{Text: "the background task finished: " + text}
		case last.Role == llm.RoleUser:
			return faux.Response{ToolCalls: []llm.Content{llm.ToolCall("c1", "spawn_task", map[string]any{"task": "investigate"})}}
		}
		return faux.Response{Text: "started it"}
	}))
	var runs atomic.Int32
	h.startTools(
		tools.MustNew("echo", "echoes", func(ctx context.Context, c tools.Call, a echoArgs) (tools.Result, error) {
			runs.Add(1)
			return tools.TextResult("pong:" + a.Text), nil
		}, tools.Idempotent()),
		tasks.SpawnTaskTool(h.ns.JS, nil),
	)
	h.base.Tasks.SubagentTools = []string{"echo"}
	w := h.worker("w1")
	h.waitTools(w, 2)
	h.send(sk, "m1", "please research this in the background")
	got := h.replies(sk, 2)
	if got[0] != "started it" || !strings.Contains(got[1], "subagent report: pong:sub") {
		t.Fatalf("replies = %q", got)
	}
	if runs.Load() != 1 {
		t.Errorf("subagent tool ran %d times", runs.Load())
	}
}

// A steer queued into a running turn survives the owner's crash: the next owner resumes the
// turn and the model still gets the steering message, once.
func TestSteerSurvivesCrash(t *testing.T) {
	var sawSteer atomic.Int32
	h := newHarness(t, nil, faux.WithResponder(func(c *llm.Context) faux.Response {
		n := 0
		for _, m := range c.Messages {
			if m.Role == llm.RoleUser && strings.Contains(m.TextContent(), "be brief") {
				n++
			}
		}
		if n > 0 {
			sawSteer.Store(int32(n))
			return faux.Response{Text: "brief answer"}
		}
		if c.Messages[len(c.Messages)-1].Role == llm.RoleUser {
			return faux.Response{ToolCalls: []llm.Content{llm.ToolCall("c1", "slow", map[string]any{"text": "x"})}}
		}
		return faux.Response{Text: "long answer without the steer"}
	}))
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	h.startTools(tools.MustNew("slow", "waits", func(ctx context.Context, c tools.Call, a echoArgs) (tools.Result, error) {
		started <- struct{}{}
		<-release
		return tools.TextResult("slow result"), nil
	}))
	a := h.worker("wA")
	h.waitTools(a, 1)
	h.send(sk, "m1", "explain everything")
	<-started
	h.publish(sk, events.New(events.Steer{Text: "be brief", Sender: events.Sender{ID: "u1", Roles: []string{"master"}}}))
	testwait.Eventually(t, 0, func() error {
		s, err := a.sessions.Get(context.Background(), sk)
		return testwait.Want(err == nil && len(s.OpenTurns) == 1 && len(s.OpenTurns[0].Steers) == 1, "not one open turn with one steer yet (err %v)", err)
	})
	a.Kill()
	close(release)
	b := h.worker("wB")
	h.waitTools(b, 1)
	got := h.replies(sk, 1)
	if got[0] != "brief answer" || sawSteer.Load() != 1 {
		t.Fatalf("reply %q, steer seen %d times in the context", got, sawSteer.Load())
	}
}

// waitClosed waits until the session record lists no open turn: a finished turn is removed
// with the record's next write, at the latest closeDelay after it finished.
func waitClosed(t *testing.T, w *Worker, k events.SessionKey) {
	t.Helper()
	testwait.Eventually(t, 0, func() error {
		sess, err := w.sessions.Get(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		return testwait.Want(len(sess.OpenTurns) == 0, "open turns left: %+v", sess.OpenTurns)
	})
}

// A turn records its start with its first record, and writes no session record. An owner that
// dies during the turn's first model call leaves nothing of the turn: the next owner finds its
// inbox event past the durable cursor, nothing in the turn log, and starts it again; it
// answers once.
func TestCrashBeforeFirstRecordRestartsTurn(t *testing.T) {
	var calls atomic.Int32
	inCall := make(chan struct{}, 1)
	release := make(chan struct{})
	h := newHarness(t, nil, faux.WithResponder(func(c *llm.Context) faux.Response {
		if calls.Add(1) == 1 {
			inCall <- struct{}{}
			<-release // the first owner dies meanwhile; its answer is never recorded
		}
		return faux.Response{Text: "the answer"}
	}))
	a := h.worker("wA")
	h.send(sk, "m1", "a question")
	select {
	case <-inCall:
	case <-time.After(15 * time.Second):
		t.Fatal("model never called")
	}
	// Kill waits for the turn's goroutine, which is inside the model call: let the call end
	// once the worker is going away (what the loop produces then is not recorded).
	killed := make(chan struct{})
	go func() { a.Kill(); close(killed) }()
	time.Sleep(time.Second) // Kill is under way (it waits for the turn) before the model call ends
	close(release)
	select {
	case <-killed:
	case <-time.After(30 * time.Second):
		t.Fatal("Kill did not return")
	}
	ctx := context.Background()
	if info, err := a.evts.Info(ctx, jetstream.WithSubjectFilter(events.AgentEvtSessionFilter(sk))); err != nil || info.State.Msgs != 0 {
		t.Fatalf("AGENT_EVENTS holds %v records of a turn whose first model step never ended (%v), want 0", info.State.Msgs, err)
	}

	b := h.worker("wB")
	got := h.replies(sk, 1)
	if got[0] != "the answer" {
		t.Fatalf("reply = %q", got)
	}
	time.Sleep(500 * time.Millisecond) // a duplicate would show up now
	out := h.outboundEvents(sk)
	if len(out) != 1 {
		t.Errorf("%d replies, want exactly 1", len(out))
	}
	tl, err := b.readTurn(ctx, sk, turnID(1))
	if err != nil {
		t.Fatal(err)
	}
	if tl.started == nil || !tl.committed || len(tl.messages) != 2 {
		t.Errorf("restarted turn reads back as started=%v committed=%v %d messages", tl.started != nil, tl.committed, len(tl.messages))
	}
	waitClosed(t, b, sk)
}

// The owner died after its context commit landed but before the turn_committed record and the
// reply: the commit carries the inbox cursor, so the next owner finds the turn from it and
// finishes it from the committed messages, without asking the model again or committing twice.
func TestCommitWithoutRecordIsFinishedFromTheCommit(t *testing.T) {
	h := newHarness(t, nil, faux.WithResponder(faux.Echo))
	ctx := context.Background()
	h.send(sk, "m1", "a question")
	trigger := h.lastInboxSeq(t, sk)
	turn := turnID(trigger)
	cl, err := store.NewContextLog(ctx, h.ns.JS, store.ContextBounds{})
	if err != nil {
		t.Fatal(err)
	}
	sid := events.NewSessionID(sk, 1)
	answer := llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.Text("the committed answer")}, StopReason: llm.StopReasonStop, Timestamp: time.Now().UnixMilli()}
	if _, err := cl.AppendMessages(ctx, sid, 0, []llm.Message{llm.UserText("a question", time.Now().UnixMilli()), answer},
		store.WithMsgID(turn+":commit"), store.WithTurn(turn), store.WithInboxSeq(trigger)); err != nil {
		t.Fatal(err)
	}

	w := h.worker("wB")
	got := h.replies(sk, 1)
	if got[0] != "the committed answer" {
		t.Fatalf("reply = %q", got)
	}
	if n := h.faux.Calls(); n != 0 {
		t.Errorf("model called %d times, want 0 (the turn was committed)", n)
	}
	// The turn_committed record follows the reply's acks (publishReply): wait for it.
	testwait.Eventually(t, 0, func() error {
		tl, err := w.readTurn(ctx, sk, turn)
		if err != nil {
			t.Fatal(err)
		}
		return testwait.Want(tl.committed, "the turn log has no commit yet")
	})
	loaded, err := w.ctxlog.LoadContext(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	if len(loaded.Messages) != 2 {
		t.Errorf("context has %d messages, want 2 (committed once)", len(loaded.Messages))
	}
	waitClosed(t, w, sk)
}

// A turn started from its inbox event is not in the session record, but any record write while
// it runs lists it together with the cursor: here a listened message moves the record's cursor
// past the running turn, the owner dies, and the next owner must still answer the turn.
func TestRecordWriteListsTheRunningTurn(t *testing.T) {
	var calls atomic.Int32
	inCall := make(chan struct{}, 1)
	release := make(chan struct{})
	h := newHarness(t, nil, faux.WithResponder(func(c *llm.Context) faux.Response {
		if calls.Add(1) == 1 {
			inCall <- struct{}{}
			<-release
		}
		return faux.Response{Text: "the answer"}
	}))
	a := h.worker("wA")
	h.send(sk, "m1", "a question")
	select {
	case <-inCall:
	case <-time.After(15 * time.Second):
		t.Fatal("model never called")
	}
	heard := events.IMMessage{Platform: sk.Platform, Bot: sk.Bot, MessageID: "m2", Scene: events.Scene{Type: sk.Scope, ID: sk.Scene},
		Sender: events.Sender{ID: "u2", Name: "Bo"}, Content: events.Segments{events.TextSeg("just saying")}, Time: time.Now().UnixMilli()}
	h.publish(sk, events.New(events.Listen{Message: heard}, events.WithSession(sk.String())))
	ctx := context.Background()
	testwait.Eventually(t, 0, func() error {
		sess, err := a.sessions.Get(ctx, sk)
		if err != nil {
			t.Fatal(err)
		}
		if sess.InboxCursor < 2 {
			return fmt.Errorf("the listened message has not moved the record's cursor: %+v", sess)
		}
		if ot := sess.OpenTurn(turnID(1)); ot == nil || ot.State != "running" {
			t.Fatalf("record cursor %d passed turn %s, which it does not list as running: %+v", sess.InboxCursor, turnID(1), sess.OpenTurns)
		}
		return nil
	})
	killed := make(chan struct{})
	go func() { a.Kill(); close(killed) }()
	time.Sleep(time.Second) // Kill is under way (it waits for the turn) before the model call ends
	close(release)
	<-killed

	b := h.worker("wB")
	got := h.replies(sk, 1)
	if got[0] != "the answer" {
		t.Fatalf("reply = %q", got)
	}
	time.Sleep(500 * time.Millisecond) // a duplicate would show up now
	if out := h.outboundEvents(sk); len(out) != 1 {
		t.Errorf("%d replies, want exactly 1", len(out))
	}
	waitClosed(t, b, sk)
}
