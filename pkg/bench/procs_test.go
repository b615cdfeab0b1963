package bench

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain lets the multi-process bench re-execute this test binary as its NATS server and
// role processes.
func TestMain(m *testing.M) {
	if code, ok := ChildMain(); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// TestProcesses runs the multi-process bench briefly (every role replica and the NATS server(s)
// as child processes) and checks that every turn was answered and every figure is reported;
// it asserts no timings.
func TestProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 6 to 9 processes")
	}
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"two turn workers", Config{Sessions: 4, Messages: 3, Tool: true, TurnWorkers: 2}},
		{"cluster of 3, two of each role", Config{Sessions: 4, Messages: 2, Cluster: 3, TurnWorkers: 2, Ingests: 2, ToolWorkers: 2, Egresses: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cfg := tc.cfg
			cfg.Processes, cfg.Dir, cfg.ExeArgs = true, t.TempDir(), []string{"-test.run=^$"}
			cfg.Baseline, cfg.ProfileDir = 500, t.TempDir()
			r, err := Run(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			want := cfg.Sessions * cfg.Messages
			if r.Turns != want || r.Failed != 0 || r.Lost != 0 {
				t.Fatalf("turns %d failed %d lost %d, want %d replies", r.Turns, r.Failed, r.Lost, want)
			}
			calls := 1.0
			if cfg.Tool {
				calls = 2
			}
			if r.ModelCallsPerTurn != calls {
				t.Errorf("%.2f model calls per turn, want %.0f (counted in the turn-worker processes)", r.ModelCallsPerTurn, calls)
			}
			roles := map[string]int{}
			for _, p := range r.Processes {
				roles[p.Role]++
				if p.Pid <= 0 {
					t.Errorf("process %s: no pid", p.Name)
				}
			}
			wantRoles := map[string]int{"load generator": 1, roleNATS: max(cfg.Cluster, 1), roleTurn: cfg.TurnWorkers,
				roleIngest: max(cfg.Ingests, 1), roleTool: max(cfg.ToolWorkers, 1), roleEgress: max(cfg.Egresses, 1)}
			for role, n := range wantRoles {
				if roles[role] != n {
					t.Errorf("%d %s processes reported, want %d (%v)", roles[role], role, n, roles)
				}
			}
			if r.NATSServers != max(cfg.Cluster, 1) {
				t.Errorf("NATSServers %d", r.NATSServers)
			}
			if r.StreamMsgsPerTurn <= 0 || r.NATSInMsgsPerTurn <= 0 || r.AppendsPerTurn["SESSION_IN"] <= 0 {
				t.Errorf("JetStream counters not read from the server processes: %+v", r)
			}
			if r.Baseline == nil || r.Baseline.MsgsPerSec <= 0 {
				t.Errorf("no baseline: %+v", r.Baseline)
			}
			// The roles allocate in their own processes: this one's counters would say nothing.
			if r.AllocObjectsPerTurn != 0 || r.GCShare != 0 {
				t.Errorf("allocation figures reported for a multi-process run: %.0f objects per turn, share %.3f", r.AllocObjectsPerTurn, r.GCShare)
			}
			for _, p := range r.Processes {
				if p.AllocKiBPerTurn <= 0 || p.AllocObjectsPerTurn <= 0 || p.GCShare < 0 || p.GCShare >= 1 {
					t.Errorf("process %s: allocation figures not read: %.1f KiB, %.0f objects per turn, collector share %.3f",
						p.Name, p.AllocKiBPerTurn, p.AllocObjectsPerTurn, p.GCShare)
				}
			}
			for _, p := range r.Processes[1:] {
				if _, err := os.Stat(cfg.ProfileDir + "/" + p.Name + ".pprof"); err != nil {
					t.Errorf("no CPU profile of %s: %v", p.Name, err)
				}
			}
			var text bytes.Buffer
			r.WriteText(&text)
			for _, s := range []string{"turns/s", "p50", "p99", "max", "ms per turn", "turn-worker-2:", "appends/turn", "SESSION_IN", "calls per turn", "baseline:"} {
				if !strings.Contains(text.String(), s) {
					t.Errorf("report lacks %q:\n%s", s, text.String())
				}
			}
		})
	}
}

func TestMergeCounters(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes []*countersJSON
		want  jsCounters
	}{
		{"one node", []*countersJSON{{APITotal: 3, InMsgs: 10, InBytes: 100, PerStream: map[string]uint64{"A": 5, "B": 2}, StreamBytes: map[string]uint64{"A": 50}}},
			jsCounters{streamMsgs: 7, apiTotal: 3, inMsgs: 10, inBytes: 100}},
		{"replicas count once, the follower lags", []*countersJSON{
			{APITotal: 1, InMsgs: 10, PerStream: map[string]uint64{"A": 5, "B": 2}},
			{APITotal: 2, InMsgs: 20, PerStream: map[string]uint64{"A": 4}},
			{InMsgs: 30, PerStream: map[string]uint64{"B": 2}}, nil},
			jsCounters{streamMsgs: 7, apiTotal: 3, inMsgs: 60}},
		{"none", nil, jsCounters{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := mergeCounters(tc.nodes)
			if got.streamMsgs != tc.want.streamMsgs || got.apiTotal != tc.want.apiTotal || got.inMsgs != tc.want.inMsgs || got.inBytes != tc.want.inBytes {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			var sum uint64
			for _, v := range got.perStream {
				sum += v
			}
			if sum != got.streamMsgs {
				t.Errorf("per stream %v does not add up to %d", got.perStream, got.streamMsgs)
			}
		})
	}
}

func TestConfigRejectsProcessOptionsWithoutProcesses(t *testing.T) {
	for _, c := range []Config{{Cluster: 3}, {Ingests: 2}, {ToolWorkers: 2}, {Egresses: 2}, {ProfileDir: "x"},
		{Processes: true, Cluster: 2}, {Processes: true, Ingests: -1}} {
		if err := c.defaults(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: err = %v, want ErrConfig", c, err)
		}
	}
}
