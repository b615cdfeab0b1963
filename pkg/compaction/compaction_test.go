package compaction

import (
	"context"
	"iter"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/llm"
)

func user(s string) llm.Message { return llm.UserText(s, 1) }
func asst(s string) llm.Message {
	return llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.Text(s)}, StopReason: llm.StopReasonStop}
}
func call(id string) llm.Message {
	return llm.Message{Role: llm.RoleAssistant, StopReason: llm.StopReasonToolUse,
		Content: []llm.Content{{Type: llm.ContentToolCall, ID: id, Name: "bash", Arguments: map[string]any{"cmd": "ls"}}}}
}
func result(id, text string) llm.Message {
	return llm.Message{Role: llm.RoleToolResult, ToolCallID: id, ToolName: "bash", Content: []llm.Content{llm.Text(text)}}
}

func TestFindCut(t *testing.T) {
	big := strings.Repeat("x", 400) // ~104 tokens
	cases := []struct {
		name     string
		msgs     []llm.Message
		s        Settings
		boundary func(int) bool
		want     int
	}{
		{"all fits the keep budget", []llm.Message{user("a"), asst("b")}, Settings{KeepRecentTokens: 1000, MinKeepCount: 1, ContextWindow: 100000}, nil, 0},
		{"keeps the newest budget", []llm.Message{user(big), asst(big), user(big), asst(big)}, Settings{KeepRecentTokens: 200, MinKeepCount: 1, ContextWindow: 100000}, nil, 2},
		{"min keep count wins over a small budget", []llm.Message{user(big), asst(big), user(big), asst(big)}, Settings{KeepRecentTokens: 1, MinKeepCount: 3, ContextWindow: 100000}, nil, 1},
		{"never cuts before a tool result", []llm.Message{user(big), call("c1"), result("c1", big), asst(big)}, Settings{KeepRecentTokens: 200, MinKeepCount: 1, ContextWindow: 100000}, nil, 1},
		{"only on record boundaries", []llm.Message{user(big), asst(big), user(big), asst(big), user(big), asst(big)}, Settings{KeepRecentTokens: 100, MinKeepCount: 1, ContextWindow: 100000},
			func(k int) bool { return k%2 == 0 }, 4},
		{"one record: nothing to cut", []llm.Message{user(big), asst(big), user(big)}, Settings{KeepRecentTokens: 100, MinKeepCount: 1, ContextWindow: 100000},
			func(k int) bool { return false }, 0},
		{"keep budget clamped to the window", []llm.Message{user(big), asst(big), user(big), asst(big)}, Settings{KeepRecentTokens: 20000, MinKeepCount: 1, ContextWindow: 800}, nil, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := FindCut(c.msgs, c.s, c.boundary); got != c.want {
				t.Fatalf("FindCut = %d, want %d", got, c.want)
			}
		})
	}
}

func TestShouldCompact(t *testing.T) {
	cases := []struct {
		s      Settings
		tokens int
		want   bool
	}{
		{Settings{Enabled: true, Auto: true, ContextWindow: 8000, ReserveTokens: 16384}, 5999, false}, // reserve clamped to 2000
		{Settings{Enabled: true, Auto: true, ContextWindow: 8000, ReserveTokens: 16384}, 6001, true},
		{Settings{Enabled: true, Auto: false, ContextWindow: 8000}, 9000, false},
		{Settings{Enabled: false, Auto: true, ContextWindow: 8000}, 9000, false},
		{Settings{Enabled: true, Auto: true}, 1 << 30, false}, // window unknown
	}
	for _, c := range cases {
		if got := c.s.ShouldCompact(c.tokens); got != c.want {
			t.Errorf("%+v ShouldCompact(%d) = %v, want %v", c.s, c.tokens, got, c.want)
		}
	}
}

func TestContextTokensPrefersUsage(t *testing.T) {
	a := asst("ok")
	a.Usage = &llm.Usage{Input: 5000, Output: 20}
	msgs := []llm.Message{user("hi"), a, user(strings.Repeat("y", 400))}
	if got, want := ContextTokens(msgs), 5020+EstimateTokens(&msgs[2]); got != want {
		t.Fatalf("ContextTokens = %d, want %d", got, want)
	}
	failed := asst("")
	failed.StopReason, failed.Usage = llm.StopReasonError, &llm.Usage{Input: 99999}
	if got := ContextTokens([]llm.Message{user("hi"), failed}); got >= 99999 {
		t.Fatalf("an errored message's usage counted: %d", got)
	}
}

func TestMicro(t *testing.T) {
	old := strings.Repeat("old output ", 100)
	msgs := []llm.Message{user("q"), call("c1"), result("c1", old), asst("a"), user("q2"), call("c2"), result("c2", old), asst("b")}
	orig := slices.Clone(msgs)
	out := Micro(msgs, MicroOptions{KeepRecentTokens: 300})
	if len(out) != len(msgs) {
		t.Fatalf("length changed: %d -> %d", len(msgs), len(out))
	}
	if got := out[2].TextContent(); !strings.Contains(got, "elided") || out[2].ToolCallID != "c1" {
		t.Fatalf("old result not elided or lost its call id: %+v", out[2])
	}
	if out[6].TextContent() != old {
		t.Fatalf("recent result changed: %q", out[6].TextContent())
	}
	if msgs[2].TextContent() != orig[2].TextContent() {
		t.Fatal("Micro modified its input")
	}
	// A huge block is cut in the middle on character boundaries.
	huge := strings.Repeat("汉字", 5000)
	out = Micro([]llm.Message{user(huge)}, MicroOptions{KeepRecentTokens: 1 << 20, MaxBlockBytes: 3000})
	got := out[0].TextContent()
	if len(got) > 3200 || !utf8.ValidString(got) || !strings.Contains(got, "elided") {
		t.Fatalf("capped block: %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
}

func TestTruncateUTF8(t *testing.T) {
	for n := 0; n < 10; n++ {
		s := TruncateUTF8("aé汉🙂z", n)
		if len(s) > n || !utf8.ValidString(s) {
			t.Fatalf("TruncateUTF8(%d) = %q", n, s)
		}
	}
}

func TestIdentifiers(t *testing.T) {
	text := "Order #48213 for alice, see https://example.com/t/PR-1234?x=1. Edit src/main.go and notes.txt; " +
		"call_07 failed twice, costs 1,250.50 euro, e.g. later. Version v2 and 42 are small."
	got := Identifiers(text)
	for _, want := range []string{"#48213", "https://example.com/t/PR-1234?x=1", "src/main.go", "notes.txt", "call_07", "1,250.50"} {
		if !slices.Contains(got, want) {
			t.Errorf("missing %q in %q", want, got)
		}
	}
	for _, not := range []string{"e.g", "42", "alice", "v2"} {
		if slices.Contains(got, not) {
			t.Errorf("%q is not an identifier: %q", not, got)
		}
	}
}

// scripted answers every call with text, recording the prompt.
func scripted(text string, seen *string) StreamFunc {
	return func(_ context.Context, m *llm.Model, c *llm.Context, _ *llm.StreamOptions) iter.Seq[llm.Event] {
		*seen = c.Messages[0].TextContent()
		return func(yield func(llm.Event) bool) {
			msg := llm.NewAssistant(m)
			msg.Content = []llm.Content{llm.Text(text)}
			msg.StopReason = llm.StopReasonStop
			yield(llm.Event{Type: llm.EventDone, Message: msg})
		}
	}
}

func TestSummarizeRestoresIdentifiers(t *testing.T) {
	var prompt string
	r := Request{
		Model:        &llm.Model{ID: "m", Provider: "p", ContextWindow: 8000},
		Stream:       scripted("## Goal\nAlice wants a refund for her order.", &prompt),
		Previous:     "Earlier: ticket T-9001 opened.",
		Messages:     []llm.Message{user("refund order 58211 please, receipt at https://shop.example/r/58211"), asst("Refund filed as RF-77.")},
		Instructions: "focus on refunds",
	}
	res, err := Summarize(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"T-9001", "58211", "https://shop.example/r/58211", "RF-77"} {
		if !strings.Contains(res.Text, id) {
			t.Errorf("summary lost %q: %s", id, res.Text)
		}
		if !slices.Contains(res.Restored, id) {
			t.Errorf("%q not reported restored: %q", id, res.Restored)
		}
	}
	for _, want := range []string{"T-9001", "refund order 58211", "focus on refunds"} {
		if !strings.Contains(prompt, want) {
			t.Errorf("prompt lacks %q", want)
		}
	}
}

func TestSummarizeFailure(t *testing.T) {
	fail := func(_ context.Context, m *llm.Model, _ *llm.Context, _ *llm.StreamOptions) iter.Seq[llm.Event] {
		return func(yield func(llm.Event) bool) {
			msg := llm.NewAssistant(m)
			msg.StopReason, msg.ErrorMessage = llm.StopReasonError, "503 overloaded"
			yield(llm.Event{Type: llm.EventError, Message: msg})
		}
	}
	for name, s := range map[string]StreamFunc{"error": fail, "empty": scripted("  ", new(string))} {
		t.Run(name, func(t *testing.T) {
			_, err := Summarize(context.Background(), Request{Model: &llm.Model{ID: "m"}, Stream: s, Messages: []llm.Message{user("hi")}})
			if err == nil || !strings.Contains(err.Error(), "summary failed") {
				t.Fatalf("err = %v", err)
			}
		})
	}
}

// TargetTokens becomes a length the summarizer is asked to stay under (in words, which models
// count better); without it the prompt sets none.
func TestSummarizeTargetLength(t *testing.T) {
	for _, c := range []struct {
		target int
		want   string
	}{
		{800, "Keep the summary under about 600 words."},
		{20, "Keep the summary under about 50 words."},
		{0, ""},
	} {
		var prompt string
		_, err := Summarize(context.Background(), Request{Model: &llm.Model{ID: "m"}, Stream: scripted("## Goal\nchat", &prompt),
			Messages: []llm.Message{user("hi"), asst("hello")}, TargetTokens: c.target})
		if err != nil {
			t.Fatal(err)
		}
		if c.want == "" && strings.Contains(prompt, "Keep the summary under") || c.want != "" && !strings.Contains(prompt, c.want) {
			t.Errorf("target %d: prompt %q, want %q", c.target, prompt, c.want)
		}
	}
}
