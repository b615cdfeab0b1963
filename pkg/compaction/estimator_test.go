package compaction

import (
	"strings"
	"sync"
	"testing"

	"github.com/agentbus/agentbus/pkg/llm"
)

func TestEstimator(t *testing.T) {
	history := []llm.Message{
		llm.UserText("hello there", 1),
		{Role: llm.RoleAssistant, Content: []llm.Content{llm.ToolCall("c1", "read", map[string]any{"path": "/a/b", "n": 3.0})}},
		{Role: llm.RoleToolResult, ToolCallID: "c1", ToolName: "read", Content: []llm.Content{llm.Text(strings.Repeat("x", 400))}},
		{Role: llm.RoleAssistant, Content: []llm.Content{llm.Text("done")}},
	}
	edited := append([]llm.Message(nil), history...)
	edited[2].Content = []llm.Content{llm.Text("short now")} // a replaced message: new content slice
	grown := append(append([]llm.Message(nil), history...), llm.UserText("and another question", 2))
	var e Estimator
	tests := []struct {
		name string
		msgs []llm.Message
	}{
		{"first look", history},
		{"same messages again", history},
		{"a copy of the slice", append([]llm.Message(nil), history...)},
		{"one message replaced", edited},
		{"history grew", grown},
		{"shorter than before", history[:2]},
		{"empty", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got, want := e.Estimate(tc.msgs), Estimate(tc.msgs); got != want {
				t.Fatalf("memoized estimate %d, Estimate says %d", got, want)
			}
		})
	}
	var nilE *Estimator
	if got, want := nilE.Estimate(history), Estimate(history); got != want {
		t.Fatalf("nil estimator: %d, want %d", got, want)
	}
	e.Reset()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				if got, want := e.Estimate(grown), Estimate(grown); got != want {
					t.Errorf("concurrent estimate %d, want %d", got, want)
					return
				}
			}
		})
	}
	wg.Wait()
	// Micro with an estimator decides exactly as without.
	long := append(append([]llm.Message(nil), grown...), llm.UserText(strings.Repeat("long text ", 50), 3))
	for _, o := range []MicroOptions{
		{KeepRecentTokens: 20, MinToolResultBytes: 10},
		{KeepRecentTokens: 20, MinToolResultBytes: 10, MaxBlockBytes: 100},
		{KeepRecentTokens: 100000, MaxBlockBytes: 300},
	} {
		plain := Micro(long, o)
		o.Estimator = &e
		for range 2 { // the second call answers from the memo
			memo := Micro(long, o)
			for i := range plain {
				if plain[i].TextContent() != memo[i].TextContent() {
					t.Fatalf("%+v, message %d: %q with the estimator, %q without", o, i, memo[i].TextContent(), plain[i].TextContent())
				}
			}
		}
	}
}
