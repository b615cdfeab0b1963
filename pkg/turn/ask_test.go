package turn

import (
	"testing"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/tools"
)

func TestAskedAndRecentTools(t *testing.T) {
	q := tools.AskResult("Which city?")
	res := func(name string, r tools.Result, isErr bool) llm.Message {
		return llm.Message{Role: llm.RoleToolResult, ToolName: name, ToolCallID: "c", Details: r.Details, IsError: isErr}
	}
	call := func(names ...string) llm.Message {
		m := llm.Message{Role: llm.RoleAssistant}
		for _, n := range names {
			m.Content = append(m.Content, llm.Content{Type: llm.ContentToolCall, ID: "c-" + n, Name: n})
		}
		return m
	}
	cases := []struct {
		name string
		msgs []llm.Message
		want bool
	}{
		{"ask_user result", []llm.Message{call("ask_user"), res("ask_user", q, false)}, true},
		{"beside another tool", []llm.Message{call("bash", "ask_user"), res("bash", tools.TextResult("x"), false), res("ask_user", q, false)}, true},
		{"failed ask_user", []llm.Message{call("ask_user"), res("ask_user", q, true)}, false},
		{"another tool's ask payload", []llm.Message{call("web_fetch"), res("web_fetch", q, false)}, false},
		{"an earlier batch", []llm.Message{call("ask_user"), res("ask_user", q, false), call("bash"), res("bash", tools.TextResult("x"), false)}, false},
	}
	for _, c := range cases {
		if _, got := asked(c.msgs); got != c.want {
			t.Errorf("%s: asked = %v, want %v", c.name, got, c.want)
		}
	}
	msgs := []llm.Message{call("web_fetch"), llm.UserText("a", 0), llm.UserText("b", 0), call("bash", "ask_user"), llm.UserText("c", 0), call("bash"), llm.UserText("d", 0), llm.UserText("e", 0)}
	if got := recentTools(msgs); len(got) != 2 || got[0] != "bash" || got[1] != "ask_user" {
		t.Errorf("recentTools = %v, want [bash ask_user] (web_fetch is too far back)", got)
	}
}
