package loop_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/agentbus/agentbus/internal/cputime"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/faux"
	"github.com/agentbus/agentbus/pkg/loop"
)

// BenchmarkVsPi runs BenchmarkTurn's two turns and, right after each, the same turn on
// pi-agent-core with pi-ai's faux provider (testdata/pibench/bench.mjs, under node), and
// reports both CPU costs per turn and their ratio (pi-x: pi's CPU per turn ÷ this loop's).
// It needs node and `npm install` in testdata/pibench (docs/benchmarks.md); without them it
// skips and says so.
//
//	go test -run '^$' -bench VsPi -benchtime 20000x ./pkg/loop
func BenchmarkVsPi(b *testing.B) {
	dir := filepath.Join("testdata", "pibench")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@mariozechner", "pi-agent-core")); err != nil {
		b.Skip("pi is not installed: run npm install in pkg/loop/testdata/pibench (docs/benchmarks.md)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		b.Skip("node is not on PATH")
	}
	call := llm.ToolCall("call_1", "weather", map[string]any{"city": "Berlin", "unit": "celsius"})
	shapes := []struct {
		name      string
		responder faux.Responder
		tools     []loop.AgentTool
	}{
		{"plain", func(*llm.Context) faux.Response { return faux.Response{Text: "Sunny, 21 °C."} }, nil},
		{"tool", func(c *llm.Context) faux.Response {
			if last := c.Messages[len(c.Messages)-1]; last.Role == llm.RoleToolResult {
				return faux.Response{Text: "It is sunny and 21 °C in Berlin."}
			}
			return faux.Response{ToolCalls: []llm.Content{call}}
		}, []loop.AgentTool{weatherTool}},
	}
	for _, sh := range shapes {
		b.Run(sh.name, func(b *testing.B) {
			p := faux.New(faux.WithResponder(sh.responder))
			cfg := &loop.Config{Model: benchModel, StreamFn: p.Stream}
			ac := &loop.AgentContext{SystemPrompt: "You are a helpful assistant.", Tools: sh.tools}
			prompt := []llm.Message{llm.UserText("What is the weather like in Berlin today?", 1)}
			emit := func(loop.Event) {}
			cpu := cputime.Process()
			for b.Loop() {
				if _, err := loop.Run(b.Context(), prompt, ac, cfg, emit); err != nil {
					b.Fatal(err)
				}
			}
			goNs := float64((cputime.Process() - cpu).Nanoseconds()) / float64(b.N)
			out, err := exec.Command(node, filepath.Join(dir, "bench.mjs"), strconv.Itoa(max(b.N, 2000)), sh.name).Output()
			if err != nil {
				b.Fatalf("node bench.mjs: %v", err)
			}
			var pi map[string]float64
			if err := json.Unmarshal(out, &pi); err != nil {
				b.Fatalf("node bench.mjs printed %q: %v", out, err)
			}
			b.ReportMetric(goNs, "cpu-ns/op")
			b.ReportMetric(pi[sh.name], "pi-cpu-ns/op")
			if goNs > 0 {
				b.ReportMetric(pi[sh.name]/goNs, "pi-x")
			}
		})
	}
}
