package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestTinyRun pushes a few messages through every role (with and without the tool call) and
// checks that every one was answered and the figures are filled in.
func TestTinyRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h, err := Start(ctx, Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Warm(ctx, true); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		wl   Workload
	}{
		{"text", Workload{Sessions: 3, Messages: 2}},
		{"tool", Workload{Sessions: 3, Messages: 2, Tool: true}},
		{"rate", Workload{Sessions: 2, Messages: 2, Tool: true, Rate: 200}},
		{"stages", Workload{Sessions: 2, Messages: 2, Tool: true, Stages: true, Trace: &bytes.Buffer{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := h.Run(ctx, tc.wl)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.wl.Sessions * tc.wl.Messages
			if r.Turns != want || r.Failed != 0 || r.Lost != 0 {
				t.Fatalf("turns %d failed %d lost %d, want %d replies", r.Turns, r.Failed, r.Lost, want)
			}
			if r.TurnsPerSec <= 0 || r.P50Ms <= 0 || r.P99Ms < r.P50Ms || r.MaxMs < r.P99Ms {
				t.Errorf("implausible figures: %+v", r)
			}
			if calls := map[bool]float64{false: 1, true: 2}[tc.wl.Tool]; r.ModelCallsPerTurn != calls {
				t.Errorf("%.2f model calls per turn, want %.0f", r.ModelCallsPerTurn, calls)
			}
			if r.StreamMsgsPerTurn <= 0 || r.NATSInMsgsPerTurn <= 0 {
				t.Errorf("JetStream counters not read: %+v", r)
			}
			// Every turn allocates (messages, events, HTTP requests); the collector's share is a
			// fraction of the busy CPU, zero when no cycle ran.
			if r.AllocKiBPerTurn <= 0 || r.AllocObjectsPerTurn < 10 || r.GCShare < 0 || r.GCShare >= 1 {
				t.Errorf("allocation figures not read: %.1f KiB, %.0f objects per turn, collector share %.3f",
					r.AllocKiBPerTurn, r.AllocObjectsPerTurn, r.GCShare)
			}
			// How many turns the heap sampler catches in flight depends on timing; that
			// messages were awaited does not.
			if r.PeakAwaitingReply <= 0 || r.HeapIdleMiB <= 0 {
				t.Errorf("memory not sampled: %+v", r)
			}
			if tc.wl.Stages {
				// Every stage of a tool turn is seen but its start, which the turn carries on its
				// tool call request instead of AGENT_EVENTS (issue 40), and the steps between them
				// (plus the last one, to the callback) are reported.
				if len(r.Stages) != numStages-1 || len(r.Steps) != numStages {
					t.Errorf("%d stages, %d steps, want %d and %d: %+v", len(r.Stages), len(r.Steps), numStages-1, numStages, r.Steps)
				}
				for _, st := range r.Stages {
					if st.Stage == stageNames[stageTurnStarted] {
						t.Errorf("a tool turn's start seen on AGENT_EVENTS: %+v", st)
					}
				}
			}
			if tr, ok := tc.wl.Trace.(*bytes.Buffer); ok {
				// The trace holds every reply's latency (bench.turn logs) and the system calls
				// made: the pipeline's writes to its sockets at least.
				tt, err := ReadTraceTail(tr)
				if err != nil {
					t.Fatal(err)
				}
				if tt.Turns != want || tt.TouchingGC > tt.Turns || len(tt.Syscalls) == 0 || tt.OthersP50Ms+tt.TouchingGCP50Ms <= 0 {
					t.Errorf("trace summary: %+v", tt)
				}
			}
			var text bytes.Buffer
			r.WriteText(&text)
			if !strings.Contains(text.String(), "turns/s") {
				t.Errorf("text report:\n%s", text.String())
			}
			if _, err := json.Marshal(r); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestKeptDir runs the bench twice on one directory, as `agentbus bench --dir D` twice does:
// the second run's messages must not be refused as replays of the first run's, nor its
// sessions continue the first run's conversations.
func TestKeptDir(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	for run := range 2 {
		h, err := Start(ctx, Options{Dir: dir})
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		err = h.Warm(ctx, false)
		var r *Result
		if err == nil {
			r, err = h.Run(ctx, Workload{Sessions: 2, Messages: 2})
		}
		h.Close()
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		if r.Turns != 4 || r.Lost != 0 || r.Failed != 0 {
			t.Fatalf("run %d: turns %d failed %d lost %d, want 4 replies", run, r.Turns, r.Failed, r.Lost)
		}
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	for _, c := range []Config{{Sessions: -1}, {Messages: -2}, {Rate: -1}, {Latency: -time.Second}} {
		if _, err := Run(context.Background(), c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

func TestPercentile(t *testing.T) {
	d := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tc := range []struct {
		p    int
		want time.Duration
	}{{50, 5}, {90, 9}, {99, 10}, {100, 10}, {1, 1}, {0, 1}} {
		if got := pct(d, tc.p); got != tc.want {
			t.Errorf("p%d = %d, want %d", tc.p, got, tc.want)
		}
	}
	if pct(nil, 50) != 0 {
		t.Error("empty")
	}
}

// BenchmarkPipeline sends b.N messages, each a turn with one tool call, through the whole
// pipeline from 8 concurrent sessions, and reports the pipeline's own figures next to ns/op.
//
//	go test -run XXX -bench Pipeline -benchtime 200x ./pkg/bench/
func BenchmarkPipeline(b *testing.B) {
	ctx := context.Background()
	h, err := Start(ctx, Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	if err := h.Warm(ctx, true); err != nil {
		b.Fatal(err)
	}
	const sessions = 8
	msgs := (b.N + sessions - 1) / sessions
	b.ReportAllocs()
	b.ResetTimer()
	r, err := h.Run(ctx, Workload{Sessions: sessions, Messages: msgs, Tool: true})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if r.Lost+r.Failed > 0 {
		b.Fatalf("%d lost, %d failed", r.Lost, r.Failed)
	}
	b.ReportMetric(r.TurnsPerSec, "turns/s")
	b.ReportMetric(r.P50Ms, "p50-ms")
	b.ReportMetric(r.CPUSecondsPerTurn*1e3, "cpu-ms/turn")
	b.ReportMetric(r.StreamMsgsPerTurn, "appends/turn")
}

// TestStepTimes splits messages' latencies into the steps between the stages seen: a stage
// not seen is skipped (its time goes to the next step seen), and the slowest 1 % (at least
// one message) says where the slowest spent theirs.
func TestStepTimes(t *testing.T) {
	msAt := func(v ...float64) (at [numStages]time.Duration) {
		for i, x := range v {
			at[i] = time.Duration(x * float64(time.Millisecond))
		}
		return at
	}
	turns := []turnStages{
		{lat: 10 * time.Millisecond, at: msAt(1, 1, 2, 3, 4, 5)},
		{lat: 12 * time.Millisecond, at: msAt(1, 1, 2, 3, 4, 5)},
		{lat: 40 * time.Millisecond, at: msAt(1, 1, 30, 31, 32, 33)}, // slow to start its turn
		{lat: 11 * time.Millisecond, at: msAt(1, 1, 0, 3, 4, 5)},     // turn start not seen
	}
	steps := stepTimes(turns)
	if len(steps) != numStages+1 {
		t.Fatalf("%d steps, want %d: %+v", len(steps), numStages+1, steps)
	}
	for _, tc := range []struct {
		step     int
		slowMean float64
		p99      float64
	}{
		{0, 1, 1},         // POST -> ingested
		{1, 0, 0},         // ingested -> dispatched: the same message
		{2, 29, 29},       // -> turn started: where the slow one waited
		{3, 1, 2},         // -> tool call: 1 ms, 2 ms when the turn start was not seen
		{numStages, 7, 7}, // reply published -> callback
	} {
		st := steps[tc.step]
		if st.SlowMeanMs != tc.slowMean || st.P99Ms != tc.p99 {
			t.Errorf("step %q: slowest mean %.2f ms, p99 %.2f ms, want %.2f and %.2f", st.Step, st.SlowMeanMs, st.P99Ms, tc.slowMean, tc.p99)
		}
	}
	if stepTimes(nil) != nil {
		t.Error("steps without messages")
	}
}
