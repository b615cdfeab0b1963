package tools

import (
	"context"
	"encoding/json"

	"github.com/agentbus/agentbus/pkg/loop"
)

// ToAgentTool binds t to the env of one turn and adapts it to the agent loop. Arguments
// arrive already validated by the loop. The result keeps Content, Details and IsError;
// NeedsOwner, which the loop has no field for, is added to Details as "needsOwner": true
// (Details that are not a JSON object are wrapped as {"details": ..., "needsOwner": true}),
// and the text of such results already tells the model to ask through ask_user.
func ToAgentTool(t Tool, env Env) loop.AgentTool {
	return loop.AgentTool{
		Tool:  t.LLM(),
		Label: t.Name,
		Execute: func(ctx context.Context, callID string, args map[string]any, onUpdate func(loop.ToolResult)) (loop.ToolResult, error) {
			call := Call{ID: callID, Args: args, Env: env}
			if onUpdate != nil {
				call.Update = func(r Result) { onUpdate(toLoopResult(r)) }
			}
			return toLoopResult(t.Run(ctx, call)), nil
		},
	}
}

// ToAgentTools adapts a list (see ToAgentTool).
func ToAgentTools(ts []Tool, env Env) []loop.AgentTool {
	out := make([]loop.AgentTool, len(ts))
	for i := range ts {
		out[i] = ToAgentTool(ts[i], env)
	}
	return out
}

func toLoopResult(r Result) loop.ToolResult {
	lr := loop.ToolResult{Content: r.Content, Details: r.Details, IsError: r.IsError}
	if r.NeedsOwner {
		lr.Details = withNeedsOwner(r.Details)
	}
	return lr
}

func withNeedsOwner(d json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if len(d) == 0 || json.Unmarshal(d, &m) != nil || m == nil {
		wrapped := map[string]any{"needsOwner": true}
		if len(d) > 0 {
			wrapped["details"] = d
		}
		b, _ := json.Marshal(wrapped)
		return b
	}
	m["needsOwner"] = json.RawMessage("true")
	b, _ := json.Marshal(m)
	return b
}

// NeedsOwner reports whether a loop result carries the owner-approval signal.
func NeedsOwner(r loop.ToolResult) bool {
	var m struct {
		NeedsOwner bool `json:"needsOwner"`
	}
	return json.Unmarshal(r.Details, &m) == nil && m.NeedsOwner
}
