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
