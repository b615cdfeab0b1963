package google

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providertest"
)

func testModel(base, id string) *llm.Model {
	if base != "" {
		base += "/v1beta"
	}
	return &llm.Model{ID: id, API: llm.APIGoogleGenerative, Provider: "google", BaseURL: base, Reasoning: true,
		Input: []string{"text", "image"}, Cost: llm.ModelCost{Input: 0.3, Output: 2.5, CacheRead: 0.03}}
}

func run(t *testing.T, fixture, id string, c *llm.Context, opts *llm.StreamOptions) (*llm.Message, map[string]any, *providertest.Server) {
	t.Helper()
	f, err := providertest.LoadFixture("testdata", fixture)
	if err != nil {
		t.Fatal(err)
	}
	srv := providertest.NewServer(t, f)
	if opts == nil {
		opts = &llm.StreamOptions{}
	}
	opts.APIKey = providertest.TestKey
	_, final := providertest.Collect(t, context.Background(), New(), testModel(srv.URL, id), c, opts)
	var req map[string]any
	_ = json.Unmarshal(srv.LastRequest(), &req)
	return final, req, srv
}

func hello() *llm.Context {
	return &llm.Context{SystemPrompt: "be brief", Messages: []llm.Message{llm.UserText("hi", 1)}}
}

func TestThoughtSignaturesRoundTrip(t *testing.T) {
	final, _, _ := run(t, "thinking", "gemini-2.5-flash", hello(), nil)
	if len(final.Content) != 2 || final.Content[0].Type != llm.ContentThinking || final.Content[1].TextSignature == "" {
		t.Fatalf("content %+v", final.Content)
	}
	u := final.Usage
	if u.Input != 12 || u.Output != 5+28 {
		t.Errorf("usage %+v (thoughts count as output)", u)
	}
	tool, _, _ := run(t, "tool_call", "gemini-2.5-flash", hello(), nil)
	if tool.Content[0].ThoughtSignature == "" {
		t.Fatalf("function call lost its thought signature")
	}
	c := hello()
	c.Messages = append(c.Messages, *final, *tool,
		llm.Message{Role: llm.RoleToolResult, ToolCallID: tool.Content[0].ID, ToolName: "get_weather", Content: []llm.Content{llm.Text("sunny")}})
	_, _, srv := run(t, "text", "gemini-2.5-flash", c, nil)
	body := string(srv.LastRequest())
	for _, want := range []string{`"thought":true`, `"thoughtSignature":"` + final.Content[1].TextSignature, `"thoughtSignature":"` + tool.Content[0].ThoughtSignature, `"functionResponse"`} {
		if !strings.Contains(body, want) {
			t.Errorf("replay lacks %s: %s", want, body)
		}
	}
	// The same conversation sent to another model drops the signatures.
	c.Messages[1].Model, c.Messages[2].Model = "gemini-2.0-flash", "gemini-2.0-flash"
	_, _, srv = run(t, "text", "gemini-2.5-flash", c, nil)
	if strings.Contains(string(srv.LastRequest()), "thoughtSignature") {
		t.Errorf("signatures of another model replayed")
	}
}

func TestThinkingConfig(t *testing.T) {
	tests := []struct {
		model string
		level llm.ThinkingLevel
		want  string
	}{
		{"gemini-2.5-flash", llm.ThinkingHigh, `"thinkingConfig":{"includeThoughts":true,"thinkingBudget":16384}`},
		{"gemini-2.5-flash", llm.ThinkingOff, `"thinkingConfig":{"thinkingBudget":0}`},
		{"gemini-3-pro-preview", llm.ThinkingLow, `"thinkingConfig":{"includeThoughts":true,"thinkingLevel":"LOW"}`},
	}
	for _, tt := range tests {
		_, _, srv := run(t, "text", tt.model, hello(), &llm.StreamOptions{Thinking: tt.level})
		if !strings.Contains(string(srv.LastRequest()), tt.want) {
			t.Errorf("%s/%s: want %s in %s", tt.model, tt.level, tt.want, srv.LastRequest())
		}
	}
}

func TestMissingArgsAndSynthesizedIDs(t *testing.T) {
	f, _ := providertest.LoadFixture("testdata", "two_tool_calls")
	f.Body = []byte(strings.Replace(string(f.Body), `,"args":{"location":"Tokyo"}`, "", 1))
	srv := providertest.NewServer(t, f)
	_, final := providertest.Collect(t, context.Background(), New(), testModel(srv.URL, "gemini-2.5-flash"), hello(), &llm.StreamOptions{APIKey: "k"})
	calls := final.ToolCalls()
	if len(calls) != 2 || calls[1].Arguments == nil || len(calls[1].Arguments) != 0 {
		t.Fatalf("calls %+v", calls)
	}
	if calls[0].ID == "" || calls[0].ID == calls[1].ID {
		t.Errorf("ids %q %q", calls[0].ID, calls[1].ID)
	}
}

func TestSafetyFinishIsError(t *testing.T) {
	final, _, _ := run(t, "safety", "gemini-2.5-flash", hello(), nil)
	if final.StopReason != llm.StopReasonError || !strings.Contains(final.ErrorMessage, "SAFETY") {
		t.Fatalf("final %s %q", final.StopReason, final.ErrorMessage)
	}
	if final.TextContent() != "I cannot" {
		t.Errorf("partial text lost: %q", final.TextContent())
	}
}

func TestOverflowErrorQuotedWithoutKey(t *testing.T) {
	// The key travels in x-goog-api-key; an error message must not carry it either.
	final, _, _ := run(t, "context_overflow", "gemini-2.5-flash", hello(), nil)
	if strings.Contains(final.ErrorMessage, providertest.TestKey) || !strings.Contains(final.ErrorMessage, "input token count") {
		t.Errorf("error %q", final.ErrorMessage)
	}
}

func TestGemini3ForeignCallsGetSkipSignature(t *testing.T) {
	c := hello()
	c.Messages = append(c.Messages,
		llm.Message{Role: llm.RoleAssistant, API: llm.APIAnthropicMessages, Provider: "anthropic", Model: "claude", StopReason: llm.StopReasonToolUse,
			Content: []llm.Content{llm.ToolCall("toolu_1", "get_weather", map[string]any{"location": "Paris"})}},
		llm.Message{Role: llm.RoleToolResult, ToolCallID: "toolu_1", ToolName: "get_weather", Content: []llm.Content{llm.Text("sunny")}},
	)
	_, _, srv := run(t, "text", "gemini-3-pro-preview", c, nil)
	if !strings.Contains(string(srv.LastRequest()), `"thoughtSignature":"`+SkipSignature+`"`) {
		t.Errorf("gemini 3: foreign call without the skip signature: %s", srv.LastRequest())
	}
	_, _, srv = run(t, "text", "gemini-2.5-flash", c, nil)
	if strings.Contains(string(srv.LastRequest()), SkipSignature) {
		t.Errorf("gemini 2.5 got the placeholder")
	}
}
