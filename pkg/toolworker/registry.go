package toolworker

import (
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/tools"
)

// timeoutFor is the run limit of a tool on this worker.
func (h *Handle) timeoutFor(name string) time.Duration {
	if d, ok := h.opts.Timeouts[name]; ok && d > 0 {
		return d
	}
	return h.opts.DefaultTimeout
}

// Entry is the registry entry this worker announces for t (Workers and UpdatedAt unset).
func (h *Handle) Entry(t tools.Tool) events.ToolEntry {
	l := t.LLM()
	src := t.Source
	if src == "" {
		src = "builtin"
	}
	return events.ToolEntry{
		Name: t.Name, Description: t.Description, Parameters: l.Parameters,
		Platforms: t.Platforms, Scopes: t.Scopes, Roles: t.RequiredAnyRole,
		Idempotent: t.Idempotent, PreExecutable: t.PreExecutable, TimeoutMs: h.timeoutFor(t.Name).Milliseconds(), Source: src,
		Keywords: t.Keywords,
	}
}
