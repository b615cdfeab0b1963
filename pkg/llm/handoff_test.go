package llm

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

func asst(api, provider, model string, stop StopReason, blocks ...Content) Message {
	return Message{Role: RoleAssistant, API: api, Provider: provider, Model: model, StopReason: stop, Content: blocks, Timestamp: 5}
}

func result(id, name, text string) Message {
	return Message{Role: RoleToolResult, ToolCallID: id, ToolName: name, Content: []Content{Text(text)}}
}

func thinking(text, sig string) Content {
	return Content{Type: ContentThinking, Thinking: text, ThinkingSignature: sig}
}

func TestTransformMessages(t *testing.T) {
	claude := &Model{ID: "claude-sonnet", API: APIAnthropicMessages, Provider: "anthropic", Input: []string{InputText, InputImage}}
	gpt := &Model{ID: "gpt-5", API: APIOpenAICompletions, Provider: "openai", Input: []string{InputText}}
	longID := "call_" + strings.Repeat("x", 70)
	respID := "call_abc|fc_0123456789"

	tests := []struct {
		name   string
		target *Model
		in     []Message
		want   []Message
	}{
		{
			name:   "same model keeps thinking and signatures",
			target: claude,
			in: []Message{
				UserText("hi", 1),
				asst(APIAnthropicMessages, "anthropic", "claude-sonnet", StopReasonStop,
					thinking("deep", "sig"), Content{Type: ContentThinking, Thinking: "opaque", Redacted: true}, Content{Type: ContentText, Text: "ok", TextSignature: "ts"}),
			},
			want: []Message{
				UserText("hi", 1),
				asst(APIAnthropicMessages, "anthropic", "claude-sonnet", StopReasonStop,
					thinking("deep", "sig"), Content{Type: ContentThinking, Thinking: "opaque", Redacted: true}, Content{Type: ContentText, Text: "ok", TextSignature: "ts"}),
			},
		},
		{
			name:   "other model: thinking becomes text, redacted and empty dropped, signatures dropped",
			target: gpt,
			in: []Message{
				asst(APIAnthropicMessages, "anthropic", "claude-sonnet", StopReasonStop,
					thinking("deep", "sig"), Content{Type: ContentThinking, Thinking: "opaque", Redacted: true}, thinking("  ", ""),
					Content{Type: ContentText, Text: "ok", TextSignature: "ts"}),
			},
			want: []Message{
				asst(APIAnthropicMessages, "anthropic", "claude-sonnet", StopReasonStop, Text("deep"), Text("ok")),
			},
		},
		{
			name:   "same api other model id counts as other model",
			target: claude,
			in:     []Message{asst(APIAnthropicMessages, "anthropic", "claude-opus", StopReasonStop, thinking("t", "sig"))},
			want:   []Message{asst(APIAnthropicMessages, "anthropic", "claude-opus", StopReasonStop, Text("t"))},
		},
		{
			name:   "errored and aborted assistant messages dropped with their results",
			target: claude,
			in: []Message{
				UserText("a", 1),
				asst(APIAnthropicMessages, "anthropic", "claude-sonnet", StopReasonError, Text("partial")),
				asst(APIAnthropicMessages, "anthropic", "claude-sonnet", StopReasonAborted, ToolCall("t1", "bash", nil)),
				result("t1", "bash", "late result"),
				UserText("b", 2),
			},
			want: []Message{UserText("a", 1), UserText("b", 2)},
		},
		{
			name:   "orphan tool calls get synthetic results before the next user message and at the end",
			target: claude,
			in: []Message{
				asst(APIAnthropicMessages, "anthropic", "claude-sonnet", StopReasonToolUse, ToolCall("a", "read", nil), ToolCall("b", "bash", nil)),
				result("b", "bash", "done"),
				UserText("next", 2),
				asst(APIAnthropicMessages, "anthropic", "claude-sonnet", StopReasonToolUse, ToolCall("c", "ls", nil)),
			},
			want: []Message{
				asst(APIAnthropicMessages, "anthropic", "claude-sonnet", StopReasonToolUse, ToolCall("a", "read", nil), ToolCall("b", "bash", nil)),
				result("b", "bash", "done"),
				{Role: RoleToolResult, ToolCallID: "a", ToolName: "read", IsError: true, Content: []Content{Text(NoResultText)}, Timestamp: 5},
				UserText("next", 2),
				asst(APIAnthropicMessages, "anthropic", "claude-sonnet", StopReasonToolUse, ToolCall("c", "ls", nil)),
				{Role: RoleToolResult, ToolCallID: "c", ToolName: "ls", IsError: true, Content: []Content{Text(NoResultText)}, Timestamp: 5},
			},
		},
		{
			name:   "stray and duplicate tool results dropped",
			target: claude,
			in: []Message{
				result("zz", "x", "stray"),
				asst(APIAnthropicMessages, "anthropic", "claude-sonnet", StopReasonToolUse, ToolCall("a", "read", nil)),
				result("a", "read", "1"),
				result("a", "read", "2"),
			},
			want: []Message{
				asst(APIAnthropicMessages, "anthropic", "claude-sonnet", StopReasonToolUse, ToolCall("a", "read", nil)),
				result("a", "read", "1"),
			},
		},
		{
			name:   "responses ids to anthropic: split, sanitized, results rewritten",
			target: claude,
			in: []Message{
				asst(APIOpenAIResponses, "openai", "gpt-5", StopReasonToolUse,
					Content{Type: ContentToolCall, ID: respID, Name: "bash", Arguments: map[string]any{}, ThoughtSignature: "x"},
					ToolCall("weird id/with:chars", "read", nil), ToolCall(longID, "ls", nil)),
				result(respID, "bash", "r1"),
				result("weird id/with:chars", "read", "r2"),
				result(longID, "ls", "r3"),
			},
			want: []Message{
				asst(APIOpenAIResponses, "openai", "gpt-5", StopReasonToolUse,
					ToolCall("call_abc", "bash", map[string]any{}), ToolCall("weird_id_with_chars", "read", nil), ToolCall(longID[:64], "ls", nil)),
				result("call_abc", "bash", "r1"),
				result("weird_id_with_chars", "read", "r2"),
				result(longID[:64], "ls", "r3"),
			},
		},
		{
			name:   "openai completions: 40 chars, collisions made unique",
			target: gpt,
			in: []Message{
				asst(APIAnthropicMessages, "anthropic", "claude", StopReasonToolUse,
					ToolCall(strings.Repeat("a", 50)+"1", "x", nil), ToolCall(strings.Repeat("a", 50)+"2", "y", nil)),
				result(strings.Repeat("a", 50)+"2", "y", "second"),
				result(strings.Repeat("a", 50)+"1", "x", "first"),
			},
			want: []Message{
				asst(APIAnthropicMessages, "anthropic", "claude", StopReasonToolUse,
					ToolCall(strings.Repeat("a", 40), "x", nil), ToolCall(strings.Repeat("a", 38)+"_2", "y", nil)),
				result(strings.Repeat("a", 38)+"_2", "y", "second"),
				result(strings.Repeat("a", 40), "x", "first"),
			},
		},
		{
			name:   "images stripped for a text-only target",
			target: gpt,
			in: []Message{
				{Role: RoleUser, Content: []Content{Text("look"), Image("AAAA", "image/png")}},
				{Role: "custom-note", Custom: json.RawMessage(`{}`)},
			},
			want: []Message{{Role: RoleUser, Content: []Content{Text("look"), Text(ImageOmittedText)}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, _ := json.Marshal(tt.in)
			got := TransformMessages(tt.in, tt.target)
			if after, _ := json.Marshal(tt.in); string(before) != string(after) {
				t.Fatal("input mutated")
			}
			g, _ := json.MarshalIndent(got, "", " ")
			w, _ := json.MarshalIndent(tt.want, "", " ")
			if string(g) != string(w) {
				t.Fatalf("got\n%s\nwant\n%s", g, w)
			}
		})
	}
}

func TestNormalizeToolCallID(t *testing.T) {
	tests := []struct{ api, in, want string }{
		{APIAnthropicMessages, "toolu_01ABC-x", "toolu_01ABC-x"},
		{APIAnthropicMessages, "call.1 2", "call_1_2"},
		{APIOpenAICompletions, "call_abc|fc_123", "call_abc"},
		{APIOpenAICompletions, strings.Repeat("z", 41), strings.Repeat("z", 40)},
		{APIGoogleGenerative, "any id/at all", "any id/at all"},
		{APIOllamaChat, "c|i", "c"},
		{APIAnthropicMessages, "|x", ""},
	}
	for _, tt := range tests {
		if got := NormalizeToolCallID(tt.api, tt.in); got != tt.want {
			t.Errorf("NormalizeToolCallID(%s, %q) = %q, want %q", tt.api, tt.in, got, tt.want)
		}
	}
	// An id normalized to nothing gets a generated one, with the result following.
	msgs := []Message{
		asst(APIOpenAIResponses, "openai", "gpt", StopReasonToolUse, ToolCall("|item", "x", nil)),
		result("|item", "x", "r"),
	}
	got := TransformMessages(msgs, &Model{ID: "c", API: APIAnthropicMessages})
	if id := got[0].Content[0].ID; id == "" || got[1].ToolCallID != id || got[1].IsError {
		t.Fatalf("generated id %q, result %+v", id, got[1])
	}
}

// TestTransformMessagesInvariants checks, over random conversations, what every provider needs:
// each tool call is answered exactly once before the next user or assistant message, every
// result answers a call of the step before it, no errored/aborted step survives, and ids are
// valid for the target.
func TestTransformMessagesInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ids := []string{"a", "b", "call_1|fc_1", "weird id", strings.Repeat("x", 70), ""}
	models := []*Model{
		{ID: "claude", API: APIAnthropicMessages, Provider: "anthropic"},
		{ID: "gpt", API: APIOpenAICompletions, Provider: "openai"},
	}
	for iter := 0; iter < 3000; iter++ {
		var msgs []Message
		for n := rng.IntN(10); n >= 0; n-- {
			switch rng.IntN(3) {
			case 0:
				msgs = append(msgs, UserText("u", 1))
			case 1:
				src := models[rng.IntN(2)]
				stops := []StopReason{StopReasonStop, StopReasonToolUse, StopReasonError, StopReasonAborted}
				m := asst(src.API, src.Provider, src.ID, stops[rng.IntN(4)], thinking("t", "s"))
				for k := rng.IntN(3); k > 0; k-- {
					m.Content = append(m.Content, ToolCall(ids[rng.IntN(len(ids))], "tool", nil))
				}
				msgs = append(msgs, m)
			case 2:
				msgs = append(msgs, result(ids[rng.IntN(len(ids))], "tool", "r"))
			}
		}
		target := models[rng.IntN(2)]
		out := TransformMessages(msgs, target)
		pending := map[string]bool{}
		check := func() {
			for id, answered := range pending {
				if !answered {
					t.Fatalf("iter %d: call %q unanswered\nin %+v\nout %+v", iter, id, msgs, out)
				}
			}
		}
		for _, m := range out {
			switch m.Role {
			case RoleUser:
				check()
				pending = map[string]bool{}
			case RoleAssistant:
				check()
				pending = map[string]bool{}
				if m.StopReason == StopReasonError || m.StopReason == StopReasonAborted {
					t.Fatalf("iter %d: failed step kept", iter)
				}
				for _, c := range m.ToolCalls() {
					same := m.Provider == target.Provider && m.API == target.API && m.Model == target.ID
					if c.ID == "" || !same && len(c.ID) > maxToolCallIDLen(target.API) {
						t.Fatalf("iter %d: bad id %q for %s", iter, c.ID, target.API)
					}
					if _, dup := pending[c.ID]; dup {
						t.Fatalf("iter %d: id %q twice in one step", iter, c.ID)
					}
					pending[c.ID] = false
				}
			case RoleToolResult:
				answered, ok := pending[m.ToolCallID]
				if !ok || answered {
					t.Fatalf("iter %d: result %q answers nothing pending\nout %+v", iter, m.ToolCallID, out)
				}
				pending[m.ToolCallID] = true
			}
		}
		check()
	}
}

// BenchmarkTransformMessages is the handoff pass every provider makes over the history on
// every model call: a same-model history of rounds of user message, tool call, tool result and
// answer.
func BenchmarkTransformMessages(b *testing.B) {
	target := &Model{ID: "m", API: APIOpenAICompletions, Provider: "p"}
	var msgs []Message
	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("call_%d", i)
		msgs = append(msgs, UserText("read it", int64(i)),
			Message{Role: RoleAssistant, API: target.API, Provider: target.Provider, Model: target.ID, StopReason: StopReasonToolUse,
				Content: []Content{Text("Reading."), ToolCall(id, "read_file", map[string]any{"path": "a.txt"})}},
			Message{Role: RoleToolResult, ToolCallID: id, ToolName: "read_file", Content: []Content{Text("contents")}},
			Message{Role: RoleAssistant, API: target.API, Provider: target.Provider, Model: target.ID, StopReason: StopReasonStop,
				Content: []Content{Text("Done.")}})
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if out := TransformMessages(msgs, target); len(out) != len(msgs) {
			b.Fatalf("%d messages out of %d", len(out), len(msgs))
		}
	}
}
