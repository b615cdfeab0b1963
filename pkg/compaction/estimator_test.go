package compaction

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"weak"

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

// TestEstimatorForgets checks that entries no recent call has seen are dropped, and that the
// entries kept still answer for their messages after the memo was rebuilt around them.
func TestEstimatorForgets(t *testing.T) {
	msgs := func(prefix string, n int) []llm.Message {
		out := make([]llm.Message, n)
		for i := range out {
			out[i] = llm.UserText(prefix+strings.Repeat("y", i), int64(i))
		}
		return out
	}
	old, cur := msgs("old session ", 200), msgs("new ", 20)
	var e Estimator
	e.Estimate(old)
	for i := range 10 {
		// The current history grows by one message a call, as a session's does.
		cur = append(cur, llm.UserText("more "+strings.Repeat("z", i), 0))
		if got, want := e.Estimate(cur), Estimate(cur); got != want {
			t.Fatalf("call %d: %d, want %d", i, got, want)
		}
	}
	if n := len(e.memo); n > len(cur)+len(cur)/4+16 || len(e.entries) != n {
		t.Fatalf("%d memo entries, %d kept, for a history of %d: the old session's were not forgotten", n, len(e.entries), len(cur))
	}
	if got, want := e.Estimate(old), Estimate(old); got != want {
		t.Fatalf("forgotten history estimated again: %d, want %d", got, want)
	}
}

// BenchmarkEstimator is what a turn of a long session costs in estimates: auto compaction's
// Estimate of the whole history and L1's Micro before a model call, both through the memo of
// a session's Estimator (allocs/op is the figure: the memo makes the walks cheap, and neither
// call should allocate per message).
func BenchmarkEstimator(b *testing.B) {
	var history []llm.Message
	for i := range 20 {
		history = append(history, llm.UserText("bench_echo "+strings.Repeat("x", i), int64(i)),
			llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.ToolCall("c", "bench_echo", map[string]any{"text": "x"})}},
			llm.Message{Role: llm.RoleToolResult, ToolCallID: "c", ToolName: "bench_echo", Content: []llm.Content{llm.Text("x")}},
			llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.Text("The bench_echo tool returned x")}})
	}
	var e Estimator
	o := MicroOptions{KeepRecentTokens: 40000, MaxBlockBytes: 8000, Estimator: &e}
	b.ReportAllocs()
	for b.Loop() {
		_ = e.Estimate(history)
		_ = Micro(history, o)
	}
}

// TestEstimatorReleasesCutMessages checks that the memo does not keep the messages cut from
// the front of a long session's history reachable for long: its keys point into them.
func TestEstimatorReleasesCutMessages(t *testing.T) {
	const keep = 40
	var e Estimator
	var hist []llm.Message
	var sent []weak.Pointer[llm.Content]
	worst := 0
	for i := range 8 * keep {
		m := llm.UserText(fmt.Sprintf("message %d", i), int64(i+1))
		sent = append(sent, weak.Make(&m.Content[0]))
		// A fresh slice each call, as the context log's tail is once it has moved on.
		hist = append(append([]llm.Message(nil), hist[max(len(hist)+1-keep, 0):]...), m)
		if got, want := e.Estimate(hist), Estimate(hist); got != want {
			t.Fatalf("call %d: %d, want %d", i, got, want)
		}
		runtime.GC()
		alive := 0
		for _, w := range sent[:max(len(sent)-keep, 0)] {
			if w.Value() != nil {
				alive++
			}
		}
		worst = max(worst, alive)
	}
	// Forgetting waits for a quarter more entries than the history (and 16), at most every
	// fifth call, and keeps what the last four calls saw.
	if limit := keep/4 + 16 + 5; worst > limit {
		t.Fatalf("up to %d messages cut from a %d-message history were still reachable, want at most %d", worst, keep, limit)
	}
}
