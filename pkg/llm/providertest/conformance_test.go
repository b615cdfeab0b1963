package providertest_test

import (
	"encoding/json"
	"regexp"
	"sync/atomic"
	"testing"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/anthropic"
	"github.com/agentbus/agentbus/pkg/llm/providers/faux"
	"github.com/agentbus/agentbus/pkg/llm/providers/google"
	"github.com/agentbus/agentbus/pkg/llm/providers/ollama"
	"github.com/agentbus/agentbus/pkg/llm/providers/openai"
	"github.com/agentbus/agentbus/pkg/llm/providers/openairesponses"
	"github.com/agentbus/agentbus/pkg/llm/providertest"
)

var testCost = llm.ModelCost{Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75}

func anthropicHarness() providertest.Harness {
	idRE := regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	return providertest.Harness{
		API:      llm.APIAnthropicMessages,
		Provider: anthropic.New(),
		Dir:      "../providers/anthropic/testdata",
		Model: func(base string) *llm.Model {
			return &llm.Model{ID: "claude-sonnet-4-5", API: llm.APIAnthropicMessages, Provider: "anthropic", BaseURL: base,
				Reasoning: true, Input: []string{"text", "image"}, Cost: testCost, ContextWindow: 200000, MaxTokens: 64000}
		},
		StreamsToolArguments: true,
		RequestToolCallIDs: func(body []byte) []string {
			var req struct {
				Messages []struct {
					Content []struct {
						Type      string `json:"type"`
						ID        string `json:"id"`
						ToolUseID string `json:"tool_use_id"`
					} `json:"content"`
				} `json:"messages"`
			}
			_ = json.Unmarshal(body, &req)
			var ids []string
			for _, m := range req.Messages {
				for _, c := range m.Content {
					switch c.Type {
					case "tool_use":
						ids = append(ids, c.ID)
					case "tool_result":
						ids = append(ids, c.ToolUseID)
					}
				}
			}
			return ids
		},
		ValidToolCallID: idRE.MatchString,
	}
}

func ollamaHarness() providertest.Harness {
	return providertest.Harness{
		API:      llm.APIOllamaChat,
		Provider: ollama.New(),
		Dir:      "../providers/ollama/testdata",
		Model: func(base string) *llm.Model {
			return &llm.Model{ID: "qwen3:14b", API: llm.APIOllamaChat, Provider: "ollama", BaseURL: base,
				Reasoning: true, Input: []string{"text", "image"}, Cost: testCost, ContextWindow: 32768}
		},
		RequestToolCallIDs: func(body []byte) []string {
			var req struct {
				Messages []struct {
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
				if m.ToolCallID != "" {
					ids = append(ids, m.ToolCallID)
				}
			}
			return ids
		},
	}
}

func googleHarness() providertest.Harness {
	idRE := regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	return providertest.Harness{
		API:      llm.APIGoogleGenerative,
		Provider: google.New(),
		Dir:      "../providers/google/testdata",
		Model: func(base string) *llm.Model {
			if base != "" {
				base += "/v1beta"
			}
			return &llm.Model{ID: "gemini-2.5-flash", API: llm.APIGoogleGenerative, Provider: "google", BaseURL: base,
				Reasoning: true, Input: []string{"text", "image"}, Cost: testCost, ContextWindow: 1048576, MaxTokens: 65536}
		},
		RequestToolCallIDs: func(body []byte) []string {
			var req struct {
				Contents []struct {
					Parts []struct {
						FunctionCall *struct {
							ID string `json:"id"`
						} `json:"functionCall"`
						FunctionResponse *struct {
							ID string `json:"id"`
						} `json:"functionResponse"`
					} `json:"parts"`
				} `json:"contents"`
			}
			_ = json.Unmarshal(body, &req)
			var ids []string
			for _, c := range req.Contents {
				for _, p := range c.Parts {
					if p.FunctionCall != nil {
						ids = append(ids, p.FunctionCall.ID)
					}
					if p.FunctionResponse != nil {
						ids = append(ids, p.FunctionResponse.ID)
					}
				}
			}
			return ids
		},
		ValidToolCallID: idRE.MatchString,
	}
}

func responsesHarness() providertest.Harness {
	idRE := regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	return providertest.Harness{
		API:      llm.APIOpenAIResponses,
		Provider: openairesponses.New(),
		Dir:      "../providers/openairesponses/testdata",
		Model: func(base string) *llm.Model {
			if base != "" {
				base += "/v1"
			}
			return &llm.Model{ID: "gpt-5-mini", API: llm.APIOpenAIResponses, Provider: "openai", BaseURL: base,
				Reasoning: true, Input: []string{"text", "image"}, Cost: testCost, ContextWindow: 400000, MaxTokens: 128000}
		},
		StreamsToolArguments: true,
		RequestToolCallIDs: func(body []byte) []string {
			var req struct {
				Input []struct {
					Type   string `json:"type"`
					CallID string `json:"call_id"`
				} `json:"input"`
			}
			_ = json.Unmarshal(body, &req)
			var ids []string
			for _, it := range req.Input {
				if it.Type == "function_call" || it.Type == "function_call_output" {
					ids = append(ids, it.CallID)
				}
			}
			return ids
		},
		ValidToolCallID: idRE.MatchString,
	}
}

// openaiHarness runs openai-completions over the fixtures its package keeps for this suite
// (pkg/llm/providers/openai/testdata/conformance).
func openaiHarness() providertest.Harness {
	return providertest.Harness{
		API:      llm.APIOpenAICompletions,
		Provider: openai.New(),
		Dir:      "../providers/openai/testdata/conformance",
		Model: func(base string) *llm.Model {
			if base != "" {
				base += "/v1"
			}
			return &llm.Model{ID: "gpt-4.1-mini", API: llm.APIOpenAICompletions, Provider: "openai", BaseURL: base,
				Input: []string{"text", "image"}, Cost: testCost, ContextWindow: 128000, MaxTokens: 32768}
		},
		StreamsToolArguments: true,
		RequestToolCallIDs:   providertest.OpenAIToolCallIDs,
		ValidToolCallID:      func(id string) bool { return id != "" && len(id) <= 40 },
	}
}

// fauxHarness runs the scenarios that need no wire against the scripted faux provider: its
// responder answers with what each scenario's fixture holds.
func fauxHarness() providertest.Harness {
	var cur atomic.Value // string: the scenario being run
	cur.Store(providertest.ScenarioText)
	replies := map[string]faux.Response{
		providertest.ScenarioText:     {Text: providertest.WantText},
		providertest.ScenarioThinking: {Thinking: "The user asks for 2+2. That is 4.", Text: providertest.WantThinkingText},
		providertest.ScenarioToolCall: {ToolCalls: []llm.Content{llm.ToolCall("", providertest.WantToolName, providertest.WantToolArgs)}},
		providertest.ScenarioTwoToolCalls: {ToolCalls: []llm.Content{
			llm.ToolCall("", providertest.WantToolName, map[string]any{"location": "Paris"}),
			llm.ToolCall("", providertest.WantToolName, map[string]any{"location": "Tokyo"}),
		}},
		providertest.ScenarioEmpty:           {},
		providertest.ScenarioContextOverflow: {Error: "prompt is too long: 213462 tokens > 200000 maximum"},
	}
	p := faux.New(faux.WithResponder(func(*llm.Context) faux.Response { return replies[cur.Load().(string)] }))
	return providertest.Harness{
		API:      llm.APIFaux,
		Provider: p,
		Model: func(string) *llm.Model {
			return &llm.Model{ID: "faux-1", API: llm.APIFaux, Provider: "faux", Cost: testCost, ContextWindow: 200000}
		},
		Prepare:              func(_ *testing.T, scenario string) { cur.Store(scenario) },
		StreamsToolArguments: true,
	}
}

func harnesses() []providertest.Harness {
	return []providertest.Harness{anthropicHarness(), ollamaHarness(), googleHarness(), responsesHarness(), openaiHarness(), fauxHarness()}
}

func TestConformance(t *testing.T) {
	for _, h := range harnesses() {
		t.Run(h.API, func(t *testing.T) { providertest.Run(t, h) })
	}
}

func TestHandoffMatrix(t *testing.T) {
	providertest.RunHandoff(t, harnesses()...)
}
