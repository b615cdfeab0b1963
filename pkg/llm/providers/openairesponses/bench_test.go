package openairesponses

import (
	"os"
	"testing"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providertest"
)

// The figures of issue 5: parse throughput (MB/s of recorded stream) and allocations per
// delta. Run: go test -run '^$' -bench . -benchmem ./pkg/llm/providers/openairesponses/

func benchBody(b *testing.B, name string) []byte {
	b.Helper()
	body, err := os.ReadFile("testdata/" + name + ".sse")
	if err != nil {
		b.Fatal(err)
	}
	return body
}

// BenchmarkStreamText streams the recorded text reply with its middle delta repeated 1000
// times (about 1000 text deltas).
func BenchmarkStreamText(b *testing.B) {
	body := providertest.RepeatEvent(benchBody(b, "text"), `"delta":" How can I"`, 1000)
	providertest.BenchStream(b, New(), func(base string) *llm.Model { return benchModel(base) }, body, "text/event-stream", nil)
}

// BenchmarkStreamToolCall streams the recorded tool call as it is.
func BenchmarkStreamToolCall(b *testing.B) {
	providertest.BenchStream(b, New(), func(base string) *llm.Model { return benchModel(base) }, benchBody(b, "tool_call"), "text/event-stream", nil)
}

func benchModel(base string) *llm.Model {
	return &llm.Model{ID: "gpt-5-mini", API: llm.APIOpenAIResponses, Provider: "openai", BaseURL: base, Reasoning: true,
		Cost: llm.ModelCost{Input: 0.25, Output: 2, CacheRead: 0.025}}
}
