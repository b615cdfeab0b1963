package turn

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/faux"
	"github.com/agentbus/agentbus/pkg/loop"
	"github.com/agentbus/agentbus/pkg/toolbus"
	"github.com/agentbus/agentbus/pkg/tools"
	"github.com/agentbus/agentbus/pkg/toolworker"
)

// A tool worker dies while it runs a call, and the call comes back to another tool worker only
// after the call's deadline (its AckWait is longer than the tool's 1s timeout). Until then
// the call's fate is unknown: the turn must not tell the model "tool call timed out", but wait
// for the result the second tool worker records ("not run: deadline passed").
func TestToolCallOfUnknownFateIsAwaited(t *testing.T) {
	h := newHarness(t, nil, faux.WithResponder(func(c *llm.Context) faux.Response {
		last := c.Messages[len(c.Messages)-1]
		if last.Role == llm.RoleToolResult {
			return faux.Response{Text: "tool said: " + last.TextContent()}
		}
		return faux.Response{ToolCalls: []llm.Content{llm.ToolCall("c1", "hang", map[string]any{"text": "x"})}}
	}))
	started := make(chan struct{}, 4)
	hang := tools.MustNew("hang", "runs until cancelled", func(ctx context.Context, _ tools.Call, _ echoArgs) (tools.Result, error) {
		started <- struct{}{}
		<-ctx.Done()
		return tools.TextResult("cancelled"), nil
	}, tools.Idempotent())
	reg, err := tools.NewRegistry(hang)
	if err != nil {
		t.Fatal(err)
	}
	twOpts := toolworker.Options{NC: h.ns.NC, JS: h.ns.JS, Registry: reg, PollWait: 200 * time.Millisecond,
		AckWait: 4 * time.Second, DefaultTimeout: time.Second}
	first, err := toolworker.Run(context.Background(), twOpts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = first.Stop(context.Background()) })

	o := h.options("w1")
	o.LeaseTTL, o.AckWait = 2*time.Second, 2*time.Second
	w, err := New(context.Background(), h.ns.NC, h.ns.JS, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	h.waitTools(w, 1)

	h.send(sk, "m1", "use the tool")
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the tool never started")
	}
	first.Kill() // the call stays unacked until its AckWait, past the turn's 1s deadline
	second, err := toolworker.Run(context.Background(), twOpts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = second.Stop(context.Background()) })

	got := h.replies(sk, 1)
	if strings.Contains(got[0], ErrToolTimeout.Error()) || !strings.Contains(got[0], "deadline passed") {
		t.Fatalf("reply %q: want the second tool worker's answer (not run: deadline passed), not %q", got[0], ErrToolTimeout)
	}
}

// A result that goes past the turn's subscription (published while the connection was
// reconnecting to another NATS node) is found in TOOL_RESULTS within seconds, not at the
// call's deadline: here the executor's results reach no subscription at all, the tool's
// timeout is a minute, and the wait is bounded by 20 s.
func TestToolResultMissedOnTheSubscriptionIsFound(t *testing.T) {
	h := newHarness(t, nil)
	echo := tools.MustNew("echo", "echoes", func(_ context.Context, _ tools.Call, a echoArgs) (tools.Result, error) {
		return tools.TextResult("echo " + a.Text), nil
	}, tools.Idempotent())
	reg, err := tools.NewRegistry(echo)
	if err != nil {
		t.Fatal(err)
	}
	tw, err := toolworker.Run(context.Background(), toolworker.Options{NC: h.ns.NC, JS: h.ns.JS, Registry: reg,
		PollWait: 200 * time.Millisecond, DefaultTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tw.Stop(context.Background()) })
	o := h.options("w1")
	o.ToolTimeout = time.Minute
	w, err := New(context.Background(), h.ns.NC, h.ns.JS, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	h.waitTools(w, 1)

	// subscribed: the executor believes a session subscription routes its results, and none does.
	x := w.toolc.Executor(toolbus.Call{Subscribed: true, Fresh: true, Scope: toolbus.Scope{SK: sk, Turn: "t-missed", SID: events.NewSessionID(sk, 1).String(),
		Caller: events.Caller{Platform: sk.Platform, Bot: sk.Bot, Scope: sk.Scope, SenderID: "u1"}}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	res, err := x.Execute(ctx, loop.ToolCallRequest{ID: "c1", Name: "echo", Args: map[string]any{"text": "hi"}})
	if err != nil {
		t.Fatalf("Execute: %v (after %s)", err, time.Since(start).Round(time.Millisecond))
	}
	if res.IsError || len(res.Content) == 0 || res.Content[0].Text != "echo hi" {
		t.Fatalf("result = %+v", res)
	}
	t.Logf("found %s after the request", time.Since(start).Round(time.Millisecond))
}
