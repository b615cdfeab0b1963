package anthropic

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providertest"
)

func testModel(base, id string) *llm.Model {
	return &llm.Model{ID: id, API: llm.APIAnthropicMessages, Provider: "anthropic", BaseURL: base, Reasoning: true,
		Input: []string{"text", "image"}, Cost: llm.ModelCost{Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75}, MaxTokens: 8192}
}

func serve(t *testing.T, fixture string) *providertest.Server {
	t.Helper()
	f, err := providertest.LoadFixture("testdata", fixture)
	if err != nil {
		t.Fatal(err)
	}
	return providertest.NewServer(t, f)
}

func run(t *testing.T, srv *providertest.Server, id string, c *llm.Context, opts *llm.StreamOptions) (*llm.Message, map[string]any) {
	t.Helper()
	if opts == nil {
		opts = &llm.StreamOptions{}
	}
	opts.APIKey = providertest.TestKey
	_, final := providertest.Collect(t, context.Background(), New(), testModel(srv.URL, id), c, opts)
	var req map[string]any
	if err := json.Unmarshal(srv.LastRequest(), &req); err != nil {
		t.Fatalf("request: %v", err)
	}
	return final, req
}

func hello() *llm.Context {
	return &llm.Context{SystemPrompt: "be brief", Messages: []llm.Message{llm.UserText("hi", 1)}}
}

func TestThinkingSignatureRedactedAndCacheUsage(t *testing.T) {
	final, _ := run(t, serve(t, "thinking"), "claude-sonnet-4-5", hello(), nil)
	if final.StopReason != llm.StopReasonStop || len(final.Content) != 3 {
		t.Fatalf("final %+v", final)
	}
	think, redacted := final.Content[0], final.Content[1]
	if think.Type != llm.ContentThinking || !strings.HasPrefix(think.ThinkingSignature, "EqQBCkgI") || !strings.Contains(think.Thinking, "simple arithmetic") {
		t.Errorf("thinking block %+v", think)
	}
	if redacted.Type != llm.ContentThinking || !redacted.Redacted || !strings.HasPrefix(redacted.Thinking, "EmwKAhgB") {
		t.Errorf("redacted block %+v", redacted)
	}
	u := final.Usage
	if u.Input != 38 || u.Output != 57 || u.CacheRead != 2048 || u.CacheWrite != 120 || u.TotalTokens != 38+57+2048+120 {
		t.Errorf("usage %+v", u)
	}
	want := (38*3 + 57*15 + 2048*0.3 + 120*3.75) / 1e6
	if d := u.Cost.Total - want; d > 1e-12 || d < -1e-12 {
		t.Errorf("cost %v, want %v", u.Cost.Total, want)
	}
	if final.ResponseID != "msg_01ThinkAbc123" {
		t.Errorf("response id %q", final.ResponseID)
	}
}

func TestThinkingRequest(t *testing.T) {
	tests := []struct {
		model, wantType string
		level           llm.ThinkingLevel
		budget          float64
		effort          string
	}{
		{"claude-sonnet-4-5", "enabled", llm.ThinkingHigh, 16384, ""},
		{"claude-sonnet-4-5", "enabled", llm.ThinkingMinimal, 1024, ""},
		{"claude-opus-4-6", "adaptive", llm.ThinkingMedium, 0, "medium"},
	}
	for _, tt := range tests {
		t.Run(tt.model+"/"+string(tt.level), func(t *testing.T) {
			temp := 0.5
			_, req := run(t, serve(t, "text"), tt.model, hello(), &llm.StreamOptions{Thinking: tt.level, Temperature: &temp})
			th, _ := req["thinking"].(map[string]any)
			if th["type"] != tt.wantType {
				t.Fatalf("thinking %v", req["thinking"])
			}
			if tt.budget > 0 {
				if th["budget_tokens"] != tt.budget || req["max_tokens"].(float64) <= tt.budget {
					t.Errorf("budget %v, max_tokens %v", th["budget_tokens"], req["max_tokens"])
				}
			}
			if tt.effort != "" {
				if oc, _ := req["output_config"].(map[string]any); oc["effort"] != tt.effort {
					t.Errorf("output_config %v", req["output_config"])
				}
			}
			if _, ok := req["temperature"]; ok {
				t.Errorf("temperature sent together with thinking")
			}
		})
	}
}

func TestCacheControlOption(t *testing.T) {
	srv := serve(t, "text")
	run(t, srv, "claude-sonnet-4-5", hello(), nil)
	if n := strings.Count(string(srv.LastRequest()), `"cache_control"`); n != 2 {
		t.Errorf("default: %d cache_control markers, want 2 (system, last user block)", n)
	}
	run(t, srv, "claude-sonnet-4-5", hello(), &llm.StreamOptions{Extra: map[string]any{"anthropic.cacheControl": false}})
	if strings.Contains(string(srv.LastRequest()), "cache_control") {
		t.Errorf("cacheControl false still sends cache_control")
	}
	run(t, srv, "claude-sonnet-4-5", hello(), &llm.StreamOptions{Extra: map[string]any{"anthropic.cacheControl": "1h"}})
	if !strings.Contains(string(srv.LastRequest()), `"ttl":"1h"`) {
		t.Errorf("1h ttl missing: %s", srv.LastRequest())
	}
}

func TestSameModelReplayKeepsSignatures(t *testing.T) {
	srv := serve(t, "thinking")
	first, _ := run(t, srv, "claude-sonnet-4-5", hello(), nil)
	c := hello()
	c.Messages = append(c.Messages, *first, llm.UserText("and 3+3?", 2))
	run(t, srv, "claude-sonnet-4-5", c, nil)
	body := string(srv.LastRequest())
	for _, want := range []string{`"type":"thinking"`, `"signature":"EqQBCkgI`, `"type":"redacted_thinking"`, `"data":"EmwKAhgB`} {
		if !strings.Contains(body, want) {
			t.Errorf("replay lacks %s: %s", want, body)
		}
	}
}

func TestStreamErrorEventKeepsContent(t *testing.T) {
	final, _ := run(t, serve(t, "stream_error"), "claude-sonnet-4-5", hello(), nil)
	if final.StopReason != llm.StopReasonError || !strings.Contains(final.ErrorMessage, "Overloaded") {
		t.Fatalf("final %q %q", final.StopReason, final.ErrorMessage)
	}
	if final.TextContent() != "Hello" || final.Usage.Input != 21 {
		t.Errorf("partial content/usage lost: %q %+v", final.TextContent(), final.Usage)
	}
}

func TestStopReasons(t *testing.T) {
	tests := map[string]llm.StopReason{
		"end_turn": llm.StopReasonStop, "stop_sequence": llm.StopReasonStop, "pause_turn": llm.StopReasonStop,
		"max_tokens": llm.StopReasonLength, "model_context_window_exceeded": llm.StopReasonLength,
		"tool_use": llm.StopReasonToolUse, "refusal": llm.StopReasonError,
	}
	for in, want := range tests {
		f, _ := providertest.LoadFixture("testdata", "text")
		f.Body = []byte(strings.Replace(string(f.Body), `"stop_reason":"end_turn"`, `"stop_reason":"`+in+`"`, 1))
		srv := providertest.NewServer(t, f)
		final, _ := run(t, srv, "claude-sonnet-4-5", hello(), nil)
		if final.StopReason != want {
			t.Errorf("%s: got %s, want %s", in, final.StopReason, want)
		}
	}
}

func TestNoAPIKey(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", "")
	evs, final := providertest.Collect(t, context.Background(), New(), testModel("http://127.0.0.1:1", "x"), hello(), &llm.StreamOptions{})
	if len(evs) != 1 || final.StopReason != llm.StopReasonError || !strings.Contains(final.ErrorMessage, "no API key") {
		t.Errorf("events %s, final %q", providertest.Types(evs), final.ErrorMessage)
	}
}
