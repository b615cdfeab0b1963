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
	"net/http"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/agentbus/agentbus/cmd/internal/rolemain"
	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/bench"
	"github.com/agentbus/agentbus/pkg/buildinfo"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/execpolicy"
	"github.com/agentbus/agentbus/pkg/logging"
	"github.com/agentbus/agentbus/pkg/tracing"
)

const usage = `agentbus — AI agents that live in chat, on NATS JetStream

Usage:
  agentbus up [--config FILE]             run every role (ingest, turn-worker, tool-worker, egress) on an
                                          embedded NATS server, data in ./data; runs until Ctrl-C / SIGTERM
  agentbus chat [--user ID]               talk to a running agentbus from the terminal (finds a local
                                          agentbus up, its URL and credentials, through ./data;
                                          --data DIR for another directory, --nats URL for another server)
  agentbus sessions                       list sessions, most recent first
  agentbus replay SESSION                 print a session's turns from the event log
  agentbus console [--listen ADDR]        the web console (sessions, turn chains, forks, dead letters);
                                          agentbus up serves it too, on console.listen (127.0.0.1:8089)
  agentbus bench [flags]                  measure the whole pipeline (webhook in, callback out)
  agentbus provision [--config FILE]      create or update every stream and bucket on nats.url, then exit
  agentbus region promote|status [--config FILE]
                                          make this standby region live / show its streams (docs/regions.md)
  agentbus status                         what runs on the bus: replicas, sessions, adapters, backlogs, dead letters
  agentbus config check [FILE]            validate a configuration without starting anything (the checks up
                                          makes before it starts; exit 1 with the same one-line error)
  agentbus doctor [--config FILE]         check config, bus, providers, adapters, sandbox, data dir, disk
  agentbus dlq list|show ID|retry ID|discard ID|purge
                                          the dead letters of every role; retry puts one back where it came from
  agentbus exec-policy check [flags] -- 'COMMAND LINE'
                                          what the bash tool's exec policy decides for a command
  agentbus health URL                     exit 0 when URL (a /healthz) answers 200, else 1 (container checks)
  agentbus version

"agentbus COMMAND --help" describes a command and its flags. The single-role binaries (ingest,
turn-worker, tool-worker, egress) run one role each against a NATS cluster; see their --help.

Environment:
  AGENTBUS_NATS_URL       chat, sessions, replay, status, dlq, doctor: NATS URL (--nats overrides it)
  AGENTBUS_DATA_DIR       chat, sessions, replay, status, dlq, doctor: data directory of the local agentbus up (default ./data)
` + providerEnvHelp

// providerEnvHelp lists what agentbus up (and the turn-worker) read for models.
const providerEnvHelp = `  <ALIAS>_API_KEY         API key of provider ai.providers.<alias> (e.g. OPENAI_MAIN_API_KEY) when apiKey is unset
  OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY, GOOGLE_API_KEY
                          vendor keys, used for that vendor's own endpoint; with no provider configured
                          the first one set picks the default model
  OLLAMA_HOST             a local Ollama's address (default http://127.0.0.1:11434)
  ${VAR} / ${VAR:-default} anywhere in the config file is expanded from the environment
`

// traceEnvHelp closes the --help of the commands that run roles (up, bench): they record
// traces as the OTEL_* variables say.
const traceEnvHelp = "Traces (OpenTelemetry, docs/observability.md; each role its own service):\n" + tracing.EnvHelp

// clientEnvHelp closes the --help of chat, sessions and replay.
const clientEnvHelp = `
Environment:
  AGENTBUS_NATS_URL   NATS URL (--nats overrides it)
  AGENTBUS_DATA_DIR   data directory of the local agentbus up (--data overrides it; default ./data)
  USER                default --user of chat
`

func main() {
	// `agentbus bench --processes` re-executes this binary as its NATS server and role processes.
	if code, ok := bench.ChildMain(); ok {
		os.Exit(code)
	}
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
	case "console":
		err = cmdConsole(ctx, args[1:], stdout)
	case "bench":
		err = cmdBench(ctx, args[1:], stdout)
	case "provision":
		err = cmdProvision(ctx, args[1:], stdout)
	case "status":
		err = cmdStatus(ctx, args[1:], stdout)
	case "region":
		err = cmdRegion(ctx, args[1:], stdout)
	case "doctor":
		err = cmdDoctor(ctx, args[1:], stdout)
	case "dlq":
		err = cmdDLQ(ctx, args[1:], stdout)
	case "config":
		err = cmdConfig(ctx, args[1:], stdout, stderr)
	case "exec-policy":
		return execpolicy.CLI(args[1:], stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "agentbus", buildinfo.Get())
	case "health":
		return cmdHealth(args[1:], stdout, stderr)
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
		if err == errSilent { // the command printed why
			return 1
		}
		if err == errUsage {
			return 64
		}
		fmt.Fprintln(stderr, "agentbus:", rolemain.OneLine(err))
		return 1
	}
	return 0
}

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

// newLogger is log.format (text by default) and log.level, with unique keys (pkg/logging).
func newLogger(cfg *config.Config, w io.Writer) (*slog.Logger, error) {
	return logging.New(w, cfg.Log.Format, cfg.Log.Level)
}

func cmdUp(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	path, healthAddr, metricsAddr := upFlags(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `agentbus up — run agentbus on this machine: an embedded NATS JetStream server (store under
dataDir, default ./data) and all four roles in one process, until Ctrl-C / SIGTERM. Without a
provider configured it uses a local Ollama, else an API key from the environment, else a
built-in demo model. One agentbus up per data directory (it is locked); when port 4222 is taken
the server picks a free port and records it in dataDir/nats.url, where agentbus chat finds it.

Usage:
  agentbus up [flags]

Flags:
`)
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), "\nEnvironment:\n  AGENTBUS_HEALTH_LISTEN  default of --health\n  AGENTBUS_METRICS_LISTEN default of --metrics-listen\n  AGENTBUS_UP_CPUPROFILE  write a pprof CPU profile of the whole run to this file (agentbus bench --outside --cpuprofile)\n"+providerEnvHelp+traceEnvHelp)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		return err
	}
	if *healthAddr != "" {
		cfg.Health.Listen = *healthAddr
	}
	if *metricsAddr != "" {
		cfg.Metrics.Listen = *metricsAddr
	}
	log, err := newLogger(cfg, os.Stderr)
	if err != nil {
		return err
	}
	slog.SetDefault(log)
	if file := os.Getenv("AGENTBUS_UP_CPUPROFILE"); file != "" {
		f, err := os.Create(file)
		if err != nil {
			return fmt.Errorf("AGENTBUS_UP_CPUPROFILE: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("AGENTBUS_UP_CPUPROFILE: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if len(cfg.MissingEnv) > 0 {
		log.Warn("config refers to unset environment variables (expanded to empty)", "vars", cfg.MissingEnv)
	}
	if len(cfg.Reserved) > 0 {
		log.Warn(config.ReservedWarning(cfg.Reserved))
	}
	return app.Run(ctx, cfg, app.Options{Roles: app.AllRoles.FromConfig(cfg.Roles), Out: stdout, Log: log,
		Ready: func(p *app.Process) { upConsole(ctx, p, stdout, log) }})
}

// upFlags declares the flags of agentbus up on fs (the docs test parses documented command
// lines with it).
func upFlags(fs *flag.FlagSet) (path, healthAddr, metricsAddr *string) {
	path = fs.String("config", "", "config file (default ./agentbus.yml when present, else the built-in defaults)")
	healthAddr = fs.String("health", os.Getenv("AGENTBUS_HEALTH_LISTEN"), "serve GET /healthz on this address, e.g. 127.0.0.1:8081 (overrides health.listen)")
	metricsAddr = fs.String("metrics-listen", os.Getenv("AGENTBUS_METRICS_LISTEN"), "serve GET /metrics (Prometheus) on this address, e.g. 127.0.0.1:9091 (overrides metrics.listen)")
	return path, healthAddr, metricsAddr
}

// cmdHealth GETs a /healthz URL: exit 0 on 200, 1 otherwise (printing the report). Images
// without a shell or curl use it as their HEALTHCHECK.
func cmdHealth(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the answer")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "agentbus health — exit 0 when URL answers 200 (every role process serves /healthz on health.listen\nor --health; ingest also on its webhook address), 1 otherwise.\n\nUsage:\n  agentbus health [--timeout D] URL\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 64
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 64
	}
	c := &http.Client{Timeout: *timeout}
	resp, err := c.Get(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, "agentbus health:", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "agentbus health: %s: %s\n%s", fs.Arg(0), resp.Status, body)
		return 1
	}
	fmt.Fprint(stdout, string(body))
	return 0
}
