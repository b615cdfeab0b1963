package providertest

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/llm"
)

// ForeignThinking is the thinking of every foreign conversation; after a handoff it must reach
// the new provider as plain text.
const ForeignThinking = "I should look up the weather in Paris first."

// foreignSig marks every signature of a foreign conversation; none may reach another provider.
const foreignSig = "FOREIGNSIG"

// ForeignTurn is an assistant message as another API produced it (a thinking block with that
// API's signature, text, a tool call with that API's id format).
func ForeignTurn(api string) llm.Message {
	m := llm.Message{Role: llm.RoleAssistant, API: api, Provider: "other-" + api, Model: "other-model",
		StopReason: llm.StopReasonToolUse, Timestamp: now(), Usage: &llm.Usage{Input: 10, Output: 5, TotalTokens: 15}}
	think := llm.Content{Type: llm.ContentThinking, Thinking: ForeignThinking}
	call := llm.ToolCall("", WantToolName, map[string]any{"location": "Paris"})
	switch api {
	case llm.APIAnthropicMessages:
		think.ThinkingSignature = "EqQBCkgIARABGAIiQL" + foreignSig + "anthropic"
		call.ID = "toolu_01A09q90qw90lq917835lq9"
	case llm.APIOpenAIResponses:
		think.ThinkingSignature = `{"type":"reasoning","id":"rs_68b2","encrypted_content":"gAAAA` + foreignSig + `","summary":[]}`
		call.ID = "call_Xy12Ab34Cd56Ef78|fc_68b2c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0+/=="
	case llm.APIGoogleGenerative:
		call.ID = "get_weather_1732900000000_0"
		call.ThoughtSignature = "CiQB0e2Kb" + foreignSig + "google"
	case llm.APIOllamaChat:
		call.ID = "call_ollama_0"
	default:
		think.ThinkingSignature = "reasoning_content"
		call.ID = "call_9aB3xYzQ"
	}
	m.Content = []llm.Content{think, llm.Text("Let me check the weather."), call}
	return m
}

// foreignAPIs are the APIs a conversation can come from.
var foreignAPIs = []string{llm.APIAnthropicMessages, llm.APIOpenAIResponses, llm.APIGoogleGenerative, llm.APIOllamaChat, llm.APIOpenAICompletions}

// HandoffContext is a conversation in which prev made a tool call, the result came back and the
// user asked again; it is what another provider must accept.
func HandoffContext(prev llm.Message) *llm.Context {
	c := question("")
	msgs := []llm.Message{llm.UserText("Weather in Paris?", now()), prev}
	for _, tc := range prev.ToolCalls() {
		msgs = append(msgs, llm.Message{Role: llm.RoleToolResult, ToolCallID: tc.ID, ToolName: tc.Name,
			Timestamp: now(), Content: []llm.Content{llm.Text(ToolResultText)}})
	}
	c.Messages = append(msgs, llm.UserText("Thanks. And tomorrow?", now()))
	return c
}

func handoff(t *testing.T, h *Harness) {
	for _, api := range foreignAPIs {
		if api == h.API {
			continue
		}
		t.Run("from_"+api, func(t *testing.T) {
			prev := ForeignTurn(api)
			CheckHandoffRequest(t, h, prev, ForeignThinking, []string{foreignSig})
		})
	}
}

// CheckHandoffRequest sends HandoffContext(prev) to h and checks the request h's server got:
// valid JSON and UTF-8, prev's thinking present as text (thinkingText, if not empty), none of
// the forbidden strings (foreign signatures), the tool result present, and tool-call ids
// valid for h and consistent between call and result.
func CheckHandoffRequest(t *testing.T, h *Harness, prev llm.Message, thinkingText string, forbidden []string) {
	t.Helper()
	srv, model := h.setup(t, ScenarioText)
	_, final := Collect(t, context.Background(), h.Provider, model, HandoffContext(prev), h.options())
	wantDone(t, final, llm.StopReasonStop)
	body := srv.LastRequest()
	CheckRequestBody(t, body)
	if thinkingText != "" && !bytes.Contains(body, []byte(thinkingText)) {
		t.Errorf("foreign thinking not replayed as text: %.800s", body)
	}
	for _, f := range forbidden {
		if f != "" && bytes.Contains(body, []byte(f)) {
			t.Errorf("request carries foreign signature %q: %.800s", f, body)
		}
	}
	if !bytes.Contains(body, []byte(ToolResultText)) {
		t.Errorf("tool result missing: %.800s", body)
	}
	if h.RequestToolCallIDs == nil {
		return
	}
	ids := h.RequestToolCallIDs(body)
	if len(ids) < 2 {
		t.Fatalf("tool-call ids in request %v, want a call and its result", ids)
	}
	valid := h.ValidToolCallID
	if valid == nil {
		valid = func(id string) bool { return id != "" }
	}
	for _, id := range ids {
		if !valid(id) {
			t.Errorf("tool-call id %q is not valid for %s", id, h.API)
		}
		if id != ids[0] {
			t.Errorf("call and result ids differ: %v", ids)
		}
	}
}

// RunHandoff is the cross-provider matrix: each harness's recorded thinking and tool-call
// output becomes one assistant message, which is replayed to every other harness.
func RunHandoff(t *testing.T, hs ...Harness) {
	for i := range hs {
		src := &hs[i]
		if !src.wire() {
			continue
		}
		_, think, _ := src.call(t, ScenarioThinking, question("What is 2+2?"))
		_, tool, _ := src.call(t, ScenarioToolCall, question("Weather in Paris?"))
		if think.StopReason != llm.StopReasonStop || tool.StopReason != llm.StopReasonToolUse {
			t.Fatalf("%s: source fixtures failed: %s / %s", src.API, think.ErrorMessage, tool.ErrorMessage)
		}
		prev := *tool
		prev.Content = append(append([]llm.Content{}, think.Content...), tool.Content...)
		var thinkingText string
		var forbidden []string
		for _, c := range prev.Content {
			if c.Type == llm.ContentThinking && !c.Redacted && thinkingText == "" {
				thinkingText = c.Thinking
			}
			forbidden = append(forbidden, sigs(c)...)
		}
		for j := range hs {
			dst := &hs[j]
			if j == i || dst.API == src.API || !dst.wire() {
				continue
			}
			t.Run(fmt.Sprintf("%s_to_%s", src.API, dst.API), func(t *testing.T) {
				CheckHandoffRequest(t, dst, prev, firstLine(thinkingText), forbidden)
			})
		}
	}
}

// sigs returns the signatures of c long enough to be recognisable in a request body.
func sigs(c llm.Content) []string {
	var out []string
	for _, s := range []string{c.ThinkingSignature, c.ThoughtSignature, c.TextSignature} {
		if len(s) >= 16 {
			out = append(out, s)
		}
	}
	if c.Redacted && len(c.Thinking) >= 16 {
		out = append(out, c.Thinking)
	}
	return out
}

// firstLine keeps the comparison independent of how a provider escapes newlines.
func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 40 {
		s = s[:40]
	}
	return s
}
