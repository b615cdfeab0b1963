package faux_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/faux"
)

var model = &llm.Model{ID: "faux-1", API: llm.APIFaux, Provider: "test", Cost: llm.ModelCost{Input: 1, Output: 2}}

func userCtx(text string) *llm.Context {
	return &llm.Context{Messages: []llm.Message{llm.UserText(text, 1)}}
}

// collect runs a stream and returns its events with Partial cloned at each step.
type rec struct {
	ev      llm.Event
	partial llm.Message
}

func collect(t *testing.T, ctx context.Context, p llm.Provider, c *llm.Context) []rec {
	t.Helper()
	var out []rec
	for ev := range p.Stream(ctx, model, c, &llm.StreamOptions{}) {
		r := rec{ev: ev}
		if ev.Partial != nil {
			r.partial = ev.Partial.Clone()
		}
		out = append(out, r)
	}
	return out
}

func types(rs []rec) string {
	var s []string
	for _, r := range rs {
		s = append(s, string(r.ev.Type))
	}
	return strings.Join(s, " ")
}

func TestEventOrder(t *testing.T) {
	tests := []struct {
		name   string
		opts   []faux.Option
		resp   faux.Response
		want   string
		reason llm.StopReason
	}{
		{"text", []faux.Option{faux.WithDeltaSize(4)}, faux.Response{Text: "hello world"},
			"start text_start text_delta text_delta text_delta text_end done", llm.StopReasonStop},
		{"empty", nil, faux.Response{}, "start done", llm.StopReasonStop},
		{"thinking+text", []faux.Option{faux.WithDeltaSize(0)}, faux.Response{Thinking: "hmm", ThinkingSignature: "sig", Text: "ok"},
			"start thinking_start thinking_delta thinking_end text_start text_delta text_end done", llm.StopReasonStop},
		{"tool", []faux.Option{faux.WithToolDeltaSize(0)}, faux.Response{Text: "t", ToolCalls: []llm.Content{llm.ToolCall("c1", "bash", map[string]any{"command": "ls"})}},
			"start text_start text_delta text_end toolcall_start toolcall_delta toolcall_end done", llm.StopReasonToolUse},
		{"length", nil, faux.Response{Text: "cut", StopReason: llm.StopReasonLength},
			"start text_start text_delta text_end done", llm.StopReasonLength},
		{"error", nil, faux.Response{Text: "partial", Error: "prompt is too long: 300000 tokens > 200000 maximum"},
			"start text_start text_delta text_end error", llm.StopReasonError},
		{"explicit content", []faux.Option{faux.WithDeltaSize(0), faux.WithToolDeltaSize(0)}, faux.Response{Content: []llm.Content{
			llm.ToolCall("a", "x", nil), llm.Text("after")}},
			"start toolcall_start toolcall_delta toolcall_end text_start text_delta text_end done", llm.StopReasonToolUse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := faux.New(append(tt.opts, faux.WithResponses(tt.resp))...)
			rs := collect(t, context.Background(), p, userCtx("hi"))
			if got := types(rs); got != tt.want {
				t.Fatalf("events:\n got %s\nwant %s", got, tt.want)
			}
			last := rs[len(rs)-1].ev
			if last.Reason != tt.reason || last.Message == nil || last.Message.StopReason != tt.reason {
				t.Fatalf("terminal reason %q / %+v, want %q", last.Reason, last.Message, tt.reason)
			}
			for _, r := range rs[:len(rs)-1] {
				if r.ev.Partial == nil {
					t.Fatalf("%s without Partial", r.ev.Type)
				}
			}
			if tt.resp.Error != "" && last.Message.ErrorMessage != tt.resp.Error {
				t.Fatalf("error message %q", last.Message.ErrorMessage)
			}
		})
	}
}

func TestTextDeltasAndFinalMessage(t *testing.T) {
	text := "你好, world — ünïcode ✓"
	p := faux.New(faux.WithDeltaSize(3), faux.WithResponses(faux.Response{Thinking: "let me think", ThinkingSignature: "sig1", Text: text}))
	rs := collect(t, context.Background(), p, userCtx("hi"))
	var joined string
	for _, r := range rs {
		if r.ev.Type == llm.EventTextDelta {
			if !utf8.ValidString(r.ev.Delta) || utf8.RuneCountInString(r.ev.Delta) > 3 {
				t.Fatalf("bad delta %q", r.ev.Delta)
			}
			joined += r.ev.Delta
			if got := r.partial.Content[r.ev.ContentIndex].Text; got != joined {
				t.Fatalf("partial text %q, deltas so far %q", got, joined)
			}
		}
		if r.ev.Type == llm.EventTextEnd && r.ev.Content != text {
			t.Fatalf("text_end content %q", r.ev.Content)
		}
	}
	final := rs[len(rs)-1].ev.Message
	if final.TextContent() != text || final.Content[0].Thinking != "let me think" || final.Content[0].ThinkingSignature != "sig1" {
		t.Fatalf("final %+v", final.Content)
	}
	if final.API != llm.APIFaux || final.Model != "faux-1" || final.Provider != "test" || final.Timestamp == 0 {
		t.Fatalf("identity %+v", final)
	}
	u := final.Usage
	if u.Input == 0 || u.Output == 0 || u.TotalTokens != u.Input+u.Output {
		t.Fatalf("usage %+v", u)
	}
	if want := float64(u.Input)/1e6 + 2*float64(u.Output)/1e6; u.Cost.Total != want {
		t.Fatalf("cost %v want %v", u.Cost.Total, want)
	}
}

func TestToolCallStreaming(t *testing.T) {
	args := map[string]any{"command": "grep -rn \"TODO\" .", "timeout": 30.0, "flags": []any{"a", "b"}}
	p := faux.New(faux.WithToolDeltaSize(5), faux.WithResponses(faux.Response{ToolCalls: []llm.Content{llm.ToolCall("", "bash", args)}}))
	rs := collect(t, context.Background(), p, userCtx("run"))
	var raw string
	deltas := 0
	for _, r := range rs {
		switch r.ev.Type {
		case llm.EventToolCallStart:
			if r.partial.Content[0].Arguments == nil || r.partial.Content[0].Name != "bash" {
				t.Fatalf("start partial %+v", r.partial.Content[0])
			}
		case llm.EventToolCallDelta:
			deltas++
			raw += r.ev.Delta
			got := r.partial.Content[r.ev.ContentIndex].Arguments
			if want := llm.ParsePartialJSON(raw); !reflect.DeepEqual(got, want) {
				t.Fatalf("partial args %v, want %v", got, want)
			}
		case llm.EventToolCallEnd:
			if !reflect.DeepEqual(r.ev.ToolCall.Arguments, args) {
				t.Fatalf("end args %v", r.ev.ToolCall.Arguments)
			}
			if !strings.HasPrefix(r.ev.ToolCall.ID, "faux_call_") {
				t.Fatalf("id %q", r.ev.ToolCall.ID)
			}
		}
	}
	if deltas < 5 {
		t.Fatalf("only %d deltas", deltas)
	}
	var back map[string]any
	if err := json.Unmarshal([]byte(raw), &back); err != nil || !reflect.DeepEqual(back, args) {
		t.Fatalf("raw %s: %v", raw, err)
	}
}

func TestMalformedRawArguments(t *testing.T) {
	call := llm.Content{Type: llm.ContentToolCall, Name: "bash", Text: `{"command": "ls", "bad`}
	p := faux.New(faux.WithResponses(faux.Response{ToolCalls: []llm.Content{call}}))
	rs := collect(t, context.Background(), p, userCtx("x"))
	m := rs[len(rs)-1].ev.Message
	if got := m.Content[0].Arguments; !reflect.DeepEqual(got, map[string]any{"command": "ls"}) || m.Content[0].Text != "" {
		t.Fatalf("args %v text %q", got, m.Content[0].Text)
	}
}

func TestScriptThenResponderThenExhausted(t *testing.T) {
	p := faux.New(faux.WithResponses(faux.Response{Text: "one"}, faux.Response{Text: "two"}))
	for _, want := range []string{"one", "two"} {
		rs := collect(t, context.Background(), p, userCtx("x"))
		if got := rs[len(rs)-1].ev.Message.TextContent(); got != want {
			t.Fatalf("got %q want %q", got, want)
		}
	}
	rs := collect(t, context.Background(), p, userCtx("x"))
	if last := rs[len(rs)-1].ev; len(rs) != 1 || last.Type != llm.EventError || !strings.Contains(last.Message.ErrorMessage, "exhausted") {
		t.Fatalf("exhausted: %s %+v", types(rs), last.Message)
	}
	p2 := faux.New(faux.WithResponder(func(c *llm.Context) faux.Response {
		return faux.Response{Text: "echo " + c.Messages[len(c.Messages)-1].TextContent()}
	}))
	p2.Push(faux.Response{Text: "scripted first"})
	for _, want := range []string{"scripted first", "echo a", "echo a"} {
		rs := collect(t, context.Background(), p2, userCtx("a"))
		if got := rs[len(rs)-1].ev.Message.TextContent(); got != want {
			t.Fatalf("got %q want %q", got, want)
		}
	}
	if p2.Calls() != 3 || p2.Pending() != 0 {
		t.Fatalf("calls %d pending %d", p2.Calls(), p2.Pending())
	}
}

func TestAbortMidStream(t *testing.T) {
	t.Run("zero latency", func(t *testing.T) {
		p := faux.New(faux.WithDeltaSize(1), faux.WithResponses(faux.Response{Text: "abcdefghij"}))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var evs []llm.Event
		for ev := range p.Stream(ctx, model, userCtx("x"), nil) {
			evs = append(evs, ev)
			if ev.Type == llm.EventTextDelta && ev.Delta == "c" {
				cancel()
			}
		}
		last := evs[len(evs)-1]
		if last.Type != llm.EventError || last.Reason != llm.StopReasonAborted || last.Message.StopReason != llm.StopReasonAborted {
			t.Fatalf("last %+v", last)
		}
		if got := last.Message.TextContent(); got != "abc" {
			t.Fatalf("kept text %q", got)
		}
		if last.Message.Usage.Input == 0 || last.Message.Usage.Output == 0 || last.Message.ErrorMessage == "" {
			t.Fatalf("usage/error not kept: %+v", last.Message)
		}
	})
	t.Run("with latency", func(t *testing.T) {
		p := faux.New(faux.WithDeltaSize(1), faux.WithLatency(0, 20*time.Millisecond), faux.WithResponses(faux.Response{Text: strings.Repeat("x", 1000)}))
		ctx, cancel := context.WithTimeout(context.Background(), 70*time.Millisecond)
		defer cancel()
		start := time.Now()
		var last llm.Event
		for ev := range p.Stream(ctx, model, userCtx("x"), nil) {
			last = ev
		}
		if last.Reason != llm.StopReasonAborted || len(last.Message.TextContent()) >= 1000 {
			t.Fatalf("last %+v", last)
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("cancellation did not interrupt the wait")
		}
	})
}

func TestConsumerBreaks(t *testing.T) {
	p := faux.New(faux.WithDeltaSize(1), faux.WithResponses(faux.Response{Text: "abcdef"}))
	n := 0
	for range p.Stream(context.Background(), model, userCtx("x"), nil) {
		n++
		if n == 3 {
			break
		}
	}
	if n != 3 {
		t.Fatal(n)
	}
}

func TestRegisteredThroughLLMStream(t *testing.T) {
	p := faux.Register(faux.WithResponses(faux.Response{Text: "via registry"}))
	defer llm.UnregisterAPI(llm.APIFaux)
	m := llm.Complete(context.Background(), model, userCtx("x"), nil)
	if m.TextContent() != "via registry" || m.StopReason != llm.StopReasonStop || p.Calls() != 1 {
		t.Fatalf("%+v", m)
	}
}

func TestConcurrentScript(t *testing.T) {
	const n = 64
	p := faux.New()
	for i := 0; i < n; i++ {
		p.Push(faux.Response{Text: "r"})
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := 0
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n/8; i++ {
				var last llm.Event
				for ev := range p.Stream(context.Background(), model, userCtx("x"), nil) {
					last = ev
				}
				if last.Type == llm.EventDone {
					mu.Lock()
					got++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if got != n || p.Pending() != 0 {
		t.Fatalf("done %d pending %d", got, p.Pending())
	}
}

func TestDemo(t *testing.T) {
	bash := llm.Tool{Name: "bash", Description: "run", Parameters: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"},"timeout":{"type":"integer"}},"required":["command","timeout"]}`)}
	read := llm.Tool{Name: "read_file", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)}
	tools := []llm.Tool{bash, read}

	r := faux.Demo(&llm.Context{Messages: []llm.Message{llm.UserText("hello bot", 1)}, Tools: tools})
	if !strings.Contains(r.Text, "hello bot") || len(r.ToolCalls) != 0 {
		t.Fatalf("echo %+v", r)
	}
	r = faux.Demo(&llm.Context{Messages: []llm.Message{llm.UserText("please use bash: ls -la within 10 seconds", 1)}, Tools: tools})
	if len(r.ToolCalls) != 1 || r.ToolCalls[0].Name != "bash" ||
		r.ToolCalls[0].Arguments["command"] != "ls -la within 10 seconds" || r.ToolCalls[0].Arguments["timeout"] != 10.0 {
		t.Fatalf("tool %+v", r.ToolCalls)
	}
	r = faux.Demo(&llm.Context{Messages: []llm.Message{llm.UserText("READ_FILE /etc/hosts", 1)}, Tools: tools})
	if len(r.ToolCalls) != 1 || r.ToolCalls[0].Arguments["path"] != "/etc/hosts" {
		t.Fatalf("read %+v", r.ToolCalls)
	}
	r = faux.Demo(&llm.Context{Messages: []llm.Message{llm.UserText("a bashful reply", 1)}, Tools: tools})
	if len(r.ToolCalls) != 0 {
		t.Fatalf("substring matched a tool: %+v", r.ToolCalls)
	}
	res := llm.Message{Role: llm.RoleToolResult, ToolName: "bash", ToolCallID: "c", Content: []llm.Content{llm.Text("file1\nfile2")}}
	r = faux.Demo(&llm.Context{Messages: []llm.Message{llm.UserText("bash ls", 1), res}, Tools: tools})
	if r.Text != "The bash tool returned: file1\nfile2" || len(r.ToolCalls) != 0 {
		t.Fatalf("result %+v", r)
	}
	if r := faux.Demo(&llm.Context{}); r.Text == "" {
		t.Fatal("empty context")
	}
}

func TestDemoUnicode(t *testing.T) {
	tools := []llm.Tool{{Name: "bash", Parameters: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`)}}
	for _, s := range []string{"İİİ bash ls", "用 bash 运行 ls", "ǅ", ""} {
		r := faux.Demo(&llm.Context{Messages: []llm.Message{llm.UserText(s, 1)}, Tools: tools})
		if strings.Contains(s, "bash") && (len(r.ToolCalls) != 1 || r.ToolCalls[0].Arguments["command"] == "") {
			t.Errorf("%q: %+v", s, r)
		}
	}
}

func TestResponderPanicBecomesErrorEvent(t *testing.T) {
	p := faux.New(faux.WithResponder(func(*llm.Context) faux.Response { panic("bug") }))
	rs := collect(t, context.Background(), p, userCtx("x"))
	last := rs[len(rs)-1].ev
	if types(rs) != "start error" || last.Reason != llm.StopReasonError || !strings.Contains(last.Message.ErrorMessage, "responder panicked: bug") {
		t.Fatalf("%s %+v", types(rs), last.Message)
	}
}
