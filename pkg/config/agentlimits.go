package config

import (
	"fmt"
	"strings"
)

// AgentRateLimit is ai.agent.rateLimit: model calls one user may cause, per fixed window
// (minute, hour, day). 0 means no limit for that window. Masters are not limited unless
// IncludeMasters is set.
type AgentRateLimit struct {
	PerMinute      int  `yaml:"perMinute"`
	PerHour        int  `yaml:"perHour"`
	PerDay         int  `yaml:"perDay"`
	IncludeMasters bool `yaml:"includeMasters"`
}

// Enabled reports whether any window has a limit.
func (r AgentRateLimit) Enabled() bool { return r.PerMinute > 0 || r.PerHour > 0 || r.PerDay > 0 }

// validate reports negative limits through bad.
func (r AgentRateLimit) validate(bad func(string, ...any)) {
	if r.PerMinute < 0 || r.PerHour < 0 || r.PerDay < 0 {
		bad("ai.agent.rateLimit: perMinute, perHour and perDay must not be negative (0 = no limit)")
	}
}

// validate reports modelHarness entries with values no model could use.
func (m ModelHarness) validate(bad func(string, ...any)) {
	check := func(where string, h Harness) {
		switch h.ToolExecution {
		case "", "parallel", "sequential":
		default:
			bad("ai.agent.modelHarness.%s.toolExecution %q: want one of parallel, sequential", where, h.ToolExecution)
		}
		switch strings.ToLower(h.ModelSizeHint) {
		case "", "small", "medium", "large":
		default:
			bad("ai.agent.modelHarness.%s.modelSizeHint %q: want one of small, medium, large", where, h.ModelSizeHint)
		}
		if h.MaxTools < 0 || h.MaxSkills < 0 || h.MaxIterations < 0 || h.SkillInstructionMaxChars < 0 {
			bad("ai.agent.modelHarness.%s: maxIterations, maxTools, maxSkills and skillInstructionMaxChars must not be negative", where)
		}
	}
	for k, h := range m.ProviderPatterns {
		check("providerPatterns."+k, h)
	}
	for k, h := range m.Models {
		check("models."+k, h)
	}
}

// subagentWaitProblem is the error for a non-zero ai.agent.subagentTurnWaitMs. The seed's main
// turn waits (default 5 minutes) for the subagents it spawned before it ends; agentbus never
// holds a turn for background work: spawn_task returns at once, and the subagent's result is
// posted into the chat's inbox, where it starts a turn of its own that answers with it
// (docs/tasks.md). A wait would keep the chat's turn (and its lease) open for minutes and delay
// every message behind it, so the key accepts only 0, the behaviour agentbus has.
func subagentWaitProblem(ms int64) string {
	return fmt.Sprintf("ai.agent.subagentTurnWaitMs %d: agentbus does not hold a turn for its subagents (their results start a turn of their own in the chat, see docs/tasks.md); remove the key or set 0", ms)
}

// MemoryServerName is the ai.mcpServers name ai.memoryMcp is served under.
const MemoryServerName = "memory"

// applyMemoryMCP adds ai.memoryMcp to ai.mcpServers as "memory", unless an entry of that
// name is configured there too (then that one wins and memoryMcp is left out).
func (a *AI) applyMemoryMCP() {
	if a.MemoryMCP == nil {
		return
	}
	if _, ok := a.MCPServers[MemoryServerName]; ok {
		return
	}
	if a.MCPServers == nil {
		a.MCPServers = map[string]MCPServer{}
	}
	a.MCPServers[MemoryServerName] = *a.MemoryMCP
}
