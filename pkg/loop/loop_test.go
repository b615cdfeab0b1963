package loop

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/llm"
)

func TestRunEventOrderPlainPrompt(t *testing.T) {
	s := &script{replies: []reply{{thinking: "hmm", text: "hello there"}}}
	rec := &recorder{}
	out := mustRun(t, t.Context(), []llm.Message{userMsg("hi")}, &AgentContext{SystemPrompt: "sys"}, newConfig(s), rec)

	want := "agent_start turn_start message_start(user) message_end(user) " +
		"message_start(assistant) message_update* message_end(assistant) turn_end agent_end"
	if got := rec.trace(); got != want {
		t.Fatalf("events:\n got %s\nwant %s", got, want)
	}
	if roles(out) != "user,assistant" || out[1].TextContent() != "hello there" {
		t.Fatalf("messages: %s %q", roles(out), out[1].TextContent())
	}
	// message_update passes the provider's events through, in order.
	var types []string
	for _, ev := range rec.ofType(EventMessageUpdate) {
		types = append(types, string(ev.Update.Type))
	}
	if got := strings.Join(types, ","); got != "thinking_start,thinking_delta,thinking_end,text_start,text_delta,text_delta,text_end" {
		t.Fatalf("updates: %s", got)
	}
	end := rec.ofType(EventAgentEnd)[0]
	if roles(end.Messages) != "user,assistant" {
		t.Fatalf("agent_end messages: %s", roles(end.Messages))
	}
	if s.context(0).SystemPrompt != "sys" {
		t.Fatalf("system prompt not passed")
	}
}

func TestRunDoesNotModifyCallerContext(t *testing.T) {
	s := &script{replies: []reply{{text: "a"}}}
	hist := make([]llm.Message, 1, 10) // spare capacity the loop must not write into
	hist[0] = userMsg("old")
	ac := &AgentContext{Messages: hist}
	mustRun(t, t.Context(), []llm.Message{userMsg("new")}, ac, newConfig(s), &recorder{})
	if len(ac.Messages) != 1 || hist[:2][1].Role != "" {
		t.Fatalf("caller's messages were modified")
	}
}

func TestConvertToLLM(t *testing.T) {
	custom := llm.Message{Role: "notification", Custom: json.RawMessage(`{"x":1}`)}
	tests := []struct {
		name    string
		convert func([]llm.Message) []llm.Message
		want    string // roles the provider saw
	}{
		{"default drops custom kinds", nil, "user,user"},
		{"custom translates them", func(ms []llm.Message) []llm.Message {
			out := make([]llm.Message, 0, len(ms))
			for _, m := range ms {
				if m.Role == "notification" {
					m = userMsg("[notification] " + string(m.Custom))
				}
				out = append(out, m)
			}
			return out
		}, "user,user,user"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &script{replies: []reply{{text: "ok"}}}
			cfg := newConfig(s)
			cfg.ConvertToLLM = tt.convert
			out := mustRun(t, t.Context(), []llm.Message{custom, userMsg("q")}, &AgentContext{Messages: []llm.Message{userMsg("before")}}, cfg, &recorder{})
			if got := roles(s.context(0).Messages); got != tt.want {
				t.Fatalf("provider saw %s, want %s", got, tt.want)
			}
			if roles(out) != "notification,user,assistant" {
				t.Fatalf("custom message not kept in the run's messages: %s", roles(out))
			}
		})
	}
}

func TestTransformContextBeforeConvertAndNotPersisted(t *testing.T) {
	s := &script{replies: []reply{
		{calls: []llm.Content{call("c1", "echo", map[string]any{"text": "x"})}},
		{text: "done"},
	}}
	cfg := newConfig(s)
	var transformIn []int
	cfg.TransformContext = func(_ context.Context, ms []llm.Message) ([]llm.Message, error) {
		transformIn = append(transformIn, len(ms))
		for _, m := range ms {
			if m.TextContent() == "injected" || m.Role == "memo" {
				t.Errorf("a transform result was persisted into the context")
			}
		}
		// A custom kind that ConvertToLLM must then drop, and a user message it keeps.
		return append(ms, llm.Message{Role: "memo"}, userMsg("injected")), nil
	}
	var convertSawMemo bool
	cfg.ConvertToLLM = func(ms []llm.Message) []llm.Message {
		for _, m := range ms {
			if m.Role == "memo" {
				convertSawMemo = true
			}
		}
		return DefaultConvertToLLM(ms)
	}
	out := mustRun(t, t.Context(), []llm.Message{userMsg("q")}, &AgentContext{Tools: []AgentTool{echoTool()}}, cfg, &recorder{})
	if !convertSawMemo {
		t.Fatal("ConvertToLLM did not see TransformContext's output")
	}
	if got := roles(s.context(0).Messages); got != "user,user" {
		t.Fatalf("provider saw %s", got)
	}
	if last := s.context(1).Messages; last[len(last)-1].TextContent() != "injected" || roles(last) != "user,assistant,toolResult,user" {
		t.Fatalf("second call saw %s", roles(last))
	}
	if len(transformIn) != 2 || transformIn[0] != 1 || transformIn[1] != 3 {
		t.Fatalf("transform inputs: %v", transformIn)
	}
	if roles(out) != "user,assistant,toolResult,assistant" {
		t.Fatalf("run messages: %s", roles(out))
	}
}

func TestTransformContextError(t *testing.T) {
	s := &script{}
	cfg := newConfig(s)
	cfg.TransformContext = func(context.Context, []llm.Message) ([]llm.Message, error) {
		return nil, errors.New("compaction failed")
	}
	rec := &recorder{}
	out := mustRun(t, t.Context(), []llm.Message{userMsg("q")}, &AgentContext{}, cfg, rec)
	last := out[len(out)-1]
	if last.StopReason != llm.StopReasonError || !strings.Contains(last.ErrorMessage, "compaction failed") || s.calls() != 0 {
		t.Fatalf("got %+v after %d calls", last, s.calls())
	}
	if !strings.HasSuffix(rec.trace(), "message_start(assistant) message_end(assistant) turn_end agent_end") {
		t.Fatalf("events: %s", rec.trace())
	}
}

func TestToolRoundTrip(t *testing.T) {
	s := &script{replies: []reply{
		{text: "let me echo", calls: []llm.Content{call("c1", "echo", map[string]any{"text": "pong"})}},
		{text: "it said pong"},
	}}
	cfg := newConfig(s)
	var keyAsked string
	cfg.GetAPIKey = func(p string) string { keyAsked = p; return "k" }
	rec := &recorder{}
	out := mustRun(t, t.Context(), []llm.Message{userMsg("ping")}, &AgentContext{Tools: []AgentTool{echoTool()}}, cfg, rec)

	want := "agent_start turn_start message_start(user) message_end(user) " +
		"message_start(assistant) message_update* message_end(assistant) " +
		"tool_execution_start(c1) tool_execution_end(c1) message_start(toolResult) message_end(toolResult) turn_end " +
		"turn_start message_start(assistant) message_update* message_end(assistant) turn_end agent_end"
	if got := rec.trace(); got != want {
		t.Fatalf("events:\n got %s\nwant %s", got, want)
	}
	if roles(out) != "user,assistant,toolResult,assistant" {
		t.Fatalf("messages: %s", roles(out))
	}
	tr := out[2]
	if tr.ToolCallID != "c1" || tr.ToolName != "echo" || tr.IsError || tr.TextContent() != "pong" || tr.Timestamp == 0 {
		t.Fatalf("tool result: %+v", tr)
	}
	if got := roles(s.context(1).Messages); got != "user,assistant,toolResult" {
		t.Fatalf("second call saw %s", got)
	}
	if len(s.context(0).Tools) != 1 || s.context(0).Tools[0].Name != "echo" {
		t.Fatalf("tools not passed to the model")
	}
	turnEnds := rec.ofType(EventTurnEnd)
	if len(turnEnds) != 2 || len(turnEnds[0].ToolResults) != 1 || turnEnds[0].ToolResults[0].ToolCallID != "c1" || len(turnEnds[1].ToolResults) != 0 {
		t.Fatalf("turn_end tool results wrong")
	}
	if keyAsked != "test" {
		t.Fatalf("GetAPIKey asked for %q", keyAsked)
	}
	ends := rec.ofType(EventToolExecutionEnd)
	if ends[0].IsError || ends[0].Result.Content[0].Text != "pong" {
		t.Fatalf("tool_execution_end: %+v", ends[0])
	}
}

func TestToolUpdates(t *testing.T) {
	s := &script{replies: []reply{{calls: []llm.Content{call("c1", "prog", nil)}}, {text: "ok"}}}
	tool := toolTool("prog", func(_ context.Context, _ string, _ map[string]any, up func(ToolResult)) (ToolResult, error) {
		up(TextResult("50%"))
		up(TextResult("100%"))
		return TextResult("done"), nil
	})
	rec := &recorder{}
	mustRun(t, t.Context(), []llm.Message{userMsg("go")}, &AgentContext{Tools: []AgentTool{tool}}, newConfig(s), rec)
	if !strings.Contains(rec.trace(), "tool_execution_start(c1) tool_execution_update(c1) tool_execution_update(c1) tool_execution_end(c1)") {
		t.Fatalf("events: %s", rec.trace())
	}
	if ups := rec.ofType(EventToolExecutionUpdate); ups[1].Result.Content[0].Text != "100%" {
		t.Fatalf("update: %+v", ups[1])
	}
}

// Three calls run concurrently and finish in reverse order: tool_execution_end follows the
// completion order, the toolResult messages follow the order of the calls.
func TestParallelToolsKeepSourceOrder(t *testing.T) {
	s := &script{replies: []reply{
		{calls: []llm.Content{call("a", "wait", map[string]any{"id": "a"}), call("b", "wait", map[string]any{"id": "b"}), call("c", "wait", map[string]any{"id": "c"})}},
		{text: "all done"},
	}}
	done := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{}), "c": make(chan struct{})}
	waitFor := map[string]string{"a": "b", "b": "c"} // a waits for b's end, b for c's
	// c, the first to finish, waits until all three are running: only concurrent execution gets
	// past this, whatever order the goroutines are scheduled in.
	var started atomic.Int32
	allStarted := make(chan struct{})
	tool := toolTool("wait", func(ctx context.Context, id string, _ map[string]any, up func(ToolResult)) (ToolResult, error) {
		if started.Add(1) == 3 {
			close(allStarted)
		}
		dep, ok := waitFor[id]
		wait := allStarted
		if ok {
			wait = done[dep]
		}
		select {
		case <-wait:
		case <-time.After(time.Minute):
			return ToolResult{}, errors.New("tools did not run concurrently")
		case <-ctx.Done():
			return ToolResult{}, ctx.Err()
		}
		up(TextResult("finishing " + id))
		return TextResult("result " + id), nil
	})
	rec := &recorder{}
	var inEmit atomic.Int32
	emit := func(ev Event) { // emit must never be entered concurrently
		if inEmit.Add(1) > 1 {
			t.Error("emit called concurrently")
		}
		rec.add(ev)
		if ev.Type == EventToolExecutionEnd {
			close(done[ev.ToolCallID]) // the next tool finishes only after this end was reported
		}
		inEmit.Add(-1)
	}
	out, err := Run(t.Context(), []llm.Message{userMsg("go")}, &AgentContext{Tools: []AgentTool{tool}}, newConfig(s), emit)
	if err != nil {
		t.Fatal(err)
	}

	var starts, ends []string
	for _, ev := range rec.ofType(EventToolExecutionStart) {
		starts = append(starts, ev.ToolCallID)
	}
	for _, ev := range rec.ofType(EventToolExecutionEnd) {
		ends = append(ends, ev.ToolCallID)
	}
	if strings.Join(starts, "") != "abc" || strings.Join(ends, "") != "cba" {
		t.Fatalf("starts %v ends %v", starts, ends)
	}
	var results []string
	for _, m := range out {
		if m.Role == llm.RoleToolResult {
			results = append(results, m.ToolCallID+"="+m.TextContent())
		}
	}
	if got := strings.Join(results, ","); got != "a=result a,b=result b,c=result c" {
		t.Fatalf("toolResult order: %s", got)
	}
	// All toolResult messages come after every tool_execution_end.
	tr := rec.trace()
	if strings.Index(tr, "message_start(toolResult)") < strings.LastIndex(tr, "tool_execution_end") {
		t.Fatalf("toolResult emitted before the batch ended: %s", tr)
	}
	if len(rec.ofType(EventToolExecutionUpdate)) != 3 {
		t.Fatalf("updates from tool goroutines were lost")
	}
}

func TestSequentialToolsWithSteering(t *testing.T) {
	s := &script{replies: []reply{
		{calls: []llm.Content{call("a", "rec", nil), call("b", "rec", nil), call("c", "rec", nil)}},
		{text: "ok, changing course"},
	}}
	var order []string
	tool := toolTool("rec", func(_ context.Context, id string, _ map[string]any, _ func(ToolResult)) (ToolResult, error) {
		order = append(order, id)
		return TextResult("ran " + id), nil
	})
	cfg := newConfig(s)
	cfg.ToolExecution = Sequential
	polls := 0
	cfg.GetSteeringMessages = func() []llm.Message {
		polls++
		if polls == 2 { // 1: run start, 2: after tool a
			return []llm.Message{userMsg("stop, do something else")}
		}
		return nil
	}
	rec := &recorder{}
	out := mustRun(t, t.Context(), []llm.Message{userMsg("go")}, &AgentContext{Tools: []AgentTool{tool}}, cfg, rec)

	if strings.Join(order, "") != "a" {
		t.Fatalf("executed %v, want only a", order)
	}
	if roles(out) != "user,assistant,toolResult,toolResult,toolResult,user,assistant" {
		t.Fatalf("messages: %s", roles(out))
	}
	for i, want := range []string{"ran a", "Skipped due to queued user message.", "Skipped due to queued user message."} {
		if m := out[2+i]; m.TextContent() != want || m.IsError != (i > 0) {
			t.Fatalf("result %d: %q isError=%v", i, m.TextContent(), m.IsError)
		}
	}
	seen := s.context(1).Messages
	if seen[len(seen)-1].TextContent() != "stop, do something else" {
		t.Fatalf("steering message not sent to the model")
	}
	wantTrace := "tool_execution_start(a) tool_execution_end(a) message_start(toolResult) message_end(toolResult) " +
		"tool_execution_start(b) tool_execution_end(b) message_start(toolResult) message_end(toolResult) " +
		"tool_execution_start(c) tool_execution_end(c) message_start(toolResult) message_end(toolResult) turn_end " +
		"turn_start message_start(user) message_end(user) message_start(assistant)"
	if !strings.Contains(rec.trace(), wantTrace) {
		t.Fatalf("events: %s", rec.trace())
	}
}

func TestParallelSteeringAfterBatch(t *testing.T) {
	s := &script{replies: []reply{
		{calls: []llm.Content{call("a", "echo", map[string]any{"text": "1"}), call("b", "echo", map[string]any{"text": "2"})}},
		{text: "answer"},
	}}
	cfg := newConfig(s)
	polls := 0
	cfg.GetSteeringMessages = func() []llm.Message {
		polls++
		if polls == 2 {
			return []llm.Message{userMsg("also this")}
		}
		return nil
	}
	out := mustRun(t, t.Context(), []llm.Message{userMsg("go")}, &AgentContext{Tools: []AgentTool{echoTool()}}, cfg, &recorder{})
	if roles(out) != "user,assistant,toolResult,toolResult,user,assistant" || out[2].IsError || out[3].IsError {
		t.Fatalf("messages: %s", roles(out))
	}
}

func TestToolFailuresBecomeErrorResults(t *testing.T) {
	strict := json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)
	tests := []struct {
		name   string
		tool   AgentTool
		args   map[string]any
		before func(context.Context, BeforeToolCallInfo) (*BlockResult, error)
		want   string // substring of the result text
	}{
		{name: "unknown tool", tool: echoTool(), want: "Tool nope not found"},
		{name: "invalid arguments", tool: AgentTool{Tool: llm.Tool{Name: "nope", Parameters: strict}, Execute: func(context.Context, string, map[string]any, func(ToolResult)) (ToolResult, error) {
			return TextResult("should not run"), nil
		}}, args: map[string]any{"n": "not a number"}, want: "n"},
		{name: "tool panics", tool: toolTool("nope", func(context.Context, string, map[string]any, func(ToolResult)) (ToolResult, error) {
			panic("boom")
		}), want: "Tool nope panicked: boom"},
		{name: "tool returns error", tool: toolTool("nope", func(context.Context, string, map[string]any, func(ToolResult)) (ToolResult, error) {
			return ToolResult{}, errors.New("disk full")
		}), want: "disk full"},
		{name: "tool returns isError", tool: toolTool("nope", func(context.Context, string, map[string]any, func(ToolResult)) (ToolResult, error) {
			return ErrorResult("bad path"), nil
		}), want: "bad path"},
		{name: "no Execute", tool: AgentTool{Tool: llm.Tool{Name: "nope"}}, want: "no in-process Execute"},
		{name: "blocked", tool: echoTool(), before: func(context.Context, BeforeToolCallInfo) (*BlockResult, error) {
			return &BlockResult{Reason: "exec policy denies rm"}, nil
		}, want: "exec policy denies rm"},
		{name: "blocked without reason", tool: echoTool(), before: func(context.Context, BeforeToolCallInfo) (*BlockResult, error) {
			return &BlockResult{}, nil
		}, want: "Tool execution was blocked"},
		{name: "before hook errors", tool: echoTool(), before: func(context.Context, BeforeToolCallInfo) (*BlockResult, error) {
			return nil, errors.New("policy store down")
		}, want: "policy store down"},
		{name: "before hook panics", tool: echoTool(), before: func(context.Context, BeforeToolCallInfo) (*BlockResult, error) {
			panic("hook bug")
		}, want: "hook bug"},
	}
	for _, tt := range tests {
		for _, mode := range []ToolExecutionMode{Parallel, Sequential} {
			t.Run(tt.name+"/"+string(mode), func(t *testing.T) {
				if tt.name == "invalid arguments" {
					if _, err := llm.ValidateArguments(&tt.tool.Tool, tt.args); err == nil {
						t.Skip("llm.ValidateArguments does not validate schemas yet")
					}
				}
				name := "nope"
				if tt.tool.Name == "echo" && tt.before != nil {
					name = "echo"
				}
				args := tt.args
				if name == "echo" {
					args = map[string]any{"text": "x"}
				}
				s := &script{replies: []reply{{calls: []llm.Content{call("c1", name, args)}}, {text: "recovered"}}}
				cfg := newConfig(s)
				cfg.ToolExecution = mode
				cfg.BeforeToolCall = tt.before
				rec := &recorder{}
				out := mustRun(t, t.Context(), []llm.Message{userMsg("go")}, &AgentContext{Tools: []AgentTool{tt.tool}}, cfg, rec)
				if roles(out) != "user,assistant,toolResult,assistant" {
					t.Fatalf("loop did not go on: %s", roles(out))
				}
				tr := out[2]
				if !tr.IsError || !strings.Contains(tr.TextContent(), tt.want) || tr.ToolCallID != "c1" {
					t.Fatalf("result: isError=%v %q, want %q", tr.IsError, tr.TextContent(), tt.want)
				}
				end := rec.ofType(EventToolExecutionEnd)
				if len(end) != 1 || !end[0].IsError {
					t.Fatalf("tool_execution_end: %+v", end)
				}
				if out[3].TextContent() != "recovered" {
					t.Fatalf("final: %q", out[3].TextContent())
				}
			})
		}
	}
}

func TestBeforeToolCallSeesValidatedCall(t *testing.T) {
	s := &script{replies: []reply{{calls: []llm.Content{call("c1", "echo", map[string]any{"text": "hi"})}}, {text: "ok"}}}
	cfg := newConfig(s)
	var info BeforeToolCallInfo
	cfg.BeforeToolCall = func(_ context.Context, i BeforeToolCallInfo) (*BlockResult, error) {
		info = i
		return nil, nil
	}
	mustRun(t, t.Context(), []llm.Message{userMsg("go")}, &AgentContext{Tools: []AgentTool{echoTool()}}, cfg, &recorder{})
	if info.ToolCall.ID != "c1" || info.Args["text"] != "hi" || info.AssistantMessage.Role != llm.RoleAssistant ||
		roles(info.Context.Messages) != "user,assistant" {
		t.Fatalf("info: %+v", info)
	}
}

func TestAfterToolCallReplacesFields(t *testing.T) {
	yes, no := true, false
	tests := []struct {
		name     string
		tool     ExecuteFunc
		override *ToolResultOverride
		text     string
		details  string
		isError  bool
	}{
		{"nil keeps all", nil, nil, "orig", `{"a":1}`, false},
		{"content", nil, &ToolResultOverride{Content: []llm.Content{llm.Text("redacted")}}, "redacted", `{"a":1}`, false},
		{"details", nil, &ToolResultOverride{Details: json.RawMessage(`{"b":2}`)}, "orig", `{"b":2}`, false},
		{"isError on", nil, &ToolResultOverride{IsError: &yes}, "orig", `{"a":1}`, true},
		{"isError off", func(context.Context, string, map[string]any, func(ToolResult)) (ToolResult, error) {
			return ToolResult{}, errors.New("failed")
		}, &ToolResultOverride{IsError: &no, Content: []llm.Content{llm.Text("fine really")}}, "fine really", ``, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exec := tt.tool
			if exec == nil {
				exec = func(context.Context, string, map[string]any, func(ToolResult)) (ToolResult, error) {
					return ToolResult{Content: []llm.Content{llm.Text("orig")}, Details: json.RawMessage(`{"a":1}`)}, nil
				}
			}
			s := &script{replies: []reply{{calls: []llm.Content{call("c1", "t", nil)}}, {text: "ok"}}}
			cfg := newConfig(s)
			var seen AfterToolCallInfo
			cfg.AfterToolCall = func(_ context.Context, i AfterToolCallInfo) *ToolResultOverride {
				seen = i
				return tt.override
			}
			rec := &recorder{}
			out := mustRun(t, t.Context(), []llm.Message{userMsg("go")}, &AgentContext{Tools: []AgentTool{toolTool("t", exec)}}, cfg, rec)
			tr := out[2]
			if tr.TextContent() != tt.text || string(tr.Details) != tt.details || tr.IsError != tt.isError {
				t.Fatalf("got %q %s isError=%v", tr.TextContent(), tr.Details, tr.IsError)
			}
			end := rec.ofType(EventToolExecutionEnd)[0]
			if end.IsError != tt.isError || end.Result.Content[0].Text != tt.text {
				t.Fatalf("tool_execution_end not overridden: %+v", end)
			}
			if seen.ToolCall == nil || seen.ToolCall.ID != "c1" {
				t.Fatalf("AfterToolCall info: %+v", seen)
			}
		})
	}
}

func TestContinueErrors(t *testing.T) {
	cfg := newConfig(&script{})
	tests := []struct {
		name string
		ac   *AgentContext
		cfg  *Config
		want error
	}{
		{"no model", &AgentContext{Messages: []llm.Message{userMsg("x")}}, &Config{}, ErrNoModel},
		{"no messages", &AgentContext{}, cfg, ErrNoMessages},
		{"nil context", nil, cfg, ErrNoMessages},
		{"assistant tail", &AgentContext{Messages: []llm.Message{userMsg("x"), {Role: llm.RoleAssistant}}}, cfg, ErrContinueFromAssistant},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			if _, err := Continue(t.Context(), tt.ac, tt.cfg, rec.add); !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if len(rec.all()) != 0 {
				t.Fatalf("events emitted before the error")
			}
		})
	}
	if _, err := Run(t.Context(), nil, nil, nil, nil); !errors.Is(err, ErrNoModel) {
		t.Fatalf("Run without config: %v", err)
	}
}

func TestContinueFromToolResult(t *testing.T) {
	s := &script{replies: []reply{{text: "continuing"}}}
	hist := []llm.Message{userMsg("x"), {Role: llm.RoleAssistant, Content: []llm.Content{call("c1", "echo", nil)}}, {Role: llm.RoleToolResult, ToolCallID: "c1", Content: []llm.Content{llm.Text("r")}}}
	rec := &recorder{}
	out, err := Continue(t.Context(), &AgentContext{Messages: hist}, newConfig(s), rec.add)
	if err != nil {
		t.Fatal(err)
	}
	if roles(out) != "assistant" || rec.trace() != "agent_start turn_start message_start(assistant) message_update* message_end(assistant) turn_end agent_end" {
		t.Fatalf("%s / %s", roles(out), rec.trace())
	}
	if roles(s.context(0).Messages) != "user,assistant,toolResult" {
		t.Fatalf("model saw %s", roles(s.context(0).Messages))
	}
}

func TestFollowUpContinuation(t *testing.T) {
	s := &script{replies: []reply{{text: "first"}, {text: "second"}}}
	cfg := newConfig(s)
	queue := []llm.Message{userMsg("and another thing")}
	cfg.GetFollowUpMessages = func() []llm.Message {
		q := queue
		queue = nil
		return q
	}
	rec := &recorder{}
	out := mustRun(t, t.Context(), []llm.Message{userMsg("q")}, &AgentContext{}, cfg, rec)
	if roles(out) != "user,assistant,user,assistant" || out[3].TextContent() != "second" {
		t.Fatalf("messages: %s", roles(out))
	}
	want := "agent_start turn_start message_start(user) message_end(user) message_start(assistant) message_update* message_end(assistant) turn_end " +
		"turn_start message_start(user) message_end(user) message_start(assistant) message_update* message_end(assistant) turn_end agent_end"
	if rec.trace() != want {
		t.Fatalf("events:\n got %s\nwant %s", rec.trace(), want)
	}
}

func TestSteeringAtStart(t *testing.T) {
	s := &script{replies: []reply{{text: "both"}}}
	cfg := newConfig(s)
	once := true
	cfg.GetSteeringMessages = func() []llm.Message {
		if once {
			once = false
			return []llm.Message{userMsg("typed while waiting")}
		}
		return nil
	}
	out := mustRun(t, t.Context(), []llm.Message{userMsg("q")}, &AgentContext{}, cfg, &recorder{})
	if roles(out) != "user,user,assistant" || s.calls() != 1 {
		t.Fatalf("messages: %s after %d calls", roles(out), s.calls())
	}
}

func TestErrorStopEndsRun(t *testing.T) {
	s := &script{replies: []reply{{text: "partial", errMsg: "server exploded"}, {text: "never"}}}
	cfg := newConfig(s)
	cfg.GetFollowUpMessages = func() []llm.Message { return []llm.Message{userMsg("more")} }
	rec := &recorder{}
	out := mustRun(t, t.Context(), []llm.Message{userMsg("q")}, &AgentContext{}, cfg, rec)
	if roles(out) != "user,assistant" || out[1].StopReason != llm.StopReasonError || out[1].ErrorMessage != "server exploded" {
		t.Fatalf("messages: %s %+v", roles(out), out[len(out)-1])
	}
	if s.calls() != 1 || !strings.HasSuffix(rec.trace(), "message_end(assistant) turn_end agent_end") {
		t.Fatalf("%d calls; %s", s.calls(), rec.trace())
	}
}

func TestAbortMidStreamKeepsUsage(t *testing.T) {
	s := &script{replies: []reply{{text: "a long answer"}}}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	rec := &recorder{}
	emit := func(ev Event) {
		rec.add(ev)
		if ev.Type == EventMessageUpdate && ev.Update.Type == llm.EventTextDelta {
			cancel() // the user hits stop after the first delta
		}
	}
	out, err := Run(ctx, []llm.Message{userMsg("q")}, &AgentContext{}, newConfig(s), emit)
	if err != nil {
		t.Fatal(err)
	}
	last := out[len(out)-1]
	if last.StopReason != llm.StopReasonAborted || last.Usage == nil || last.Usage.Input == 0 || last.Usage.Output == 0 {
		t.Fatalf("aborted message: %+v usage %+v", last, last.Usage)
	}
	if last.TextContent() != "a long" {
		t.Fatalf("partial content: %q", last.TextContent())
	}
	if !strings.HasSuffix(rec.trace(), "message_end(assistant) turn_end agent_end") {
		t.Fatalf("events: %s", rec.trace())
	}
}

func TestAbortDuringTools(t *testing.T) {
	for _, mode := range []ToolExecutionMode{Parallel, Sequential} {
		t.Run(string(mode), func(t *testing.T) {
			s := &script{replies: []reply{{calls: []llm.Content{call("a", "slow", nil), call("b", "slow", nil)}}, {text: "never"}}}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			tool := toolTool("slow", func(ctx context.Context, _ string, _ map[string]any, _ func(ToolResult)) (ToolResult, error) {
				cancel()
				<-ctx.Done()
				return ToolResult{}, ctx.Err()
			})
			cfg := newConfig(s)
			cfg.ToolExecution = mode
			out, err := Run(ctx, []llm.Message{userMsg("q")}, &AgentContext{Tools: []AgentTool{tool}}, cfg, (&recorder{}).add)
			if err != nil {
				t.Fatal(err)
			}
			if roles(out) != "user,assistant,toolResult,toolResult,assistant" || s.calls() != 1 {
				t.Fatalf("messages %s, %d calls", roles(out), s.calls())
			}
			if out[2].TextContent() != "Operation aborted" || out[3].TextContent() != "Operation aborted" {
				t.Fatalf("results: %q %q", out[2].TextContent(), out[3].TextContent())
			}
			if !out[2].IsError || !out[3].IsError || out[4].StopReason != llm.StopReasonAborted {
				t.Fatalf("results: %+v %+v %+v", out[2], out[3], out[4])
			}
		})
	}
}

func TestMaxIterations(t *testing.T) {
	loopCall := reply{calls: []llm.Content{call("c", "echo", map[string]any{"text": "again"})}}
	tests := []struct {
		name    string
		max     int
		replies []reply
		calls   int
		roles   string
		err     error
	}{
		{"cap stops a tool loop", 2, []reply{loopCall, loopCall, loopCall}, 2, "user,assistant,toolResult,assistant,toolResult", ErrMaxIterations},
		{"cap of one without tools is a normal end", 1, []reply{{text: "hi"}}, 1, "user,assistant", nil},
		{"answer within the cap", 3, []reply{loopCall, {text: "done"}}, 2, "user,assistant,toolResult,assistant", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &script{replies: tt.replies}
			cfg := newConfig(s)
			cfg.MaxIterations = tt.max
			followUps := 0
			cfg.GetFollowUpMessages = func() []llm.Message { followUps++; return nil }
			rec := &recorder{}
			out, err := Run(t.Context(), []llm.Message{userMsg("q")}, &AgentContext{Tools: []AgentTool{echoTool()}}, cfg, rec.add)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if s.calls() != tt.calls || roles(out) != tt.roles {
				t.Fatalf("%d calls, messages %s", s.calls(), roles(out))
			}
			if !strings.HasSuffix(rec.trace(), "turn_end agent_end") {
				t.Fatalf("events: %s", rec.trace())
			}
			if followUps != 0 && s.calls() >= tt.max {
				t.Fatalf("follow-ups polled after the cap")
			}
		})
	}
}

func TestLengthStopFailsToolCalls(t *testing.T) {
	s := &script{replies: []reply{
		{text: "calling", calls: []llm.Content{call("c1", "echo", map[string]any{"text": "trunc"}), call("c2", "echo", map[string]any{"text": "x"})}, stop: llm.StopReasonLength},
		{text: "retrying"},
	}}
	executed := 0
	tool := echoTool()
	inner := tool.Execute
	tool.Execute = func(ctx context.Context, id string, a map[string]any, up func(ToolResult)) (ToolResult, error) {
		executed++
		return inner(ctx, id, a, up)
	}
	rec := &recorder{}
	out := mustRun(t, t.Context(), []llm.Message{userMsg("q")}, &AgentContext{Tools: []AgentTool{tool}}, newConfig(s), rec)
	if executed != 0 {
		t.Fatalf("a truncated call was executed")
	}
	if roles(out) != "user,assistant,toolResult,toolResult,assistant" {
		t.Fatalf("messages: %s", roles(out))
	}
	for _, m := range out[2:4] {
		if !m.IsError || !strings.Contains(m.TextContent(), "output token limit") {
			t.Fatalf("result: %+v", m)
		}
	}
	if !strings.Contains(rec.trace(), "tool_execution_start(c1) tool_execution_end(c1) message_start(toolResult) message_end(toolResult) tool_execution_start(c2)") {
		t.Fatalf("events: %s", rec.trace())
	}
}

func TestSequentialToolFlagForcesSequential(t *testing.T) {
	s := &script{replies: []reply{{calls: []llm.Content{call("a", "one", nil), call("b", "one", nil)}}, {text: "ok"}}}
	var running, overlap atomic.Int32
	tool := toolTool("one", func(context.Context, string, map[string]any, func(ToolResult)) (ToolResult, error) {
		if running.Add(1) > 1 {
			overlap.Add(1)
		}
		defer running.Add(-1)
		return TextResult("x"), nil
	})
	tool.Sequential = true
	rec := &recorder{}
	mustRun(t, t.Context(), []llm.Message{userMsg("q")}, &AgentContext{Tools: []AgentTool{tool}}, newConfig(s), rec)
	if overlap.Load() != 0 || !strings.Contains(rec.trace(), "tool_execution_end(a) message_start(toolResult) message_end(toolResult) tool_execution_start(b)") {
		t.Fatalf("not sequential: %s", rec.trace())
	}
}

func TestCustomExecutor(t *testing.T) {
	s := &script{replies: []reply{{calls: []llm.Content{call("c1", "remote", map[string]any{"q": 1.0})}}, {text: "ok"}}}
	var got ToolCallRequest
	cfg := newConfig(s)
	cfg.Executor = ToolExecutorFunc(func(_ context.Context, c ToolCallRequest) (ToolResult, error) {
		got = c
		c.OnUpdate(TextResult("queued on the bus"))
		return TextResult("remote result"), nil
	})
	remote := AgentTool{Tool: llm.Tool{Name: "remote", Parameters: json.RawMessage(`{"type":"object"}`)}} // no Execute
	rec := &recorder{}
	out := mustRun(t, t.Context(), []llm.Message{userMsg("q")}, &AgentContext{Tools: []AgentTool{remote}}, cfg, rec)
	if got.ID != "c1" || got.Name != "remote" || got.Args["q"] != 1.0 || got.Tool == nil {
		t.Fatalf("request: %+v", got)
	}
	if out[2].TextContent() != "remote result" || len(rec.ofType(EventToolExecutionUpdate)) != 1 {
		t.Fatalf("result %q", out[2].TextContent())
	}
}

func TestUpdateAfterReturnIsDropped(t *testing.T) {
	s := &script{replies: []reply{{calls: []llm.Content{call("c1", "leaky", nil)}}, {text: "ok"}}}
	var saved func(ToolResult)
	tool := toolTool("leaky", func(_ context.Context, _ string, _ map[string]any, up func(ToolResult)) (ToolResult, error) {
		saved = up
		return TextResult("done"), nil
	})
	rec := &recorder{}
	mustRun(t, t.Context(), []llm.Message{userMsg("q")}, &AgentContext{Tools: []AgentTool{tool}}, newConfig(s), rec)
	saved(TextResult("late")) // must not emit nor panic
	if len(rec.ofType(EventToolExecutionUpdate)) != 0 {
		t.Fatalf("late update emitted")
	}
}

// Runs are recycled (a sync.Pool): an onUpdate kept from an earlier run and called while a
// later run executes its tool must not emit into the later run.
func TestUpdateFromAnEarlierRunIsDropped(t *testing.T) {
	var saved func(ToolResult)
	first := true
	tool := toolTool("leaky", func(_ context.Context, _ string, _ map[string]any, up func(ToolResult)) (ToolResult, error) {
		if first {
			saved, first = up, false
		} else {
			saved(TextResult("from the first run"))
		}
		return TextResult("done"), nil
	})
	ac := &AgentContext{Tools: []AgentTool{tool}}
	for i := range 2 {
		s := &script{replies: []reply{{calls: []llm.Content{call("c1", "leaky", nil)}}, {text: "ok"}}}
		rec := &recorder{}
		mustRun(t, t.Context(), []llm.Message{userMsg("q")}, ac, newConfig(s), rec)
		if ups := rec.ofType(EventToolExecutionUpdate); len(ups) != 0 {
			t.Fatalf("run %d: %d updates emitted, want 0: %+v", i+1, len(ups), ups)
		}
	}
}

// StopAfterTools ends a run after a tool batch without another LLM call; a follow-up that is
// already queued still starts the next turn of the run.
func TestStopAfterTools(t *testing.T) {
	tests := []struct {
		name     string
		stop     bool
		followUp bool
		calls    int
		roles    string
	}{
		{"stop", true, false, 1, "user,assistant,toolResult"},
		{"no stop", false, false, 2, "user,assistant,toolResult,assistant"},
		{"stop, then a queued follow-up", true, true, 2, "user,assistant,toolResult,user,assistant"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &script{replies: []reply{
				{calls: []llm.Content{call("c1", "echo", map[string]any{"text": "question?"})}},
				{text: "answered"},
			}}
			cfg := newConfig(s)
			var seen []string
			cfg.StopAfterTools = func(results []llm.Message) bool {
				for _, r := range results {
					seen = append(seen, r.ToolCallID)
				}
				return tt.stop
			}
			sent := false
			cfg.GetFollowUpMessages = func() []llm.Message {
				if tt.followUp && !sent {
					sent = true
					return []llm.Message{userMsg("my answer")}
				}
				return nil
			}
			out, err := Run(t.Context(), []llm.Message{userMsg("q")}, &AgentContext{Tools: []AgentTool{echoTool()}}, cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			if s.calls() != tt.calls || roles(out) != tt.roles {
				t.Fatalf("%d calls, messages %s; want %d, %s", s.calls(), roles(out), tt.calls, tt.roles)
			}
			if strings.Join(seen, ",") != "c1" {
				t.Fatalf("StopAfterTools saw %v", seen)
			}
		})
	}
}
