package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/models"
	"github.com/agentbus/agentbus/pkg/tools/builtin"
	"github.com/agentbus/agentbus/pkg/tools/filetool"
)

func cmdConfig(_ context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "check" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(stdout, configUsage)
			return flag.ErrHelp
		}
		fmt.Fprint(stderr, configUsage)
		return errUsage
	}
	fs := flag.NewFlagSet("config check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), configUsage) }
	if err := fs.Parse(args[1:]); err != nil {
		if err == flag.ErrHelp {
			fs.SetOutput(stdout)
			fs.Usage()
		}
		return err
	}
	if fs.NArg() > 1 {
		fmt.Fprint(stderr, configUsage)
		return errUsage
	}
	cfg, err := checkConfig(fs.Arg(0))
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, configSummary(cfg))
	return nil
}

const configUsage = `agentbus config check — validate a configuration without starting anything: the YAML, every key
(unknown keys are errors), the values, ${ENV} references, the providers, the *.tool.md and
*.agent.md files. It does what agentbus up does before it opens the data directory or the bus,
so it fails with the same one-line error and exit status 1; when the file is valid it prints a
short summary and exits 0.

Usage:
  agentbus config check [FILE]    FILE defaults to ./agentbus.yml when present, else the built-in defaults
`

// errUsage makes run exit 64 without printing more.
var errUsage = fmt.Errorf("usage")

// checkConfig loads path as agentbus up does (./agentbus.yml or the defaults when path is empty)
// and then runs the checks up runs before it starts a role and that need no bus: a provider's
// apiKey naming an unset variable, the provider registry, log:, the web tools' and sandbox
// settings, the ai.tools names, and the *.tool.md and *.agent.md files of ai.agent.toolsDir
// and agentsDir. It does not start MCP servers or create the workspace (so the exec policy's
// allowlist paths are checked by up only).
func checkConfig(path string) (*config.Config, error) {
	cfg, err := loadConfig(path)
	if err != nil {
		return nil, err
	}
	if _, err := newLogger(cfg, io.Discard); err != nil {
		return nil, err
	}
	roles := app.AllRoles.FromConfig(cfg.Roles)
	if roles.TurnWorker {
		if err := cfg.MissingAPIKeyError(); err != nil {
			return nil, fmt.Errorf("turn-worker: %w", err)
		}
		if _, err := models.NewRegistry(cfg.AI.Providers); err != nil {
			return nil, fmt.Errorf("turn-worker: %w", err)
		}
	}
	if roles.ToolWorker {
		ws, err := filepath.Abs(cfg.AI.Agent.Workspace)
		if err != nil {
			return nil, fmt.Errorf("tool-worker: workspace: %w", err)
		}
		bc, err := builtin.FromConfig(cfg.AI, nil, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("tool-worker: %w", err)
		}
		bc.Log = slog.New(slog.DiscardHandler)
		if _, err := builtin.All(bc); err != nil { // without a workspace: no file tools, no bash
			return nil, fmt.Errorf("tool-worker: %w", err)
		}
		if _, err := filetool.LoadAgents(cfg.AI.Agent.AgentsDir); err != nil {
			return nil, fmt.Errorf("tool-worker: %w", err)
		}
		if _, err := filetool.LoadTools(cfg.AI.Agent.ToolsDir, filetool.Options{Workspace: ws}); err != nil {
			return nil, fmt.Errorf("tool-worker: %w", err)
		}
	}
	return cfg, nil
}

// configSummary is what config check prints for a valid configuration: a few lines saying what
// agentbus up would run with it.
func configSummary(cfg *config.Config) string {
	var b strings.Builder
	where := cfg.Path
	if where == "" {
		where = "built-in defaults (no agentbus.yml here)"
	}
	fmt.Fprintf(&b, "config %s: valid\n", where)
	if cfg.NATS.Embedded {
		fmt.Fprintf(&b, "  nats:      embedded, data in %s\n", cfg.DataDir)
	} else {
		fmt.Fprintf(&b, "  nats:      %s\n", cfg.NATS.URL)
	}
	var roles []string
	r := app.AllRoles.FromConfig(cfg.Roles)
	for _, x := range []struct {
		on   bool
		name string
	}{{r.Ingest, "ingest"}, {r.TurnWorker, "turn-worker"}, {r.ToolWorker, "tool-worker"}, {r.Egress, "egress"}} {
		if x.on {
			roles = append(roles, x.name)
		}
	}
	fmt.Fprintf(&b, "  roles:     %s\n", strings.Join(roles, ", "))
	var providers []string
	for _, a := range slices.Sorted(maps.Keys(cfg.AI.Providers)) {
		p := cfg.AI.Providers[a]
		api := p.API
		if api == "" {
			api = p.Driver
		}
		providers = append(providers, a+" ("+api+")")
	}
	if len(providers) == 0 {
		providers = []string{"none: agentbus up picks a local Ollama, a vendor API key from the environment, or the demo model"}
	}
	fmt.Fprintf(&b, "  providers: %s\n", strings.Join(providers, ", "))
	var agents []string
	for _, n := range slices.Sorted(maps.Keys(cfg.AI.Agents)) {
		a := cfg.AI.Agents[n]
		agents = append(agents, fmt.Sprintf("%s → %s/%s", n, a.Provider, a.Model))
	}
	if len(agents) > 0 {
		fmt.Fprintf(&b, "  agents:    %s\n", strings.Join(agents, ", "))
	}
	var bots []string
	for _, x := range []struct {
		name string
		n    int
	}{{"webhook", len(cfg.IM.Webhook.Bots)}, {"onebot", len(cfg.IM.OneBot.Bots)}, {"telegram", len(cfg.IM.Telegram.Bots)},
		{"discord", len(cfg.IM.Discord.Bots)}, {"slack", len(cfg.IM.Slack.Bots)}, {"matrix", len(cfg.IM.Matrix.Bots)}} {
		if x.n > 0 {
			bots = append(bots, fmt.Sprintf("%s %d", x.name, x.n))
		}
	}
	if len(bots) == 0 {
		bots = []string{"none besides agentbus chat"}
	}
	fmt.Fprintf(&b, "  bots:      %s\n", strings.Join(bots, ", "))
	if len(cfg.MissingEnv) > 0 {
		fmt.Fprintf(&b, "  warning:   unset environment variables expand to empty: %s\n", strings.Join(cfg.MissingEnv, ", "))
	}
	if len(cfg.Reserved) > 0 {
		fmt.Fprintf(&b, "  warning:   %s\n", oneLine(config.ReservedWarning(cfg.Reserved)))
	}
	return b.String()
}
