package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/agentbus/agentbus/pkg/llm"
)

// sdkBody is what openai-go sends for params (the pre-issue-40 path): the SDK's encoding with
// "stream": true set on top, as ChatCompletionService.NewStreaming does.
func sdkBody(t testing.TB, params openai.ChatCompletionNewParams) map[string]any {
	t.Helper()
	raw, err := json.Marshal(params)
	if err != nil {
		t.Fatalf("SDK encoding: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("SDK body is not a JSON object: %v: %s", err, raw)
	}
	m["stream"] = true
	return m
}

// encodeCases are conversations covering every block, role and string shape the encoder
// handles.
func encodeCases() map[string]*llm.Context {
	weird := "quote \" backslash \\ nl \n cr \r tab \t bell \a nul \x00 esc \x1b html <b>&amp;</b> " +
		"sep \u2028 \u2029 bad utf8 \xff\xfe end \xe2\x82 café 漢字 🎉 \u007f"
	toolWithNilArgs := toolTurn()
	toolWithNilArgs.Messages[1].Content = append(toolWithNilArgs.Messages[1].Content,
		llm.ToolCall("call_2", "noop", nil),
		llm.ToolCall("call_3", "nested", map[string]any{"z": 1.5, "a": []any{"x", weird, nil, true, false, []any{}, map[string]any{}},
			"m": map[string]any{"k": "<v>", "": "empty key", "<&>": "html key"},
			"n": []any{0.0, -0.0, 1e-7, 1e-6, 123456789.125, 1e20, 1e21, -2.5e-300, 1.7976931348623157e308, json.Number("12345678901234567890")}}),
		llm.ToolCall("call_4", "nan", map[string]any{"bad": math.NaN()}),
		llm.ToolCall("call_5", "odd", map[string]any{"t": struct{ A int }{1}, "i": 7}))
	toolWithNilArgs.Messages = append(toolWithNilArgs.Messages[:3],
		llm.Message{Role: llm.RoleToolResult, ToolCallID: "call_2", ToolName: "noop", Content: []llm.Content{llm.Image("AAAA", "image/jpeg")}},
		llm.Message{Role: llm.RoleToolResult, ToolCallID: "call_3", ToolName: "nested", Content: []llm.Content{llm.Text(weird), llm.Text(" two")}},
		llm.Message{Role: llm.RoleToolResult, ToolCallID: "call_4", ToolName: "nan", Content: []llm.Content{llm.Text("x")}},
		llm.Message{Role: llm.RoleToolResult, ToolCallID: "call_5", ToolName: "odd", Content: []llm.Content{llm.Text("y")}},
		llm.UserText("ok", 9))
	toolWithNilArgs.Tools = append(toolWithNilArgs.Tools,
		llm.Tool{Name: "noop", Parameters: nil},
		llm.Tool{Name: "nullschema", Description: weird, Parameters: json.RawMessage(" null ")},
		llm.Tool{Name: "emptyschema", Parameters: json.RawMessage(" { } ")},
		llm.Tool{Name: "nested", Parameters: json.RawMessage(`{
			"type": "object", "description": "<html> & \u2028",
			"properties": {"z": {"type": "number", "maximum": 12345678901234567890, "minimum": -1e-7}, "a": {"type": "array"}},
			"additionalProperties": false}`)})

	handoff := toolTurn()
	handoff.Messages[1].Provider, handoff.Messages[1].Model = "other", "other-model"
	handoff.Messages = append(handoff.Messages,
		llm.Message{Role: llm.RoleAssistant, Provider: "test", Model: "test-model", API: llm.APIOpenAICompletions,
			StopReason: llm.StopReasonAborted, Content: []llm.Content{llm.ToolCall("call_x", "get_weather", nil)}},
		llm.Message{Role: llm.RoleToolResult, ToolCallID: "call_x", Content: []llm.Content{llm.Text("late")}},
		llm.UserText("again", 7),
		// An assistant message with nothing to replay (redacted and blank thinking) is skipped.
		llm.Message{Role: llm.RoleAssistant, Provider: "test", Model: "test-model", API: llm.APIOpenAICompletions, StopReason: llm.StopReasonStop,
			Content: []llm.Content{{Type: llm.ContentThinking, Thinking: "secret", Redacted: true}, {Type: llm.ContentThinking, Thinking: "  "}, llm.Text("")}},
		// Thinking in several blocks and fields, text in several blocks.
		llm.Message{Role: llm.RoleAssistant, Provider: "test", Model: "test-model", API: llm.APIOpenAICompletions, StopReason: llm.StopReasonStop,
			Content: []llm.Content{
				{Type: llm.ContentThinking, Thinking: "first", ThinkingSignature: "not-a-field"},
				{Type: llm.ContentThinking, Thinking: weird, ThinkingSignature: "reasoning"},
				llm.Text("a"), llm.Text(""), llm.Text(weird)}},
		// Thinking only, no field known: nothing to send unless thinking goes as text.
		llm.Message{Role: llm.RoleAssistant, Provider: "test", Model: "test-model", API: llm.APIOpenAICompletions, StopReason: llm.StopReasonStop,
			Content: []llm.Content{{Type: llm.ContentThinking, Thinking: "alone", ThinkingSignature: "sig-xyz"}}},
		llm.UserText("", 10), // empty: skipped
		llm.UserText(weird, 11))

	media := &llm.Context{SystemPrompt: weird, Messages: []llm.Message{
		{Role: llm.RoleUser, Content: []llm.Content{
			llm.Text("look"), llm.Image("R0lGOD", "image/gif"), llm.Audio("UklGRg==", "audio/wav"), llm.Audio("SUQz", " Audio/MPEG "),
			llm.Audio("T2dn", "audio/ogg"), llm.Video("AAAA", "video/mp4"), llm.Text(weird)}},
		{Role: llm.RoleUser, Content: []llm.Content{llm.Image("R0lGOD", "image/gif")}},
		{Role: "custom-role", Content: []llm.Content{llm.Text("never sent")}},
	}}

	return map[string]*llm.Context{
		"hello":      hello(),
		"empty":      {},
		"tool turn":  toolTurn(),
		"tool edges": toolWithNilArgs,
		"handoff":    handoff,
		"media":      media,
	}
}

// TestRequestBodyMatchesSDK checks that the hand-written request encoder sends what the SDK
// sent for the same call: both bodies decoded and compared, for every conversation above
// against every kind of model (text only, vision, audio, reasoning) and every compat switch and
// option that changes the request.
func TestRequestBodyMatchesSDK(t *testing.T) {
	models := map[string]*llm.Model{
		"text":      {ID: "m-text", API: llm.APIOpenAICompletions, Provider: "test"},
		"vision":    {ID: "m-vision", API: llm.APIOpenAICompletions, Provider: "test", Input: []string{llm.InputText, llm.InputImage}},
		"audio":     {ID: "m-audio", API: llm.APIOpenAICompletions, Provider: "test", Input: []string{llm.InputText, llm.InputAudio}},
		"reasoning": {ID: "test-model", API: llm.APIOpenAICompletions, Provider: "test", Reasoning: true, Input: []string{llm.InputText, llm.InputImage, llm.InputAudio}},
	}
	base := compat{usageInStreaming: true, reasoningEffort: true, maxTokensField: FieldMaxTokens, thinkingFormat: ThinkingFormatOpenAI}
	compats := map[string]compat{"self-hosted": base, "openai": detectCompat("")}
	for name, f := range map[string]func(*compat){
		"no usage":            func(c *compat) { c.usageInStreaming = false },
		"no effort":           func(c *compat) { c.reasoningEffort = false },
		"tool result name":    func(c *compat) { c.toolResultName = true },
		"assistant after":     func(c *compat) { c.assistantAfterToolResult = true },
		"thinking as text":    func(c *compat) { c.thinkingAsText = true },
		"zai":                 func(c *compat) { c.thinkingFormat = ThinkingFormatZAI },
		"qwen":                func(c *compat) { c.thinkingFormat = ThinkingFormatQwen },
		"developer, store":    func(c *compat) { c.developerRole, c.store = true, true },
		"max_compl, cachekey": func(c *compat) { c.maxTokensField, c.promptCacheKey = FieldMaxCompletionTokens, true },
	} {
		c := base
		f(&c)
		compats[name] = c
	}
	optss := map[string]*llm.StreamOptions{
		"none": {},
		"all":  {MaxTokens: 4096, Temperature: ptr(0.7), SessionID: "sess-\"1\"", Thinking: llm.ThinkingHigh},
		"low":  {MaxTokens: 1, Temperature: ptr(0.0), Thinking: llm.ThinkingLow, ThinkingBudgets: llm.ThinkingBudgets{Low: 777}},
		"odd":  {Temperature: ptr(1e-9), Thinking: llm.ThinkingXHigh},
		"big":  {Temperature: ptr(1e21), Thinking: llm.ThinkingMinimal},
	}
	n := 0
	for cname, c := range encodeCases() {
		for mname, model := range models {
			for cpname, cp := range compats {
				for oname, opts := range optss {
					n++
					params, refErr := buildParams(model, c, opts, cp)
					body, err := requestBody(model, c, opts, cp)
					if (refErr != nil) != (err != nil) {
						t.Fatalf("%s/%s/%s/%s: SDK path error %v, ours %v", cname, mname, cpname, oname, refErr, err)
					}
					if err != nil {
						continue
					}
					want := sdkBody(t, params)
					var got map[string]any
					if err := json.Unmarshal(body, &got); err != nil {
						t.Fatalf("%s/%s/%s/%s: our body is not JSON: %v\n%s", cname, mname, cpname, oname, err, body)
					}
					if !reflect.DeepEqual(got, want) {
						w, _ := json.MarshalIndent(want, "", " ")
						g, _ := json.MarshalIndent(got, "", " ")
						t.Fatalf("%s/%s/%s/%s: bodies differ\nSDK:\n%s\nours:\n%s", cname, mname, cpname, oname, w, g)
					}
				}
			}
		}
	}
	t.Logf("%d calls compared", n)
}

// TestRequestBodyErrorsMatchSDK: what the SDK path refused, the encoder refuses, with the same
// message prefix.
func TestRequestBodyErrorsMatchSDK(t *testing.T) {
	model := &llm.Model{ID: "m", API: llm.APIOpenAICompletions, Provider: "test"}
	base := compat{usageInStreaming: true, maxTokensField: FieldMaxTokens, thinkingFormat: ThinkingFormatOpenAI}
	badField, badFormat := base, base
	badField.maxTokensField = "max_tokenz"
	badFormat.thinkingFormat = "nope"
	for _, tt := range []struct {
		name   string
		params string
		cp     compat
		prefix string
	}{
		{"array schema", `[1]`, base, "tool t: parameters are not a JSON Schema object"},
		{"string schema", `"x"`, base, "tool t: parameters are not a JSON Schema object"},
		{"broken schema", `{"type":`, base, "tool t: parameters are not a JSON Schema object"},
		{"trailing garbage", `{} x`, base, "tool t: parameters are not a JSON Schema object"},
		{"max tokens field", `{}`, badField, `compat.maxTokensField "max_tokenz"`},
		{"thinking format", `{}`, badFormat, `compat.thinkingFormat "nope"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &llm.Context{Tools: []llm.Tool{{Name: "t", Parameters: json.RawMessage(tt.params)}}}
			_, refErr := buildParams(model, c, &llm.StreamOptions{}, tt.cp)
			_, err := requestBody(model, c, &llm.StreamOptions{}, tt.cp)
			if refErr == nil || err == nil {
				t.Fatalf("SDK path error %v, ours %v: want both", refErr, err)
			}
			if !strings.HasPrefix(refErr.Error(), tt.prefix) || !strings.HasPrefix(err.Error(), tt.prefix) {
				t.Errorf("errors %q (SDK path) and %q (ours), want both to start %q", refErr, err, tt.prefix)
			}
		})
	}
}

// TestWireMatchesSDK pins sdkBody's premise and the provider's own HTTP call on the real SDK:
// what NewStreaming puts on the wire for params is their encoding plus "stream": true, and
// the provider's request for the same conversation goes to the same URL (for each shape of
// base URL) with the same method, body, content type, accept and auth headers.
func TestWireMatchesSDK(t *testing.T) {
	type seen struct {
		url, method string
		header      http.Header
		body        map[string]any
	}
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Errorf("body: %v: %s", err, raw)
		}
		got = append(got, seen{r.URL.String(), r.Method, r.Header.Clone(), m})
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	defer srv.Close()
	opts := &llm.StreamOptions{MaxTokens: 9, Temperature: ptr(0.5), SessionID: "s", Thinking: llm.ThinkingMedium, APIKey: "k"}
	for _, base := range []string{"/v1", "/v1/", "", "/openai/v1?api-version=2024-10-21"} {
		t.Run(base, func(t *testing.T) {
			got = got[:0]
			model := &llm.Model{ID: "test-model", API: llm.APIOpenAICompletions, Provider: "test", Reasoning: true,
				Input: []string{llm.InputText, llm.InputImage}, BaseURL: srv.URL + base}
			cp := resolveCompat(model)
			params, err := buildParams(model, toolTurn(), opts, cp)
			if err != nil {
				t.Fatal(err)
			}
			svc := openai.NewChatCompletionService(option.WithBaseURL(model.BaseURL), option.WithAPIKey("k"), option.WithMaxRetries(0))
			_ = svc.NewStreaming(context.Background(), params).Close()
			for range New(WithLogger(quiet)).Stream(context.Background(), model, toolTurn(), opts) {
			}
			if len(got) != 2 {
				t.Fatalf("server saw %d requests, want 2", len(got))
			}
			sdk, ours := got[0], got[1]
			if want := sdkBody(t, params); !reflect.DeepEqual(sdk.body, want) {
				t.Errorf("SDK sent %v\nwant its encoding + stream: %v", sdk.body, want)
			}
			if !reflect.DeepEqual(ours.body, sdk.body) {
				t.Errorf("our body on the wire %v\nSDK's %v", ours.body, sdk.body)
			}
			if ours.url != sdk.url || ours.method != sdk.method {
				t.Errorf("we sent %s %s, the SDK %s %s", ours.method, ours.url, sdk.method, sdk.url)
			}
			for _, h := range []string{"Authorization", "Content-Type", "Accept"} {
				if ours.header.Get(h) != sdk.header.Get(h) {
					t.Errorf("header %s: ours %q, the SDK's %q", h, ours.header.Get(h), sdk.header.Get(h))
				}
			}
		})
	}
}
