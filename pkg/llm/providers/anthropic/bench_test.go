package anthropic

import (
	"os"
	"testing"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providertest"
)

// The figures of issue 5: parse throughput (MB/s of recorded stream) and allocations per
// delta. Run: go test -run '^$' -bench . -benchmem ./pkg/llm/providers/anthropic/

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
	body := providertest.RepeatEvent(benchBody(b, "text"), `"text_delta","text":" How can I"`, 1000)
	providertest.BenchStream(b, New(), func(base string) *llm.Model { return testModel(base, "claude-sonnet-4-5") }, body, "text/event-stream", nil)
}

// BenchmarkStreamToolCall streams the recorded tool call as it is.
func BenchmarkStreamToolCall(b *testing.B) {
	providertest.BenchStream(b, New(), func(base string) *llm.Model { return testModel(base, "claude-sonnet-4-5") }, benchBody(b, "tool_call"), "text/event-stream", nil)
}
