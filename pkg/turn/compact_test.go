package turn

import (
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/store"
)

func TestContextTokensIgnoresUsageFromBeforeTheSummary(t *testing.T) {
	reply := func(input int) llm.Message {
		return llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.Text("ok")}, StopReason: llm.StopReasonStop,
			Usage: &llm.Usage{Input: input, Output: 5}}
	}
	small := strings.Repeat("x", 400) // ~104 tokens
	cases := []struct {
		name     string
		loaded   store.Loaded
		min, max int
	}{
		{"usage counts", store.Loaded{Messages: []llm.Message{llm.UserText(small, 1), reply(9000)}, Seqs: []uint64{1, 1}}, 9000, 9200},
		{"usage from before the summary is stale", store.Loaded{Summary: &store.Summary{Text: "s", Seq: 5},
			Messages: []llm.Message{llm.UserText(small, 1), reply(9000)}, Seqs: []uint64{3, 3}}, 100, 200},
		{"usage after the summary counts", store.Loaded{Summary: &store.Summary{Text: "s", Seq: 5},
			Messages: []llm.Message{llm.UserText(small, 1), reply(9000), llm.UserText(small, 2), reply(3000)}, Seqs: []uint64{3, 3, 6, 6}}, 3000, 3200},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := contextTokens(nil, c.loaded, "", nil); got < c.min || got > c.max {
				t.Fatalf("contextTokens = %d, want %d..%d", got, c.min, c.max)
			}
		})
	}
}
