package bench

import (
	"bytes"
	"context"
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
