// Package rolemain is the shared main of the single-role binaries (cmd/ingest,
// cmd/turn-worker, cmd/tool-worker, cmd/egress): flags, config, logging, signals.
package rolemain

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/config"
)

// Main runs one role until SIGINT/SIGTERM and returns the exit code.
func Main(name string, roles app.Roles) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	path := fs.String("config", "agentbus.yml", "config file")
	url := fs.String("nats", os.Getenv("AGENTBUS_NATS_URL"), "NATS URL (overrides nats.url; default from the config)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 64
	}
	cfg, err := load(*path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	if *url != "" {
		cfg.NATS.URL, cfg.NATS.Embedded = *url, false
	}
	if cfg.NATS.Embedded {
		fmt.Fprintf(os.Stderr, "%s: a single role needs a NATS server: set nats.url or --nats (agentbus up runs everything embedded)\n", name)
		return 1
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("role", name)
	slog.SetDefault(log)
	if len(cfg.MissingEnv) > 0 {
		log.Warn("config refers to unset environment variables (expanded to empty)", "vars", cfg.MissingEnv)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := app.Run(ctx, cfg, app.Options{Roles: roles, Out: io.Discard, Log: log}); err != nil {
		log.Error("exit", "err", err)
		return 1
	}
	return 0
}

func load(path string) (*config.Config, error) {
	if _, err := os.Stat(path); err != nil && path == "agentbus.yml" {
		return config.Parse(nil)
	}
	return config.Load(path)
}
