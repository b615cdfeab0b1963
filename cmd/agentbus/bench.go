package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/agentbus/agentbus/pkg/bench"
)

// cmdBench runs the whole pipeline (webhook in, callback out) with every role and an embedded
// NATS server in this process and prints the figures (pkg/bench, docs/benchmarks.md).
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
	asJSON := fs.Bool("json", false, "print the figures as JSON")
	cpuProfile := fs.String("cpuprofile", "", "write a pprof CPU profile of the measured phase to this file")
	memProfile := fs.String("memprofile", "", "write a pprof heap profile taken with the most turns in a model call to this file")
	verbose := fs.Bool("v", false, "log the roles' warnings and errors to stderr")
	fs.Usage = func() {
		fmt.Fprintln(w, "Usage: agentbus bench [flags]\n\nMeasures the whole pipeline in one process: signed webhook POSTs in, callback POSTs out.")
		fs.PrintDefaults()
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
	if cfg.Latency%time.Millisecond != 0 {
		return fmt.Errorf("bench: --latency %s: the faux model takes whole milliseconds", cfg.Latency)
	}
	if cfg.Baseline == 0 {
		cfg.Baseline = -1
	}
	if *verbose {
		cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer f.Close()
		cfg.CPUProfile = f
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
	if *asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	res.WriteText(w)
	return nil
}
