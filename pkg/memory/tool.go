package memory

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/loop"
)

// ToolName is the in-process tool the housekeeping turn offers.
const ToolName = "memory_write"

// Tool is memory_write: append to (or replace) MEMORY.md, today's notes or AGENTS.md.
func (s *Store) Tool() loop.AgentTool {
	return loop.AgentTool{
		Tool: llm.Tool{
			Name: ToolName,
			Description: "Save durable notes. file: \"MEMORY.md\" (long-term facts, preferences, decisions), " +
				"\"today\" (today's notes) or \"AGENTS.md\" (operating guide and user preferences). " +
				"mode \"append\" (default) adds text; \"replace\" rewrites the file (use it to shorten a full file). SOUL.md is read-only.",
			Parameters: json.RawMessage(`{"type":"object","properties":{"file":{"type":"string","enum":["MEMORY.md","today","AGENTS.md"]},` +
				`"text":{"type":"string"},"mode":{"type":"string","enum":["append","replace"]}},"required":["file","text"]}`),
		},
		Label: "Memory",
		Execute: func(_ context.Context, _ string, args map[string]any, _ func(loop.ToolResult)) (loop.ToolResult, error) {
			file, _ := args["file"].(string)
			text, _ := args["text"].(string)
			mode, _ := args["mode"].(string)
			n, err := s.Write(file, text, mode == "replace")
			if err != nil {
				return loop.ToolResult{}, err
			}
			return loop.TextResult(fmt.Sprintf("saved %s (%d bytes)", file, n)), nil
		},
	}
}
