// Command agentbus is the binary for people: it runs agentbus (all roles on an embedded NATS
// server), chats with it, replays sessions, benchmarks the pipeline and checks exec policy.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/execpolicy"
)

const usage = `agentbus — AI agents that live in chat, on NATS JetStream

Usage:
  agentbus up [--config FILE]            run every role on an embedded NATS server (default ./agentbus.yml if present)
  agentbus chat [--nats URL] [--user ID]  talk to a running agentbus from the terminal
  agentbus sessions [--nats URL]          list sessions
  agentbus replay [--nats URL] SESSION    print a session's turns from the event log
                                         (these three find the URL and credentials in ./data; --data DIR)
  agentbus bench [flags]                  measure the whole pipeline (webhook in, callback out)
  agentbus provision [--config FILE]     create or update every stream and bucket on nats.url, then exit
  agentbus exec-policy check [flags] -- 'COMMAND LINE'
  agentbus version
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 64
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch args[0] {
	case "up":
		err = cmdUp(ctx, args[1:], stdout)
	case "chat":
		err = cmdChat(ctx, args[1:], os.Stdin, stdout)
	case "sessions":
		err = cmdSessions(ctx, args[1:], stdout)
	case "replay":
		err = cmdReplay(ctx, args[1:], stdout)
	case "bench":
		err = cmdBench(ctx, args[1:], stdout)
	case "provision":
		err = cmdProvision(ctx, args[1:], stdout)
	case "exec-policy":
		return execpolicy.CLI(args[1:], stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "agentbus", version)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "agentbus: unknown command %q\n\n%s", args[0], usage)
		return 64
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "agentbus:", err)
		return 1
	}
	return 0
}

var version = "dev"

// loadConfig reads --config, or ./agentbus.yml when it exists, or the defaults.
func loadConfig(path string) (*config.Config, error) {
	if path == "" {
		if _, err := os.Stat("agentbus.yml"); err == nil {
			path = "agentbus.yml"
		}
	}
	if path == "" {
		return config.Parse(nil)
	}
	return config.Load(path)
}

func newLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	level := slog.LevelInfo
	switch cfg.Log.Level {
	case "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	}
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func cmdUp(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	path := fs.String("config", "", "config file (default ./agentbus.yml when present)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		return err
	}
	log := newLogger(cfg, os.Stderr)
	slog.SetDefault(log)
	if len(cfg.MissingEnv) > 0 {
		log.Warn("config refers to unset environment variables (expanded to empty)", "vars", cfg.MissingEnv)
	}
	return app.Run(ctx, cfg, app.Options{Roles: app.AllRoles.FromConfig(cfg.Roles), Out: stdout, Log: log})
}
