package models

import (
	"reflect"
	"testing"

	"github.com/agentbus/agentbus/pkg/config"
)

func TestResolveHarness(t *testing.T) {
	cfg, err := config.Parse([]byte(`
ai:
  agent:
    maxIterations: 15
    modelHarness:
      providerPatterns:
        "*":
          alwaysTools: [web_search]
        "open*":
          maxIterations: 7
          thinking: low
        "openai":
          maxTools: 9
        "oll*":
          modelSizeHint: large
      models:
        "gpt-4o":
          maxIterations: 11
        "openai:gpt-4o":
          maxIterations: 9
        "qwen3:8b":
          alwaysTools: []
`))
	if err != nil {
		t.Fatal(err)
	}
	agent := cfg.AI.Agent
	tests := []struct {
		name            string
		agent           config.Agent
		provider, model string
		want            config.Harness
	}{
		{"provider:model beats model beats patterns", agent, "openai", "gpt-4o",
			config.Harness{MaxIterations: 9, MaxTools: 9, MaxSkills: 5, ModelSizeHint: "large", SkillInstructionMaxChars: 8000, ToolExecution: "parallel", AlwaysTools: []string{"web_search"}, Thinking: "low"}},
		{"model key alone", agent, "azure", "gpt-4o",
			config.Harness{MaxIterations: 11, MaxTools: 12, MaxSkills: 5, ModelSizeHint: "large", SkillInstructionMaxChars: 8000, ToolExecution: "parallel", AlwaysTools: []string{"web_search"}}},
		{"pattern hint makes a small id large", agent, "ollama", "qwen3:8b",
			config.Harness{MaxIterations: 15, MaxTools: 12, MaxSkills: 5, ModelSizeHint: "large", SkillInstructionMaxChars: 8000, ToolExecution: "parallel", AlwaysTools: []string{}}},
		{"small model defaults", agent, "local", "llama3.2:3b",
			config.Harness{MaxIterations: 8, MaxTools: 6, MaxSkills: 2, ModelSizeHint: "small", SkillInstructionMaxChars: 1500, ToolExecution: "sequential", AlwaysTools: []string{"web_search"}}},
		{"medium", agent, "local", "qwen3:14b",
			config.Harness{MaxIterations: 15, MaxTools: 12, MaxSkills: 5, ModelSizeHint: "medium", SkillInstructionMaxChars: 4000, ToolExecution: "parallel", AlwaysTools: []string{"web_search"}}},
		{"agent skill chars and hint override inference", func() config.Agent {
			a := agent
			a.SkillInstructionMaxChars = 2500
			a.ModelSizeHint = "small"
			return a
		}(), "local", "qwen3:14b",
			config.Harness{MaxIterations: 8, MaxTools: 6, MaxSkills: 2, ModelSizeHint: "small", SkillInstructionMaxChars: 2500, ToolExecution: "sequential", AlwaysTools: []string{"web_search"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ResolveHarness(tt.agent, tt.provider, tt.model)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
			// Harnesses answers the same, from its memo the second time.
			hs := NewHarnesses(tt.agent)
			for i := range 2 {
				if got := hs.Resolve(tt.provider, tt.model); !reflect.DeepEqual(got, tt.want) {
					t.Errorf("Harnesses.Resolve, call %d: got  %+v\nwant %+v", i+1, got, tt.want)
				}
			}
		})
	}
}

func TestMergeHarnessArrays(t *testing.T) {
	base := config.Harness{AlwaysTools: []string{"a", "b"}, MaxTools: 3}
	if got := MergeHarness(base, config.Harness{}); !reflect.DeepEqual(got.AlwaysTools, []string{"a", "b"}) || got.MaxTools != 3 {
		t.Errorf("nil array must inherit: %+v", got)
	}
	if got := MergeHarness(base, config.Harness{AlwaysTools: []string{"c"}}); !reflect.DeepEqual(got.AlwaysTools, []string{"c"}) {
		t.Errorf("explicit array must replace: %+v", got)
	}
	if got := MergeHarness(base, config.Harness{AlwaysTools: []string{}}); got.AlwaysTools == nil || len(got.AlwaysTools) != 0 {
		t.Errorf("explicit empty array must replace: %+v", got)
	}
}
