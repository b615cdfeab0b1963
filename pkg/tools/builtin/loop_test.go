package builtin

import (
	"context"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/execpolicy"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/faux"
	"github.com/agentbus/agentbus/pkg/loop"
	"github.com/agentbus/agentbus/pkg/tools"
)

// TestThroughAgentLoop runs built-in tools from a scripted model through the real agent loop:
// schema validation by the loop, execution through the adapter, error results back to the
// model, the owner-approval signal and the ask_user contract in the results' details.
func TestThroughAgentLoop(t *testing.T) {
	f := newFixture(t, func(c *Config) {
		c.Exec = verdictChecker{v: execpolicy.Verdict{Decision: execpolicy.Ask, Reason: "npm is not allowlisted", Pending: []string{"npm install"}}}
	})
	env := tools.Env{Platform: "web", Scope: tools.ScopePrivate, SenderRoles: []string{tools.RoleUser}}
	var all []tools.Tool
	for _, tl := range f.tools {
		all = append(all, tl)
	}
	p := faux.New(faux.WithResponses(
		faux.Response{ToolCalls: []llm.Content{
			llm.ToolCall("c1", "write_file", map[string]any{"path": "notes.txt", "content": "a a"}),
			llm.ToolCall("c2", "read_file", map[string]any{}), // missing required path: the loop refuses
		}},
		faux.Response{ToolCalls: []llm.Content{llm.ToolCall("c3", "edit_file", map[string]any{"path": "notes.txt", "old_string": "a", "new_string": "b"})}},
		faux.Response{ToolCalls: []llm.Content{llm.ToolCall("c4", "bash", map[string]any{"command": "npm install"})}},
		faux.Response{ToolCalls: []llm.Content{llm.ToolCall("c5", "ask_user", map[string]any{"question": "May I run npm install?"})}},
		faux.Response{Text: "Waiting for your answer."},
	))
	model := &llm.Model{ID: "faux-1", API: llm.APIFaux, Provider: "faux"}
	results := map[string]loop.ToolResult{}
	msgs, err := loop.Run(context.Background(), []llm.Message{llm.UserText("go", 1)},
		&loop.AgentContext{Tools: tools.ToAgentTools(tools.Filter(all, env), env)},
		&loop.Config{Model: model, StreamFn: p.Stream, ToolExecution: loop.Sequential},
		func(ev loop.Event) {
			if ev.Type == loop.EventToolExecutionEnd {
				results[ev.ToolCallID] = ev.Result
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	if last := msgs[len(msgs)-1]; last.TextContent() != "Waiting for your answer." {
		t.Fatalf("last message %+v", last)
	}
	text := func(id string) string {
		var b strings.Builder
		for _, c := range results[id].Content {
			b.WriteString(c.Text)
		}
		return b.String()
	}
	if r := results["c1"]; r.IsError || !strings.Contains(text("c1"), "Wrote 3 bytes") {
		t.Errorf("c1 %+v", r)
	}
	if r := results["c2"]; !r.IsError {
		t.Errorf("c2 without path should fail validation: %+v", r)
	}
	if r := results["c3"]; !r.IsError || !strings.Contains(text("c3"), "occurs 2 times") {
		t.Errorf("c3 %+v", r)
	}
	if r := results["c4"]; !r.IsError || !tools.NeedsOwner(r) || !strings.Contains(text("c4"), "ask_user") {
		t.Errorf("c4 %+v %s", r, r.Details)
	}
	if d, ok := tools.AskQuestion(tools.Result{Details: results["c5"].Details}); !ok || d.Ask != "May I run npm install?" {
		t.Errorf("c5 %s", results["c5"].Details)
	}
}
