package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
)

// Result holds the figures of one run. Times are in milliseconds, memory in KiB or MiB, as the
// field names say.
type Result struct {
	Sessions       int     `json:"sessions"`
	Messages       int     `json:"messagesPerSession"`
	Tool           bool    `json:"toolCallPerTurn"`
	ModelLatencyMs float64 `json:"modelLatencyMs"`
	OfferedRate    float64 `json:"offeredTurnsPerSec,omitempty"`
	TurnWorkers    int     `json:"turnWorkers"`
	// NATSServers is how many nats-server processes ran (0: the embedded server, everything in
	// one process); Processes then lists every process's figures, the bench's own first.
	NATSServers int              `json:"natsServers,omitempty"`
	Processes   []ProcessFigures `json:"processes,omitempty"`

	Turns       int     `json:"turns"`  // replies received
	Failed      int     `json:"failed"` // webhook POSTs not accepted
	Lost        int     `json:"lost"`   // accepted messages without a reply within ReplyTimeout
	Seconds     float64 `json:"seconds"`
	TurnsPerSec float64 `json:"turnsPerSec"`

	P50Ms      float64 `json:"p50Ms"`
	P90Ms      float64 `json:"p90Ms"`
	P99Ms      float64 `json:"p99Ms"`
	MaxMs      float64 `json:"maxMs"`
	AddedP50Ms float64 `json:"addedP50Ms"` // minus the model latency of every model call
	AddedP99Ms float64 `json:"addedP99Ms"`

	// Stages (with Config.Stages): time from the webhook POST to each stage.
	Stages []StageTime `json:"stages,omitempty"`
	// Steps (with Config.Stages): the time between adjacent stages, and where the slowest 1 %
	// of the messages spent theirs.
	Steps []StepTime `json:"steps,omitempty"`
	// Trace (agentbus bench --trace): what the execution trace says about the tail.
	Trace *TraceTail `json:"trace,omitempty"`

	CPUSecondsPerTurn float64 `json:"cpuSecondsPerTurn"`
	CPUCores          float64 `json:"cpuCores"` // CPU seconds per wall second
	// RunqueueWaitSeconds: how long the threads of this process (of every process, with
	// Processes) were runnable but waited for a CPU while other processes held it (Linux).
	RunqueueWaitSeconds float64 `json:"runqueueWaitSeconds"`
	// SchedP50Ms and SchedP99Ms: how long runnable goroutines waited for a CPU (Go's
	// /sched/latencies). Milliseconds here with few cores busy mean the machine is short of CPU.
	SchedP50Ms float64 `json:"schedP50Ms"`
	SchedP99Ms float64 `json:"schedP99Ms"`

	StreamMsgsPerTurn float64 `json:"streamMsgsPerTurn"` // messages appended to streams (KV included)
	JSAPIPerTurn      float64 `json:"jsApiPerTurn"`      // JetStream API requests
	// AppendsPerTurn splits StreamMsgsPerTurn by stream (KV buckets are KV_<bucket>).
	AppendsPerTurn     map[string]float64 `json:"appendsPerTurn,omitempty"`
	NATSInMsgsPerTurn  float64            `json:"natsInMsgsPerTurn"`  // every message the server received
	NATSInBytesPerTurn float64            `json:"natsInBytesPerTurn"` // their payload bytes
	// StoredBytesPerTurn is how much each stream grew per turn (work queues shrink as they are
	// acked, so they read low).
	StoredBytesPerTurn map[string]float64 `json:"storedBytesPerTurn,omitempty"`

	ModelCallsPerTurn float64 `json:"modelCallsPerTurn"` // 1 without a tool call, 2 with one

	// Allocation and collection in this process while the turns ran, for in-process runs
	// (with Processes every process reports its own, ProcessFigures). GCShare is the collector's
	// part of the busy CPU by the Go runtime's own estimate (runtime/metrics /cpu/classes),
	// which is what grows when the heap holds more. Both vary far less from run to run than
	// CPU time on a shared machine does.
	AllocKiBPerTurn     float64 `json:"allocKiBPerTurn,omitempty"`
	AllocObjectsPerTurn float64 `json:"allocObjectsPerTurn,omitempty"`
	GCCycles            int     `json:"gcCycles,omitempty"`
	GCShare             float64 `json:"gcShare,omitempty"`

	// PeakInFlight is the most turns inside a model call at once, PeakAwaitingReply the most
	// messages accepted and not yet answered (queued ones included). The heap figures are the
	// largest seen during the run (sampled every 10 ms); the per-turn ones divide them by
	// those peaks, an upper bound.
	PeakInFlight             int     `json:"peakInFlight"`
	PeakAwaitingReply        int     `json:"peakAwaitingReply"`
	HeapIdleMiB              float64 `json:"heapIdleMiB"`
	HeapAtPeakMiB            float64 `json:"heapAtPeakMiB"`
	HeapPerInFlightKiB       float64 `json:"heapPerInFlightKiB"`       // HeapInuse / in flight
	HeapGrowthPerInFlightKiB float64 `json:"heapGrowthPerInFlightKiB"` // (HeapInuse - idle) / in flight
	LiveHeapAtPeakMiB        float64 `json:"liveHeapAtPeakMiB"`        // live heap as of the last GC
	LivePerInFlightKiB       float64 `json:"livePerInFlightKiB"`
	// The same per message awaiting its reply, at the sample with the most of those.
	HeapPerAwaitingKiB float64 `json:"heapPerAwaitingKiB"`
	LivePerAwaitingKiB float64 `json:"livePerAwaitingKiB"`

	Baseline *Baseline   `json:"baseline,omitempty"`
	Kill     *KillResult `json:"kill,omitempty"`

	GOMAXPROCS int    `json:"gomaxprocs"`
	NumCPU     int    `json:"numCPU"`
	LoadAvg    string `json:"loadAvg,omitempty"` // 1, 5, 15 minute load averages at the start
}

// ProcessFigures are one process's figures in a multi-process run (Options.Processes).
type ProcessFigures struct {
	Name         string  `json:"name"` // bench, nats1, ingest-1, turn-worker-2, ...
	Role         string  `json:"role"`
	Pid          int     `json:"pid"`
	Killed       bool    `json:"killed,omitempty"` // by the kill scenario; figures up to the kill
	CPUSeconds   float64 `json:"cpuSeconds"`
	CPUMsPerTurn float64 `json:"cpuMsPerTurn"`
	CPUCores     float64 `json:"cpuCores"`
	// RunqueueWaitSeconds is how long the process's threads were runnable but waited for a
	// CPU (Linux schedstat): the cores were busy with other processes, ours or not.
	RunqueueWaitSeconds float64 `json:"runqueueWaitSeconds"`
	SchedP99Ms          float64 `json:"schedP99Ms"`
	ModelCalls          int64   `json:"modelCalls,omitempty"`
	PeakHeapMiB         float64 `json:"peakHeapMiB"` // largest HeapInuse sampled in the phase
	MaxRSSMiB           float64 `json:"maxRSSMiB"`   // largest resident set since the process started
	// The process's allocation per turn and its collector's share of its busy CPU, as in
	// Result (there for in-process runs only).
	AllocKiBPerTurn     float64 `json:"allocKiBPerTurn,omitempty"`
	AllocObjectsPerTurn float64 `json:"allocObjectsPerTurn,omitempty"`
	GCShare             float64 `json:"gcShare,omitempty"`

	allocs allocCounters // over the phase; divided by the turns once they are counted
}

// Baseline is the raw JetStream async-publish rate on the same server.
type Baseline struct {
	Messages   int     `json:"messages"`
	Size       int     `json:"size"`
	MsgsPerSec float64 `json:"msgsPerSec"`
}

// KillResult is the takeover after the second turn worker was killed.
type KillResult struct {
	Worker        string  `json:"worker"`
	SessionsOwned int     `json:"sessionsOwned"` // sessions whose lease it held at the kill
	Pending       int     `json:"pending"`       // of those, sessions with a message waiting for its reply
	Recovered     int     `json:"recovered"`     // of those, replied to after the kill
	P50Ms         float64 `json:"takeoverP50Ms"` // kill → reply of the message pending at the kill
	P90Ms         float64 `json:"takeoverP90Ms"`
	P99Ms         float64 `json:"takeoverP99Ms"`
	MaxMs         float64 `json:"takeoverMaxMs"`
	Error         string  `json:"error,omitempty"`
}

// WriteText prints the figures for people.
func (r *Result) WriteText(w io.Writer) {
	tool := "no tool call"
	if r.Tool {
		tool = "one tool call per turn"
	}
	load := "closed loop"
	if r.OfferedRate > 0 {
		load = fmt.Sprintf("offered %.0f turns/s", r.OfferedRate)
	}
	fmt.Fprintf(w, "agentbus bench: %d sessions × %d messages, model latency %s ms, %s, %s, %d turn worker%s\n",
		r.Sessions, r.Messages, num(r.ModelLatencyMs), tool, load, r.TurnWorkers, plural(r.TurnWorkers))
	if r.NATSServers > 0 {
		fmt.Fprintf(w, "  processes:      %d role processes on %d nats-server process%s (plus this one: load generator and callback server)\n",
			len(r.Processes)-1-r.NATSServers, r.NATSServers, map[bool]string{true: "es", false: ""}[r.NATSServers > 1])
	}
	fmt.Fprintf(w, "  machine:        GOMAXPROCS %d, %d CPUs, load average %s\n", r.GOMAXPROCS, r.NumCPU, r.LoadAvg)
	fmt.Fprintf(w, "  turns:          %d replied, %d rejected, %d lost, in %.2f s\n", r.Turns, r.Failed, r.Lost, r.Seconds)
	fmt.Fprintf(w, "  throughput:     %.0f turns/s\n", r.TurnsPerSec)
	fmt.Fprintf(w, "  latency:        p50 %s ms, p90 %s ms, p99 %s ms, max %s ms (webhook POST → callback)\n",
		num(r.P50Ms), num(r.P90Ms), num(r.P99Ms), num(r.MaxMs))
	fmt.Fprintf(w, "  added latency:  p50 %s ms, p99 %s ms (minus the model's latency)\n", num(r.AddedP50Ms), num(r.AddedP99Ms))
	for _, st := range r.Stages {
		fmt.Fprintf(w, "    POST → %-26s p50 %s ms, p99 %s ms\n", st.Stage+":", num(st.P50Ms), num(st.P99Ms))
	}
	if len(r.Steps) > 0 {
		fmt.Fprintf(w, "  steps:          between adjacent stages: p50, p99; mean over the slowest 1 %% of the messages\n")
	}
	for _, st := range r.Steps {
		fmt.Fprintf(w, "    %-58s p50 %s ms, p99 %s ms; slowest 1 %%: %s ms\n", st.Step+":", num(st.P50Ms), num(st.P99Ms), num(st.SlowMeanMs))
	}
	if r.NATSServers > 0 {
		fmt.Fprintf(w, "  CPU:            %.3f ms per turn, %.2f cores busy (summed over all processes, load generator included)\n",
			r.CPUSecondsPerTurn*1000, r.CPUCores)
		for _, p := range r.Processes {
			killed := ""
			if p.Killed {
				killed = " (killed; until the kill)"
			}
			alloc := ""
			if p.AllocObjectsPerTurn > 0 {
				alloc = fmt.Sprintf(", %.0f KiB in %.0f objects per turn, collector %.0f %%", p.AllocKiBPerTurn, p.AllocObjectsPerTurn, p.GCShare*100)
			}
			fmt.Fprintf(w, "    %-16s %.3f ms per turn, %.2f cores, waited for a CPU %.2f s, goroutines p99 %s ms, heap peak %.1f MiB, max RSS %.1f MiB%s%s\n",
				p.Name+":", p.CPUMsPerTurn, p.CPUCores, p.RunqueueWaitSeconds, num(p.SchedP99Ms), p.PeakHeapMiB, p.MaxRSSMiB, alloc, killed)
		}
	} else {
		fmt.Fprintf(w, "  CPU:            %.3f ms per turn, %.2f cores busy (load generator included)\n",
			r.CPUSecondsPerTurn*1000, r.CPUCores)
	}
	fmt.Fprintf(w, "  scheduling:     runnable goroutines waited p50 %s ms, p99 %s ms for a CPU; threads waited %.2f s in the run queue (%.2f s per second)\n",
		num(r.SchedP50Ms), num(r.SchedP99Ms), r.RunqueueWaitSeconds, r.RunqueueWaitSeconds/max(r.Seconds, 1e-9))
	if r.Trace != nil {
		r.Trace.WriteText(w)
	}
	fmt.Fprintf(w, "  JetStream:      %.1f stream appends, %.1f API requests, %.1f server messages in, per turn\n",
		r.StreamMsgsPerTurn, r.JSAPIPerTurn, r.NATSInMsgsPerTurn)
	if len(r.AppendsPerTurn) > 0 {
		names := make([]string, 0, len(r.AppendsPerTurn))
		for n := range r.AppendsPerTurn {
			names = append(names, n)
		}
		sort.Strings(names)
		var b strings.Builder
		for _, n := range names {
			fmt.Fprintf(&b, " %s %.1f", n, r.AppendsPerTurn[n])
		}
		fmt.Fprintf(w, "  appends/turn:  %s\n", b.String())
	}
	if len(r.StoredBytesPerTurn) > 0 {
		fmt.Fprintf(w, "  bytes/turn:     %.0f into the server;", r.NATSInBytesPerTurn)
		for _, n := range slices.Sorted(maps.Keys(r.StoredBytesPerTurn)) {
			fmt.Fprintf(w, " %s %.0f", n, r.StoredBytesPerTurn[n])
		}
		fmt.Fprintln(w, " stored")
	}
	fmt.Fprintf(w, "  model:          %.2f calls per turn\n", r.ModelCallsPerTurn)
	if r.AllocObjectsPerTurn > 0 {
		fmt.Fprintf(w, "  allocation:     %.0f KiB in %.0f objects per turn, %d collections; the collector %.0f %% of the busy CPU (the runtime's estimate)\n",
			r.AllocKiBPerTurn, r.AllocObjectsPerTurn, r.GCCycles, r.GCShare*100)
	}
	fmt.Fprintf(w, "  memory:         largest heap in use %.1f MiB (idle %.1f MiB), largest live heap %.1f MiB\n",
		r.HeapAtPeakMiB, r.HeapIdleMiB, r.LiveHeapAtPeakMiB)
	if r.PeakInFlight > 0 {
		fmt.Fprintf(w, "                  per turn in a model call (%d at most): %.0f KiB in use (%.0f KiB grown since idle), %.0f KiB live\n",
			r.PeakInFlight, r.HeapPerInFlightKiB, r.HeapGrowthPerInFlightKiB, r.LivePerInFlightKiB)
	} else {
		fmt.Fprintln(w, "                  per turn in a model call: no sample caught a turn inside a model call (too quick)")
	}
	fmt.Fprintf(w, "                  per message awaiting its reply (%d at most): %.0f KiB in use, %.0f KiB live\n",
		r.PeakAwaitingReply, r.HeapPerAwaitingKiB, r.LivePerAwaitingKiB)
	if b := r.Baseline; b != nil {
		fmt.Fprintf(w, "  baseline:       %.0f msgs/s raw JetStream async publish (%d × %d B, same server)\n", b.MsgsPerSec, b.Messages, b.Size)
	}
	if k := r.Kill; k != nil {
		fmt.Fprintf(w, "  kill:           %s held %d sessions, %d with a pending message; %d taken over, kill → reply p50 %s ms, p90 %s ms, p99 %s ms, max %s ms\n",
			k.Worker, k.SessionsOwned, k.Pending, k.Recovered, num(k.P50Ms), num(k.P90Ms), num(k.P99Ms), num(k.MaxMs))
		if k.Error != "" {
			fmt.Fprintf(w, "  kill error:     %s\n", k.Error)
		}
	}
}

// num formats milliseconds with a precision that suits their size.
func num(v float64) string {
	switch {
	case v >= 100 || v <= -100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10 || v <= -10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
