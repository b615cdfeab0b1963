package loop_test

import (
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"

	"github.com/agentbus/agentbus/internal/cputime"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/faux"
	"github.com/agentbus/agentbus/pkg/loop"
)

// vsPiHeap is the live heap (MiB) both sides of BenchmarkVsPi hold while they measure. The
// default, none, is the comparison of earlier sessions: a benchmark process whose whole heap is
// the loop's garbage, where the Go runtime collects every ~1,000 turns (the 4 MiB minimum heap
// goal) and its scavenger returns the freed pages to the OS after each collection, so the next
// turns fault them in again. A process that does more than run the loop (a turn worker holds
// its sessions, connections and caches) has a heap that keeps those pages; -vspi.heap 64 gives
// both sides 64 MiB of small linked objects to measure the loop in such a process.
var vsPiHeap = flag.Int("vspi.heap", 0, "MiB of live heap, in small linked objects, that both sides of BenchmarkVsPi hold while measuring (0: none, the comparison of earlier sessions)")

// heapNode is one object of the -vspi.heap heap: 256 bytes with a pointer and a string, like
// the small records of a real process.
type heapNode struct {
	next *heapNode
	name string
	data [232]byte
}

var liveHeap *heapNode

// holdHeap allocates mib MiB of heapNodes (once per process) and keeps them, then as much
// again as garbage, and collects: the heap goal is then set by the live objects, and the pages
// the loop's garbage will cycle through until the next collection are faulted in already, as in
// a process that has run for a while (without it, a measurement shorter than one collection
// would pay the first touch of every page it allocates, which no long-running process does).
func holdHeap(mib int) {
	if mib <= 0 || liveHeap != nil {
		return
	}
	for i := range mib << 12 {
		liveHeap = &heapNode{next: liveHeap, name: "node-" + strconv.Itoa(i)}
	}
	var garbage *heapNode
	for range mib << 12 {
		garbage = &heapNode{next: garbage}
	}
	runtime.KeepAlive(garbage)
	garbage = nil
	runtime.GC()
}

// BenchmarkVsPi runs BenchmarkTurn's two turns and, right after each, the same turn on
// pi-agent-core with pi-ai's faux provider (testdata/pibench/bench.mjs, under node), and
// reports both CPU costs per turn and their ratio (pi-x: pi's CPU per turn ÷ this loop's).
// It needs node and `npm install` in testdata/pibench (docs/benchmarks.md); without them it
// skips and says so.
//
//	go test -run '^$' -bench VsPi -benchtime 20000x ./pkg/loop
//
// With -vspi.heap N both sides first allocate N MiB of live objects and keep them (see vsPiHeap).
func BenchmarkVsPi(b *testing.B) {
	dir := filepath.Join("testdata", "pibench")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@mariozechner", "pi-agent-core")); err != nil {
		b.Skip("pi is not installed: run npm install in pkg/loop/testdata/pibench (docs/benchmarks.md)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		b.Skip("node is not on PATH")
	}
	holdHeap(*vsPiHeap)
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
			out, err := exec.Command(node, filepath.Join(dir, "bench.mjs"), strconv.Itoa(max(b.N, 2000)), sh.name, strconv.Itoa(max(*vsPiHeap, 0))).Output()
			if err != nil {
				b.Fatalf("node bench.mjs: %v", err)
			}
			var pi map[string]float64
			if err := json.Unmarshal(out, &pi); err != nil {
				b.Fatalf("node bench.mjs printed %q: %v", out, err)
			}
			if *vsPiHeap > 0 {
				b.ReportMetric(pi["heapMiB"], "pi-heap-MiB")
			}
			b.ReportMetric(goNs, "cpu-ns/op")
			b.ReportMetric(pi[sh.name], "pi-cpu-ns/op")
			if goNs > 0 {
				b.ReportMetric(pi[sh.name]/goNs, "pi-x")
			}
		})
	}
}
