package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/agentbus/agentbus/pkg/bench"
)

// cmdBench runs the whole pipeline (webhook in, callback out) with every role and an embedded
// NATS server in this process, or (--processes) with every role replica and the NATS server(s)
// as child processes of this one (main calls bench.ChildMain for them), and prints the figures
// (pkg/bench, docs/benchmarks.md).
func cmdBench(ctx context.Context, args []string, w io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(w)
	var cfg bench.Config
	fs.IntVar(&cfg.Sessions, "sessions", 100, "concurrent chat sessions")
	fs.IntVar(&cfg.Messages, "messages", 10, "messages per session")
	fs.DurationVar(&cfg.Latency, "latency", 0, "model latency before the first event of each model call (ms resolution)")
	fs.BoolVar(&cfg.Tool, "tool", false, "one tool call per turn (the bench_echo tool, through the tool worker)")
	fs.Float64Var(&cfg.Rate, "rate", 0, "offered load in turns/s (0: closed loop, concurrency = sessions)")
	fs.BoolVar(&cfg.Kill, "kill", false, "run two turn workers and kill one when half the turns are done")
	fs.IntVar(&cfg.TurnWorkers, "turn-workers", 1, "turn-worker replicas sharing the sessions")
	fs.IntVar(&cfg.Baseline, "baseline", 20000, "messages in the raw JetStream publish baseline (negative: skip)")
	fs.DurationVar(&cfg.ReplyTimeout, "reply-timeout", 60*time.Second, "how long a message waits for its reply before it counts as lost")
	fs.BoolVar(&cfg.Stages, "stages", false, "also report the time to each pipeline stage (an observer on the bus; costs CPU)")
	fs.BoolVar(&cfg.Processes, "processes", false, "run every role replica as an OS process of its own against nats-server process(es), instead of all in this one")
	fs.IntVar(&cfg.Cluster, "cluster", 1, "with --processes: nats-server processes (1, or 3 for a loopback cluster with 3 replicas)")
	fs.IntVar(&cfg.Ingests, "ingests", 1, "with --processes: ingest processes (the load is spread over their webhooks)")
	fs.IntVar(&cfg.ToolWorkers, "tool-workers", 1, "with --processes: tool-worker processes")
	fs.IntVar(&cfg.Egresses, "egresses", 1, "with --processes: egress processes")
	fs.StringVar(&cfg.Dir, "dir", "", "keep the NATS store, the data directories and (with --processes) the child processes' logs here; a later run on the same directory measures new sessions on the store as left (default: a temporary directory, removed)")
	outside := fs.Bool("outside", false, "measure `agentbus up` from outside (a process of its own, through the signed webhook, a model server speaking the OpenAI protocol) against a bus-less relay of the same shape, plain and --tool turns (both unless --tool), closed loop and at --rate (default half of each side's maximum)")
	plainOnly := fs.Bool("plain", false, "with --outside: plain turns only")
	rounds := fs.Int("rounds", 1, "with --outside: interleaved closed-loop pairs (agentbus, relay) per shape")
	asJSON := fs.Bool("json", false, "print the figures as JSON")
	cpuProfile := fs.String("cpuprofile", "", "write a pprof CPU profile of the measured phase to this file (with --processes: a directory, one <process>.pprof each; with --outside: agentbus up's whole run)")
	traceFile := fs.String("trace", "", "write a Go execution trace of the measured phase to this file (go tool trace; not with --processes or --outside)")
	memProfile := fs.String("memprofile", "", "write a pprof heap profile taken with the most turns in a model call to this file")
	verbose := fs.Bool("v", false, "log the roles' warnings and errors to stderr")
	fs.Usage = func() {
		fmt.Fprintln(w, "Usage: agentbus bench [flags]\n\nMeasures the whole pipeline: signed webhook POSTs in, callback POSTs out; every role in this\nprocess, or with --processes every role replica as a process of its own (docs/benchmarks.md).")
		fs.PrintDefaults()
		fmt.Fprint(w, "\nEnvironment (tracing on or off is chosen here: set an endpoint to measure tracing on):\n"+traceEnvHelp)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("bench: unexpected argument %q", fs.Arg(0))
	}
	if cfg.Sessions <= 0 || cfg.Messages <= 0 {
		return fmt.Errorf("bench: --sessions and --messages must be positive")
	}
	if *outside {
		oc := bench.OutsideConfig{Sessions: cfg.Sessions, Messages: cfg.Messages, Rate: cfg.Rate, Rounds: *rounds, Tool: cfg.Tool, Plain: *plainOnly}
		if !*asJSON {
			oc.Progress = w
		}
		if *cpuProfile != "" {
			var err error
			if oc.UpProfile, err = filepath.Abs(*cpuProfile); err != nil {
				return fmt.Errorf("bench: --cpuprofile: %w", err)
			}
		}
		res, err := bench.RunOutside(ctx, oc)
		if err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(res)
		}
		res.WriteSummary(w)
		return nil
	}
	if cfg.Latency%time.Millisecond != 0 {
		return fmt.Errorf("bench: --latency %s: the faux model takes whole milliseconds", cfg.Latency)
	}
	if cfg.Baseline == 0 {
		cfg.Baseline = -1
	}
	if *verbose {
		cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if *cpuProfile != "" && cfg.Processes {
		if err := os.MkdirAll(*cpuProfile, 0o755); err != nil {
			return fmt.Errorf("bench: --cpuprofile: %w", err)
		}
		cfg.ProfileDir = *cpuProfile
		*cpuProfile = filepath.Join(*cpuProfile, "bench.pprof")
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer f.Close()
		cfg.CPUProfile = f
	}
	if *traceFile != "" {
		f, err := os.Create(*traceFile)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer f.Close()
		cfg.Trace = f
	}
	if *memProfile != "" {
		f, err := os.Create(*memProfile)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer f.Close()
		cfg.HeapProfile = f
	}
	res, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if *traceFile != "" {
		if res.Trace, err = readTraceTail(*traceFile); err != nil {
			return err
		}
	}
	if *asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	res.WriteText(w)
	return nil
}

// readTraceTail summarizes the execution trace written to name (bench.ReadTraceTail).
func readTraceTail(name string) (*bench.TraceTail, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer f.Close()
	return bench.ReadTraceTail(bufio.NewReader(f))
}
