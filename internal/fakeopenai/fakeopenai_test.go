package fakeopenai_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/openai"
)

func complete(t *testing.T, s *fakeopenai.Server, ctx context.Context, c *llm.Context) llm.Message {
	t.Helper()
	m := &llm.Model{ID: "m1", API: llm.APIOpenAICompletions, Provider: "fake", BaseURL: s.BaseURL()}
	var final llm.Message
	for ev := range openai.New().Stream(ctx, m, c, &llm.StreamOptions{APIKey: "k"}) {
		if ev.Message != nil {
			final = *ev.Message
		}
	}
	return final
}

// The real openai-completions provider understands the fake's text, tool calls and errors.
func TestRealProviderReadsTheFake(t *testing.T) {
	tests := []struct {
		name  string
		reply fakeopenai.Reply
		check func(t *testing.T, m llm.Message)
	}{
		{"text", fakeopenai.Reply{Text: "hello there, world", Chunks: 3}, func(t *testing.T, m llm.Message) {
			if m.StopReason != llm.StopReasonStop || m.TextContent() != "hello there, world" {
				t.Errorf("stop %s text %q", m.StopReason, m.TextContent())
			}
		}},
		{"tool calls", fakeopenai.Reply{Text: "looking", ToolCalls: []fakeopenai.ToolCall{
			{ID: "c1", Name: "lookup", Arguments: `{"q":"a"}`}, {ID: "c2", Name: "lookup", Arguments: `{"q":"b"}`},
		}}, func(t *testing.T, m llm.Message) {
			calls := m.ToolCalls()
			if m.StopReason != llm.StopReasonToolUse || len(calls) != 2 || calls[0].ID != "c1" || calls[1].Arguments["q"] != "b" {
				t.Errorf("stop %s calls %+v", m.StopReason, calls)
			}
		}},
		{"http error", fakeopenai.Reply{Status: http.StatusBadRequest}, func(t *testing.T, m llm.Message) {
			if m.StopReason != llm.StopReasonError || m.ErrorMessage == "" {
				t.Errorf("stop %s error %q", m.StopReason, m.ErrorMessage)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fakeopenai.New(t, func(*fakeopenai.Request) fakeopenai.Reply { return tt.reply })
			c := &llm.Context{SystemPrompt: "be nice", Messages: []llm.Message{llm.UserText("hi", 1)},
				Tools: []llm.Tool{{Name: "lookup", Description: "looks up", Parameters: json.RawMessage(`{"type":"object"}`)}}}
			tt.check(t, complete(t, s, context.Background(), c))
			r := s.Requests()[0]
			if r.Model != "m1" || !r.Stream || r.Header.Get("Authorization") != "Bearer k" || !r.HasTool("lookup") ||
				r.Messages[0].Role != "system" || r.LastUser() != "hi" {
				t.Errorf("recorded request: %+v\n%s", r, r.Body)
			}
		})
	}
}

// A client that goes away during the latency is recorded as aborted; Until ends the wait early.
func TestLatencyAbortAndUntil(t *testing.T) {
	s := fakeopenai.New(t, func(r *fakeopenai.Request) fakeopenai.Reply {
		if r.N == 1 {
			return fakeopenai.Reply{Text: "late", Latency: 10 * time.Second}
		}
		return fakeopenai.Reply{Text: "early", Latency: 10 * time.Second, Until: closed()}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan llm.Message)
	go func() { done <- complete(t, s, ctx, &llm.Context{Messages: []llm.Message{llm.UserText("a", 1)}}) }()
	if _, err := s.WaitRequests(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	if m := <-done; m.StopReason != llm.StopReasonAborted {
		t.Errorf("cancelled call: stop %s", m.StopReason)
	}
	if m := complete(t, s, context.Background(), &llm.Context{Messages: []llm.Message{llm.UserText("b", 1)}}); m.TextContent() != "early" {
		t.Errorf("Until did not end the latency: %q %s", m.TextContent(), m.ErrorMessage)
	}
	testwait.Eventually(t, 0, func() error { return testwait.Want(s.Requests()[0].Aborted, "the first request not marked aborted") })
	if rs := s.Requests(); !rs[0].Aborted || rs[1].Aborted || s.MaxConcurrent() < 1 {
		t.Errorf("aborted flags %v %v", rs[0].Aborted, rs[1].Aborted)
	}
}

func closed() <-chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}

// A client that asks again as soon as a reply has ended (a queued turn) is never counted as
// two requests at once: a request leaves the count before its last chunk goes out.
func TestBackToBackRequestsAreNotConcurrent(t *testing.T) {
	s := fakeopenai.New(t, func(*fakeopenai.Request) fakeopenai.Reply { return fakeopenai.Reply{Text: "done, next"} })
	for i := range 200 {
		if m := complete(t, s, context.Background(), &llm.Context{Messages: []llm.Message{llm.UserText("q", 1)}}); m.TextContent() != "done, next" {
			t.Fatalf("call %d: %q %s", i, m.TextContent(), m.ErrorMessage)
		}
		if n := s.MaxConcurrent(); n != 1 {
			t.Fatalf("after call %d: %d requests counted at once, want 1", i, n)
		}
	}
}
