package tools

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/agentbus/agentbus/pkg/loop"
)

func TestToAgentTool(t *testing.T) {
	var seen Env
	tl := MustRaw("who", "", nil, func(_ context.Context, c Call) (Result, error) {
		seen = c.Env
		if c.Update != nil {
			c.Update(TextResult("working"))
		}
		if c.Args["ask"] == true {
			return Result{Content: TextResult("needs owner").Content, IsError: true, NeedsOwner: true, Details: json.RawMessage(`{"decision":"ask"}`)}, nil
		}
		return TextResult("id " + c.ID), nil
	})
	at := ToAgentTool(tl, Env{SenderID: "u1", Scope: ScopeGroup})
	if at.Name != "who" || string(at.Parameters) != `{"type":"object","properties":{}}` {
		t.Fatalf("%+v", at.Tool)
	}
	var updates []loop.ToolResult
	r, err := at.Execute(context.Background(), "call-7", map[string]any{}, func(p loop.ToolResult) { updates = append(updates, p) })
	if err != nil || r.IsError || r.Content[0].Text != "id call-7" || seen.SenderID != "u1" || len(updates) != 1 {
		t.Fatalf("%+v %v %+v", r, err, seen)
	}
	r, _ = at.Execute(context.Background(), "c", map[string]any{"ask": true}, nil)
	if !r.IsError || !NeedsOwner(r) || string(r.Details) != `{"decision":"ask","needsOwner":true}` {
		t.Fatalf("%s", r.Details)
	}
	if got := withNeedsOwner(json.RawMessage(`[1]`)); string(got) != `{"details":[1],"needsOwner":true}` {
		t.Fatal(string(got))
	}
	if NeedsOwner(loop.ToolResult{}) {
		t.Fatal("empty result needs no owner")
	}
}
