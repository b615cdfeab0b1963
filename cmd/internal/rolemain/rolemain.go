// Package rolemain is the shared main of the single-role binaries (cmd/ingest,
// cmd/turn-worker, cmd/tool-worker, cmd/egress): flags, config, logging, signals.
//
// Every start-up failure (a config that does not load, a NATS server that does not answer, a
// port in use, a bad *.tool.md, ...) ends the process with exit code 1 and ONE line on stderr,
// "<role>: <what is wrong and what to fix>"; once running, logs go to stderr, JSON lines
// unless log.format says text (pkg/logging: unique keys, log.level).
package rolemain

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/buildinfo"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/logging"
	"github.com/agentbus/agentbus/pkg/tracing"
)

// EnvHelp lists the environment variables agentbus's binaries read, for --help.
const EnvHelp = `Environment:
  AGENTBUS_NATS_URL       NATS URL(s), comma-separated (overrides nats.url; --nats overrides it)
  AGENTBUS_HEALTH_LISTEN  serve GET /healthz on this address (overrides health.listen; --health overrides it)
  AGENTBUS_METRICS_LISTEN serve GET /metrics on this address (overrides metrics.listen; --metrics-listen overrides it)
  <ALIAS>_API_KEY         API key of provider ai.providers.<alias> (e.g. OPENAI_MAIN_API_KEY) when apiKey is unset
  OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY, GOOGLE_API_KEY
                          vendor keys, used for that vendor's own endpoint; with no provider configured
                          the first one set picks the default model
  OLLAMA_HOST             a local Ollama's address (default http://127.0.0.1:11434)
  ${VAR} / ${VAR:-default} anywhere in the config file is expanded from the environment
Traces (OpenTelemetry, docs/observability.md):
` + tracing.EnvHelp

// Description is one line per role binary for --help.
var Description = map[string]string{
	"ingest":      "receives IM messages (webhook, console) and routes them to the session inboxes",
	"turn-worker": "owns chat sessions and runs the agent loop: model calls, tool calls over the bus, replies",
	"tool-worker": "executes tool calls from the bus (bash, files, web, MCP servers, *.tool.md)",
	"egress":      "delivers replies to the IM platforms and keeps the transcript archive (dataDir)",
}

// Main runs one role until SIGINT/SIGTERM and returns the exit code.
func Main(name string, roles app.Roles) int {
	return Run(name, roles, os.Args[1:], os.Stdout, os.Stderr)
}

// Run is Main with its arguments and output streams given (tests run it in-process).
func Run(name string, roles app.Roles, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "agentbus.yml", "config file (when the default is absent, the built-in defaults)")
	url := fs.String("nats", os.Getenv("AGENTBUS_NATS_URL"), "NATS URL(s) (overrides nats.url)")
	healthAddr := fs.String("health", os.Getenv("AGENTBUS_HEALTH_LISTEN"), "serve GET /healthz on this address, e.g. 127.0.0.1:8081 (overrides health.listen)")
	metricsAddr := fs.String("metrics-listen", os.Getenv("AGENTBUS_METRICS_LISTEN"), "serve GET /metrics (Prometheus) on this address, e.g. 127.0.0.1:9091 (overrides metrics.listen)")
	showVersion := fs.Bool("version", false, "print the build's version and revision, then exit")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "%s — agentbus's %s role: %s.\nRuns until SIGINT/SIGTERM against a NATS server; run any number of replicas (docs/cluster.md).\n\nUsage:\n  %s [flags]\n\nFlags:\n", name, name, Description[name], name)
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), "\n"+EnvHelp)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 64
	}
	if *showVersion {
		fmt.Fprintf(stdout, "%s %s\n", name, buildinfo.Get())
		return 0
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "%s: %s\n", name, OneLine(err))
		return 1
	}
	cfg, err := load(*path)
	if err != nil {
		return fail(err)
	}
	if *url != "" {
		cfg.NATS.URL, cfg.NATS.Embedded = *url, false
	}
	if *healthAddr != "" {
		cfg.Health.Listen = *healthAddr
	}
	if *metricsAddr != "" {
		cfg.Metrics.Listen = *metricsAddr
	}
	if cfg.NATS.Embedded {
		return fail(errors.New("a single role needs a NATS server: set nats.url, --nats or AGENTBUS_NATS_URL (agentbus up runs everything on an embedded server)"))
	}
	format := cfg.Log.Format
	if format == "" {
		format = "json" // a role runs under a supervisor that collects lines
	}
	log, err := logging.New(stderr, format, cfg.Log.Level)
	if err != nil {
		return fail(err)
	}
	log = log.With("role", name)
	slog.SetDefault(log)
	if len(cfg.MissingEnv) > 0 {
		log.Warn("config refers to unset environment variables (expanded to empty)", "vars", cfg.MissingEnv)
	}
	if len(cfg.Reserved) > 0 {
		log.Warn(config.ReservedWarning(cfg.Reserved))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p, err := app.Start(ctx, cfg, app.Options{Roles: roles, Out: io.Discard, Log: log})
	if err != nil {
		return fail(err)
	}
	log.Info("running", "version", buildinfo.Get().String(), "health", p.HealthURL, "metrics", p.MetricsURL, "webhook", p.WebhookURL)
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := p.Stop(sctx); err != nil {
		log.Error("stop", "err", err)
		return 1
	}
	return 0
}

// stopTimeout bounds the stop after SIGINT/SIGTERM (in-flight tool calls and deliveries finish),
// within a supervisor's usual kill timeout.
const stopTimeout = 30 * time.Second

// OneLine renders err on one line: the lines of a multi-line error are joined with "; ".
func OneLine(err error) string {
	var parts []string
	for _, l := range strings.Split(err.Error(), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, "; ")
}

func load(path string) (*config.Config, error) {
	if _, err := os.Stat(path); err != nil && path == "agentbus.yml" {
		return config.Parse(nil)
	}
	return config.Load(path)
}
