package ollama

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providertest"
)

func testModel(base, id string, reasoning bool) *llm.Model {
	return &llm.Model{ID: id, API: llm.APIOllamaChat, Provider: "ollama", BaseURL: base, Reasoning: reasoning,
		Input: []string{"text", "image"}, ContextWindow: 32768, MaxTokens: 2048}
}

func run(t *testing.T, fixture string, model *llm.Model, c *llm.Context, opts *llm.StreamOptions) (*llm.Message, map[string]any) {
	t.Helper()
	f, err := providertest.LoadFixture("testdata", fixture)
	if err != nil {
		t.Fatal(err)
	}
	srv := providertest.NewServer(t, f)
	if opts == nil {
		opts = &llm.StreamOptions{}
	}
	model.BaseURL = srv.URL + model.BaseURL // tests pass a suffix ("", "/api", "/v1") to check Host
	_, final := providertest.Collect(t, context.Background(), New(), model, c, opts)
	var req map[string]any
	if err := json.Unmarshal(srv.LastRequest(), &req); err != nil {
		t.Fatalf("request %q: %v", srv.LastRequest(), err)
	}
	return final, req
}

func hello() *llm.Context {
	return &llm.Context{SystemPrompt: "be brief", Messages: []llm.Message{llm.UserText("hi", 1)}}
}

func TestRequestOptions(t *testing.T) {
	tests := []struct {
		name    string
		model   *llm.Model
		opts    *llm.StreamOptions
		think   any
		numCtx  float64
		predict float64
	}{
		{"reasoning on", testModel("", "qwen3:14b", true), &llm.StreamOptions{Thinking: llm.ThinkingHigh}, true, 32768, 2048},
		{"reasoning off", testModel("/api", "qwen3:14b", true), &llm.StreamOptions{}, false, 32768, 2048},
		{"level model", testModel("/v1", "gpt-oss:20b", true), &llm.StreamOptions{Thinking: llm.ThinkingLow, MaxTokens: 100}, "low", 32768, 100},
		{"no reasoning", testModel("", "llama3.2", false), &llm.StreamOptions{Extra: map[string]any{"ollama.num_ctx": 8192}}, nil, 8192, 2048},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			final, req := run(t, "text", tt.model, hello(), tt.opts)
			if final.StopReason != llm.StopReasonStop {
				t.Fatalf("final %s %s", final.StopReason, final.ErrorMessage)
			}
			if req["think"] != tt.think {
				t.Errorf("think %v, want %v", req["think"], tt.think)
			}
			o, _ := req["options"].(map[string]any)
			if o["num_ctx"] != tt.numCtx || o["num_predict"] != tt.predict {
				t.Errorf("options %v", o)
			}
			if req["stream"] != true {
				t.Errorf("stream %v", req["stream"])
			}
		})
	}
}

func TestHost(t *testing.T) {
	t.Setenv("OLLAMA_HOST", "")
	for in, want := range map[string]string{
		"": DefaultHost, "http://gpu:11434/": "http://gpu:11434", "gpu:11434": "http://gpu:11434",
		"http://gpu:11434/api": "http://gpu:11434", "http://gpu:11434/v1": "http://gpu:11434",
	} {
		if got := Host(&llm.Model{BaseURL: in}); got != want {
			t.Errorf("Host(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestThinkingUsageAndImages(t *testing.T) {
	c := hello()
	c.Messages[0].Content = append(c.Messages[0].Content, llm.Image(providertest.TinyPNG, "image/png"))
	final, req := run(t, "thinking", testModel("", "qwen3:14b", true), c, &llm.StreamOptions{Thinking: llm.ThinkingMedium})
	if final.Content[0].Type != llm.ContentThinking || final.TextContent() != providertest.WantThinkingText {
		t.Errorf("content %+v", final.Content)
	}
	if final.Usage.Input != 18 || final.Usage.Output != 64 {
		t.Errorf("usage %+v", final.Usage)
	}
	msgs := req["messages"].([]any)
	user := msgs[1].(map[string]any)
	if imgs, _ := user["images"].([]any); len(imgs) != 1 || imgs[0] != providertest.TinyPNG {
		t.Errorf("images %v", user["images"])
	}
}

func TestStreamErrorLineAndLength(t *testing.T) {
	final, _ := run(t, "stream_error", testModel("", "qwen3:14b", false), hello(), nil)
	if final.StopReason != llm.StopReasonError || !strings.Contains(final.ErrorMessage, "unexpected EOF") || final.TextContent() != "Hello" {
		t.Errorf("final %s %q %q", final.StopReason, final.ErrorMessage, final.TextContent())
	}
	f, _ := providertest.LoadFixture("testdata", "text")
	f.Body = []byte(strings.Replace(string(f.Body), `"done_reason":"stop"`, `"done_reason":"length"`, 1))
	srv := providertest.NewServer(t, f)
	_, final = providertest.Collect(t, context.Background(), New(), testModel(srv.URL, "qwen3:14b", false), hello(), nil)
	if final.StopReason != llm.StopReasonLength {
		t.Errorf("done_reason length → %s", final.StopReason)
	}
}

func TestToolCallsWholeAndIDs(t *testing.T) {
	final, _ := run(t, "two_tool_calls", testModel("", "qwen3:14b", false), hello(), nil)
	calls := final.ToolCalls()
	if final.StopReason != llm.StopReasonToolUse || len(calls) != 2 || calls[0].ID == "" || calls[0].ID == calls[1].ID {
		t.Fatalf("calls %+v", calls)
	}
	final, _ = run(t, "tool_call", testModel("", "qwen3:14b", false), hello(), nil)
	if final.ToolCalls()[0].ID != "call_u8ctmz3k" {
		t.Errorf("server id not kept: %+v", final.ToolCalls())
	}
}
