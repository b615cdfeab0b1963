package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/agentbus/agentbus/pkg/approvals"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/egress"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/execpolicy"
	"github.com/agentbus/agentbus/pkg/filepolicy"
	"github.com/agentbus/agentbus/pkg/imagegen"
	"github.com/agentbus/agentbus/pkg/mcpclient"
	"github.com/agentbus/agentbus/pkg/tools"
	"github.com/agentbus/agentbus/pkg/tools/builtin"
	"github.com/agentbus/agentbus/pkg/tools/filetool"
	"github.com/agentbus/agentbus/pkg/toolworker"
	"github.com/agentbus/agentbus/pkg/turn"
)

// ToolSet builds every tool a tool worker serves: the built-ins the config allows, user_profile
// and chat_history, *.tool.md files and MCP servers' tools.
func (p *Process) ToolSet(ctx context.Context, cfg *config.Config, log *slog.Logger) (*tools.Registry, error) {
	a := cfg.AI.Agent
	files, err := filepolicy.New(filepolicy.Options{Workspace: a.Workspace, PrivateDirs: []string{cfg.NATS.StoreDir}})
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	exec, err := execpolicy.FromConfig(a, files)
	if err != nil {
		return nil, fmt.Errorf("exec policy: %w", err)
	}
	store := p.skillStore(cfg, log)
	bc, err := builtin.FromConfig(cfg.AI, files, exec, store)
	if err != nil {
		return nil, err
	}
	aps, err := approvals.Open(ctx, p.JS)
	if err != nil {
		return nil, err
	}
	bc.Approvals = func(ctx context.Context, env tools.Env) (*execpolicy.Approvals, error) {
		ap, _, err := aps.Get(ctx, env.Platform, env.BotID)
		return ap, err
	}
	bc.Confirmations = approvals.BashConfirmations{Store: aps}
	bc.Log = log
	all, err := builtin.All(bc)
	if err != nil {
		return nil, err
	}
	presets, err := filetool.LoadAgents(a.AgentsDir)
	if err != nil {
		return nil, err
	}
	profiles, err := toolworker.NewProfileStore(ctx, p.JS)
	if err != nil {
		return nil, err
	}
	all = append(all, toolworker.UserProfileTool(profiles), toolworker.ChatHistoryTool(toolworker.NATSHistory{NC: p.NC}),
		turn.SpawnTaskTool(p.JS, presets))
	media, err := p.JS.ObjectStore(ctx, events.ObjectMedia)
	if err != nil {
		return nil, fmt.Errorf("open media store: %w", err)
	}
	if len(imagegen.ImageProviders(cfg.AI.Providers)) > 0 {
		gen, err := imagegen.NewTool(imagegen.ToolConfig{AI: cfg.AI, Media: media, HTTPClient: bc.Guard.Client(2 * time.Minute), Log: log})
		if err != nil {
			return nil, err
		}
		all = append(all, gen)
	}
	// Handlers run in the workspace, like bash (files.Workspace is absolute and exists).
	fileTools, err := filetool.LoadTools(a.ToolsDir, filetool.Options{Workspace: files.Workspace()})
	if err != nil {
		return nil, err // seed Grill #18: an unsupported tool.md fails start-up
	}
	all = append(all, fileTools...)
	var mgr *mcpclient.Manager
	if len(cfg.AI.MCPServers) > 0 {
		if mgr, err = mcpclient.New(cfg.AI.MCPServers, mcpclient.Options{Log: log}); err != nil {
			return nil, err
		}
		p.onStop("MCP clients", func(context.Context) error { return mgr.Close() })
		all = append(all, mgr.Tools(ctx)...)
	}
	reg, err := tools.NewRegistry(all...)
	if err != nil || mgr == nil {
		return reg, err
	}
	// Servers that were down come in later, and lists change: keep the registry current.
	sctx, cancel := context.WithCancel(context.Background())
	p.onStopFunc("MCP tool refresh", cancel)
	go mgr.Sync(sctx, reg)
	return reg, nil
}

func (p *Process) startToolWorker(ctx context.Context, cfg *config.Config, opts Options, log *slog.Logger) error {
	reg, err := p.ToolSet(ctx, cfg, log.With("role", "tool-worker"))
	if err != nil {
		return err
	}
	for _, t := range opts.ExtraTools {
		if err := reg.Add(t); err != nil {
			return fmt.Errorf("extra tool: %w", err)
		}
	}
	h, err := toolworker.Run(ctx, toolworker.Options{NC: p.NC, JS: p.JS, Registry: reg, Log: log.With("role", "tool-worker"),
		DefaultTimeout: time.Duration(cfg.AI.Agent.ToolTimeoutMs) * time.Millisecond})
	if err != nil {
		return err
	}
	p.onStop("tool worker", h.Stop)
	p.health.check("tool-worker", doneCheck(h.Done()))
	return nil
}

func (p *Process) startEgress(ctx context.Context, cfg *config.Config, opts Options, log *slog.Logger) error {
	h, err := egress.Run(ctx, egress.Options{NC: p.NC, JS: p.JS, Config: cfg, DataDir: cfg.DataDir,
		Log: log, HTTPClient: opts.HTTPClient}) // egress names its role itself
	if err != nil {
		return err
	}
	p.onStop("egress", h.Stop)
	p.health.check("egress", doneCheck(h.Done()))
	return nil
}
