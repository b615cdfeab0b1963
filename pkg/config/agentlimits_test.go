package config

import (
	"strings"
	"testing"
)

// ai.agent.rateLimit and modelHarness load without a reserved-key warning, and values no
// model could use are one-line errors.
func TestRateLimitAndHarnessKeys(t *testing.T) {
	c, err := Parse([]byte(`
ai:
  agent:
    phaseTrace: true
    rateLimit: {perMinute: 5, perHour: 60, perDay: 300}
    modelHarness:
      models:
        "qwen3:8b": {maxTools: 4, alwaysTools: [web_fetch], toolExecution: sequential, thinking: low, skillInstructionMaxChars: 900}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Reserved) != 0 {
		t.Errorf("reserved: %v", c.Reserved)
	}
	if r := c.AI.Agent.RateLimit; r.PerMinute != 5 || r.PerHour != 60 || r.PerDay != 300 || !r.Enabled() {
		t.Errorf("rateLimit = %+v", r)
	}
	for _, tt := range []struct{ yml, want string }{
		{"rateLimit: {perHour: -1}", "ai.agent.rateLimit: perMinute, perHour and perDay must not be negative"},
		{"modelHarness: {models: {m: {toolExecution: both}}}", `ai.agent.modelHarness.models.m.toolExecution "both": want one of parallel, sequential`},
		{"modelHarness: {providerPatterns: {\"o*\": {modelSizeHint: tiny}}}", `ai.agent.modelHarness.providerPatterns.o*.modelSizeHint "tiny"`},
		{"modelHarness: {models: {m: {maxTools: -2}}}", "must not be negative"},
		{"subagentTurnWaitMs: 300000", "ai.agent.subagentTurnWaitMs 300000: agentbus does not hold a turn for its subagents"},
	} {
		_, err := Parse([]byte("ai:\n  agent:\n    " + tt.yml + "\n"))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err %v, want %q", tt.yml, err, tt.want)
		}
	}
}

// ai.memoryMcp is served as ai.mcpServers.memory; an explicit mcpServers.memory wins.
func TestMemoryMCPIsAnMCPServer(t *testing.T) {
	c, err := Parse([]byte(`
ai:
  memoryMcp: {command: mcp-memory, args: [--store, data/memory.json]}
  mcpServers:
    search: {url: "http://127.0.0.1:9000/mcp"}
`))
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := c.AI.MCPServers["memory"]; !ok || s.Command != "mcp-memory" || len(c.AI.MCPServers) != 2 || len(c.Reserved) != 0 {
		t.Errorf("mcpServers = %+v, reserved %v", c.AI.MCPServers, c.Reserved)
	}
	c, err = Parse([]byte(`
ai:
  memoryMcp: {command: mcp-memory}
  mcpServers:
    memory: {command: other-memory}
`))
	if err != nil || c.AI.MCPServers["memory"].Command != "other-memory" {
		t.Errorf("explicit mcpServers.memory: %+v, %v", c.AI.MCPServers, err)
	}
}
