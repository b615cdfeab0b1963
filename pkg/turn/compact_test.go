package turn

import (
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/compaction"
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

// afterCompaction sizes an automatic compaction: the summary's target and the messages kept
// together take at most half of the history budget, so half of it is room for new messages.
func TestAfterCompactionLeavesHalfTheBudget(t *testing.T) {
	base := compaction.Settings{Enabled: true, Auto: true, KeepRecentTokens: 20000, MinKeepCount: 2, ContextWindow: 128000}
	for _, c := range []struct {
		name              string
		budget            int
		keepMax           int // the configured keepRecentTokens
		wantKeep, wantSum int
	}{
		{"5k window", 2500, 20000, 625, 625},
		{"8k window", 4000, 20000, 1000, 1000},
		{"large window: summary capped", 64000, 20000, 20000, 2048},
		{"large window: keep capped by the half", 30000, 20000, 12952, 2048},
		{"tiny budget", 100, 20000, 1, 64},
		{"no room at all", -300, 20000, 1, 64},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := base
			s.KeepRecentTokens = c.keepMax
			got := afterCompaction(s, c.budget)
			if got.KeepRecentTokens != c.wantKeep || got.SummaryTokens != c.wantSum {
				t.Fatalf("budget %d: keep %d, summary %d; want %d, %d", c.budget, got.KeepRecentTokens, got.SummaryTokens, c.wantKeep, c.wantSum)
			}
			if c.budget > 4*64 && got.KeepRecentTokens+got.SummaryTokens > c.budget/2 {
				t.Fatalf("budget %d: keep %d + summary %d exceed half of it", c.budget, got.KeepRecentTokens, got.SummaryTokens)
			}
		})
	}
}
