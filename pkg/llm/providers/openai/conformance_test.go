package openai

import (
	"encoding/json"
	"testing"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providertest"
)

// Harness is the openai-completions entry of the shared conformance suite (pkg/llm/providertest),
// over the fixtures in testdata/conformance.
func Harness() providertest.Harness {
	return providertest.Harness{
		API:      llm.APIOpenAICompletions,
		Provider: New(WithLogger(quiet)),
		Dir:      "testdata/conformance",
		Model: func(base string) *llm.Model {
			if base != "" {
				base += "/v1"
			}
			return &llm.Model{ID: "gpt-4.1-mini", API: llm.APIOpenAICompletions, Provider: "openai", BaseURL: base,
				Input: []string{llm.InputText, llm.InputImage}, Cost: llm.ModelCost{Input: 0.4, Output: 1.6, CacheRead: 0.1},
				ContextWindow: 128000, MaxTokens: 32768}
		},
		StreamsToolArguments: true,
		RequestToolCallIDs: func(body []byte) []string {
			var req struct {
				Messages []struct {
					Role       string `json:"role"`
					ToolCallID string `json:"tool_call_id"`
					ToolCalls  []struct {
						ID string `json:"id"`
					} `json:"tool_calls"`
				} `json:"messages"`
			}
			_ = json.Unmarshal(body, &req)
			var ids []string
			for _, m := range req.Messages {
				for _, c := range m.ToolCalls {
					ids = append(ids, c.ID)
				}
				if m.Role == "tool" {
					ids = append(ids, m.ToolCallID)
				}
			}
			return ids
		},
		ValidToolCallID: func(id string) bool { return id != "" && len(id) <= 40 },
	}
}

func TestConformance(t *testing.T) { providertest.Run(t, Harness()) }
