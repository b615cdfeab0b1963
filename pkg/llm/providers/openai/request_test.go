package openai

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/agentbus/agentbus/pkg/llm"
)

func ptr[T any](v T) *T { return &v }

// path walks a decoded JSON document: strings index objects, ints index arrays.
func path(v any, keys ...any) any {
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			a, ok := v.([]any)
			if !ok || k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

// toolTurn is a conversation with thinking, a tool call, its result (with an image) and a
// follow-up user message.
func toolTurn() *llm.Context {
	return &llm.Context{
		SystemPrompt: "Be helpful.",
		Messages: []llm.Message{
			llm.UserText("weather?", 1),
			{Role: llm.RoleAssistant, API: llm.APIOpenAICompletions, Provider: "test", Model: "test-model", StopReason: llm.StopReasonToolUse,
				Content: []llm.Content{
					{Type: llm.ContentThinking, Thinking: "need the tool", ThinkingSignature: "reasoning_content"},
					llm.Text("Let me check."),
					llm.ToolCall("call_1", "get_weather", map[string]any{"city": "Paris"}),
				}},
			{Role: llm.RoleToolResult, ToolCallID: "call_1", ToolName: "get_weather",
				Content: []llm.Content{llm.Text("sunny"), llm.Image("iVBORw0KGgo=", "image/png")}},
			llm.UserText("thanks", 4),
		},
		Tools: []llm.Tool{{Name: "get_weather", Description: "Weather for a city",
			Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)}},
	}
}

func TestRequestBody(t *testing.T) {
	tests := []struct {
		name   string
		model  func(*llm.Model)
		ctx    *llm.Context
		opts   *llm.StreamOptions
		expect map[string]any // JSON path (as a slice) -> value; nil value = must be absent
	}{
		{
			name: "defaults for a self-hosted server",
			ctx:  hello(),
			opts: &llm.StreamOptions{MaxTokens: 256, Temperature: ptr(0.2)},
			expect: map[string]any{
				`["model"]`:                          "test-model",
				`["stream"]`:                         true,
				`["stream_options","include_usage"]`: true,
				`["messages",0,"role"]`:              "system",
				`["messages",0,"content"]`:           "You are terse.",
				`["messages",1,"role"]`:              "user",
				`["messages",1,"content"]`:           "hi",
				`["max_tokens"]`:                     256.0,
				`["max_completion_tokens"]`:          nil,
				`["temperature"]`:                    0.2,
				`["store"]`:                          nil,
				`["reasoning_effort"]`:               nil,
			},
		},
		{
			name: "OpenAI reasoning model: developer role, max_completion_tokens, reasoning_effort",
			model: func(m *llm.Model) {
				m.Reasoning = true
				m.Compat = &llm.Compat{SupportsDeveloperRole: ptr(true), MaxTokensField: FieldMaxCompletionTokens, SupportsStore: ptr(true)}
			},
			ctx:  hello(),
			opts: &llm.StreamOptions{MaxTokens: 1000, Thinking: llm.ThinkingHigh},
			expect: map[string]any{
				`["messages",0,"role"]`:     "developer",
				`["max_completion_tokens"]`: 1000.0,
				`["max_tokens"]`:            nil,
				`["reasoning_effort"]`:      "high",
				`["store"]`:                 false,
			},
		},
		{
			name:  "developer role only for reasoning models",
			model: func(m *llm.Model) { m.Compat = &llm.Compat{SupportsDeveloperRole: ptr(true)} },
			ctx:   hello(),
			expect: map[string]any{
				`["messages",0,"role"]`: "system",
			},
		},
		{
			name:  "no usage in streaming",
			model: func(m *llm.Model) { m.Compat = &llm.Compat{SupportsUsageInStreaming: ptr(false)} },
			ctx:   hello(),
			expect: map[string]any{
				`["stream_options"]`: nil,
			},
		},
		{
			name: "tool round trip: thinking replayed in its field, tool result name, image after tool results",
			model: func(m *llm.Model) {
				m.Input = []string{llm.InputText, llm.InputImage}
				m.Compat = &llm.Compat{RequiresToolResultName: true}
			},
			ctx: toolTurn(),
			expect: map[string]any{
				`["messages",2,"role"]`:                                          "assistant",
				`["messages",2,"content"]`:                                       "Let me check.",
				`["messages",2,"reasoning_content"]`:                             "need the tool",
				`["messages",2,"tool_calls",0,"id"]`:                             "call_1",
				`["messages",2,"tool_calls",0,"type"]`:                           "function",
				`["messages",2,"tool_calls",0,"function","name"]`:                "get_weather",
				`["messages",2,"tool_calls",0,"function","arguments"]`:           `{"city":"Paris"}`,
				`["messages",3,"role"]`:                                          "tool",
				`["messages",3,"tool_call_id"]`:                                  "call_1",
				`["messages",3,"name"]`:                                          "get_weather",
				`["messages",3,"content"]`:                                       "sunny",
				`["messages",4,"role"]`:                                          "user",
				`["messages",4,"content",0,"text"]`:                              "Attached image(s) from tool result:",
				`["messages",4,"content",1,"image_url","url"]`:                   "data:image/png;base64,iVBORw0KGgo=",
				`["messages",5,"role"]`:                                          "user",
				`["messages",5,"content"]`:                                       "thanks",
				`["tools",0,"type"]`:                                             "function",
				`["tools",0,"function","name"]`:                                  "get_weather",
				`["tools",0,"function","description"]`:                           "Weather for a city",
				`["tools",0,"function","parameters","required",0]`:               "city",
				`["tools",0,"function","parameters","properties","city","type"]`: "string",
			},
		},
		{
			name: "thinking as text, no tool name, assistant after tool result, image dropped for text-only model",
			model: func(m *llm.Model) {
				m.Compat = &llm.Compat{RequiresThinkingAsText: true, RequiresAssistantAfterToolResult: true}
			},
			ctx: toolTurn(),
			expect: map[string]any{
				`["messages",2,"content"]`:           "need the tool\n\nLet me check.",
				`["messages",2,"reasoning_content"]`: nil,
				`["messages",3,"name"]`:              nil,
				`["messages",4,"role"]`:              "assistant",
				`["messages",5,"role"]`:              "user",
				`["messages",5,"content"]`:           "thanks",
			},
		},
		{
			name: "handoff from another model: thinking as text, aborted step and its results dropped",
			ctx: func() *llm.Context {
				c := toolTurn()
				c.Messages[1].Provider, c.Messages[1].Model = "other", "other-model"
				aborted := llm.Message{Role: llm.RoleAssistant, Provider: "test", Model: "test-model", API: llm.APIOpenAICompletions,
					StopReason: llm.StopReasonAborted, Content: []llm.Content{llm.ToolCall("call_x", "get_weather", nil)}}
				c.Messages = append(c.Messages, aborted,
					llm.Message{Role: llm.RoleToolResult, ToolCallID: "call_x", Content: []llm.Content{llm.Text("late")}},
					llm.UserText("again", 7))
				return c
			}(),
			expect: map[string]any{
				`["messages",2,"content"]`:           "need the tool\n\nLet me check.",
				`["messages",2,"reasoning_content"]`: nil,
				`["messages",4,"content"]`:           "thanks",
				`["messages",5,"role"]`:              "user",
				`["messages",5,"content"]`:           "again",
				`["messages",6]`:                     nil,
			},
		},
		{
			name: "zai thinking format",
			model: func(m *llm.Model) {
				m.Reasoning = true
				m.Compat = &llm.Compat{ThinkingFormat: ThinkingFormatZAI}
			},
			ctx:  hello(),
			opts: &llm.StreamOptions{Thinking: llm.ThinkingMedium},
			expect: map[string]any{
				`["thinking","type"]`:  "enabled",
				`["reasoning_effort"]`: nil,
			},
		},
		{
			name: "qwen thinking format, off",
			model: func(m *llm.Model) {
				m.Reasoning = true
				m.Compat = &llm.Compat{ThinkingFormat: ThinkingFormatQwen}
			},
			ctx: hello(),
			expect: map[string]any{
				`["enable_thinking"]`: false,
				`["thinking_budget"]`: nil,
			},
		},
		{
			name: "qwen thinking format, low",
			model: func(m *llm.Model) {
				m.Reasoning = true
				m.Compat = &llm.Compat{ThinkingFormat: ThinkingFormatQwen}
			},
			ctx:  hello(),
			opts: &llm.StreamOptions{Thinking: llm.ThinkingLow},
			expect: map[string]any{
				`["enable_thinking"]`: true,
				`["thinking_budget"]`: 2048.0,
			},
		},
		{
			name: "user image to a vision model",
			model: func(m *llm.Model) {
				m.Input = []string{llm.InputText, llm.InputImage}
			},
			ctx: &llm.Context{Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Content{
				llm.Text("what is this?"), llm.Image("R0lGOD", "image/gif")}}}},
			expect: map[string]any{
				`["messages",0,"role"]`:                        "user",
				`["messages",0,"content",0,"type"]`:            "text",
				`["messages",0,"content",1,"type"]`:            "image_url",
				`["messages",0,"content",1,"image_url","url"]`: "data:image/gif;base64,R0lGOD",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, reply{fixture: "text.sse"})
			model := testModel(srv)
			if tt.model != nil {
				tt.model(model)
			}
			_, _, m := collect(t, testProvider().Stream(context.Background(), model, tt.ctx, tt.opts))
			if m.StopReason != llm.StopReasonStop {
				t.Fatalf("stream failed: %s", m.ErrorMessage)
			}
			body := srv.lastBody(t)
			for p, want := range tt.expect {
				var keys []any
				if err := json.Unmarshal([]byte(p), &keys); err != nil {
					t.Fatal(err)
				}
				for i, k := range keys {
					if f, ok := k.(float64); ok {
						keys[i] = int(f)
					}
				}
				if got := path(body, keys...); !reflect.DeepEqual(got, want) {
					t.Errorf("%s = %#v, want %#v", p, got, want)
				}
			}
			if t.Failed() {
				b, _ := json.MarshalIndent(body, "", "  ")
				t.Logf("request body:\n%s", b)
			}
		})
	}
}

func TestRequestHeaders(t *testing.T) {
	srv := newServer(t, reply{fixture: "text.sse"})
	model := testModel(srv)
	model.Headers = map[string]string{"X-Model": "m", "X-Both": "model"}
	p := New(WithHeaders(map[string]string{"X-Provider": "p", "X-Both": "provider"}), WithLogger(quiet))
	opts := &llm.StreamOptions{APIKey: "k", Headers: map[string]string{"X-Call": "c"}}
	_, _, m := collect(t, p.Stream(context.Background(), model, hello(), opts))
	if m.StopReason != llm.StopReasonStop {
		t.Fatal(m.ErrorMessage)
	}
	h := srv.headers[0]
	for k, want := range map[string]string{"X-Model": "m", "X-Provider": "p", "X-Call": "c", "X-Both": "model", "Authorization": "Bearer k"} {
		if got := h.Get(k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
}

func TestDetectCompat(t *testing.T) {
	tests := []struct {
		base string
		want compat
	}{
		{"", compat{developerRole: true, store: true, promptCacheKey: true, usageInStreaming: true, reasoningEffort: true, maxTokensField: FieldMaxCompletionTokens, thinkingFormat: ThinkingFormatOpenAI}},
		{"https://api.deepseek.com/v1", compat{usageInStreaming: true, maxTokensField: FieldMaxTokens, thinkingFormat: ThinkingFormatOpenAI}},
		{"https://open.bigmodel.cn/api/paas/v4", compat{usageInStreaming: true, reasoningEffort: true, maxTokensField: FieldMaxTokens, thinkingFormat: ThinkingFormatZAI}},
		{"https://dashscope.aliyuncs.com/compatible-mode/v1", compat{usageInStreaming: true, reasoningEffort: true, maxTokensField: FieldMaxTokens, thinkingFormat: ThinkingFormatQwen}},
		{"http://localhost:8000/v1", compat{usageInStreaming: true, reasoningEffort: true, maxTokensField: FieldMaxTokens, thinkingFormat: ThinkingFormatOpenAI}},
	}
	for _, tt := range tests {
		if got := detectCompat(tt.base); got != tt.want {
			t.Errorf("detectCompat(%q) = %+v, want %+v", tt.base, got, tt.want)
		}
	}
}
