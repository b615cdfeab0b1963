package app

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/agentbus/agentbus/pkg/approvals"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/egress"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/execpolicy"
	"github.com/agentbus/agentbus/pkg/filepolicy"
	"github.com/agentbus/agentbus/pkg/im"
	"github.com/agentbus/agentbus/pkg/im/discord"
	"github.com/agentbus/agentbus/pkg/im/matrix"
	"github.com/agentbus/agentbus/pkg/im/onebot"
	imslack "github.com/agentbus/agentbus/pkg/im/slack"
	"github.com/agentbus/agentbus/pkg/im/telegram"
	"github.com/agentbus/agentbus/pkg/imagegen"
	"github.com/agentbus/agentbus/pkg/ingest"
	"github.com/agentbus/agentbus/pkg/mcpclient"
	"github.com/agentbus/agentbus/pkg/metrics"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/netguard"
	"github.com/agentbus/agentbus/pkg/schedule"
	"github.com/agentbus/agentbus/pkg/tasks"
	"github.com/agentbus/agentbus/pkg/toolbus"
	"github.com/agentbus/agentbus/pkg/tools"
	"github.com/agentbus/agentbus/pkg/tools/builtin"
	"github.com/agentbus/agentbus/pkg/tools/filetool"
	"github.com/agentbus/agentbus/pkg/toolworker"
)

// ToolSet builds every tool a tool worker serves: the built-ins the config allows, user_profile
// and chat_history, *.tool.md files and MCP servers' tools.
func (p *Process) ToolSet(ctx context.Context, cfg *config.Config, log *slog.Logger) (*tools.Registry, error) {
	b, err := p.bus(natsutil.RoleToolWorker)
	if err != nil {
		return nil, err
	}
	a := cfg.AI.Agent
	files, err := filepolicy.New(filepolicy.Options{Workspace: a.Workspace, PrivateDirs: privatePaths(cfg)})
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
	aps, err := approvals.Open(ctx, b.JS)
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
	profiles, err := toolworker.NewProfileStore(ctx, b.JS)
	if err != nil {
		return nil, err
	}
	all = append(all, toolworker.UserProfileTool(profiles), toolworker.ChatHistoryTool(toolworker.NATSHistory{NC: b.NC}),
		tasks.SpawnTaskTool(b.JS, presets))
	bg, err := p.backgroundTools(ctx, b.JS, cfg)
	if err != nil {
		return nil, err
	}
	all = append(all, bg...)
	media, err := b.JS.ObjectStore(ctx, events.ObjectMedia)
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
	p.spawn("MCP tool refresh", func(ctx context.Context) { mgr.Sync(ctx, reg) })
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
	b, err := p.bus(natsutil.RoleToolWorker)
	if err != nil {
		return err
	}
	tp, err := p.tracer(ctx, "tool-worker")
	if err != nil {
		return err
	}
	hk, err := p.hookRunner(cfg, opts.Hooks, b.NC, "tool-worker", log) // hooks.go
	if err != nil {
		return err
	}
	h, err := toolworker.Run(ctx, toolworker.Options{NC: b.NC, JS: b.JS, Registry: reg, Log: log.With("role", "tool-worker"), Hooks: hk,
		Metrics: metrics.NewTools(p.Metrics), DeadLetters: metrics.NewDeadLetters(p.Metrics),
		DefaultTimeout: time.Duration(cfg.AI.Agent.ToolTimeoutMs) * time.Millisecond, Tracer: tp})
	if err != nil {
		return err
	}
	p.onStop("tool worker", h.Stop)
	p.health.setID(events.RoleToolWorker, h.ID())
	p.health.check("tool-worker", doneCheck(h.Done()))
	p.watchConsumers(log, events.StreamToolCalls)
	return nil
}

func (p *Process) startEgress(ctx context.Context, cfg *config.Config, opts Options, log *slog.Logger) error {
	b, err := p.bus(natsutil.RoleEgress)
	if err != nil {
		return err
	}
	tp, err := p.tracer(ctx, "egress")
	if err != nil {
		return err
	}
	senders, err := p.imSenders(ctx, b, cfg, log)
	if err != nil {
		return err
	}
	hk, err := p.hookRunner(cfg, opts.Hooks, b.NC, "egress", log) // hooks.go
	if err != nil {
		return err
	}
	h, err := egress.Run(ctx, egress.Options{NC: b.NC, JS: b.JS, Config: cfg, DataDir: cfg.DataDir, Hooks: hk,
		Log: log, HTTPClient: opts.HTTPClient, Senders: senders, // egress names its role itself
		Metrics: metrics.NewEgress(p.Metrics), DeadLetters: metrics.NewDeadLetters(p.Metrics), Tracer: tp})
	if err != nil {
		return err
	}
	p.onStop("egress", h.Stop)
	p.health.check("egress", doneCheck(h.Done()))
	p.watchConsumers(log, events.StreamIMOut)
	return nil
}

// backgroundTools are schedule_followup, tool_search and run_deferred_task (docs/tasks.md).
// tool_search reads the worker catalogue (KV tools) through a catalogue of its own, followed
// until the process stops.
func (p *Process) backgroundTools(ctx context.Context, js jetstream.JetStream, cfg *config.Config) ([]tools.Tool, error) {
	records, err := schedule.OpenTasks(ctx, js)
	if err != nil {
		return nil, err
	}
	cat, err := toolbus.NewCatalog(ctx, js)
	if err != nil {
		return nil, err
	}
	p.spawn("tool_search catalogue", cat.Run)
	timeout := time.Duration(cfg.AI.Agent.TaskTimeoutMs) * time.Millisecond
	return []tools.Tool{
		schedule.FollowUpTool(records), // the turn worker writes the schedule (schedule.ApplyFollowUp)
		tasks.ToolSearchTool(cat, tasks.NewToolSearchCache(100, time.Minute)),
		tasks.RunDeferredTaskTool(js, cat, records, timeout),
	}, nil
}

// imMedia is the media helper of the native adapters: the media object store, and the web
// fetch SSRF policy widened by the platform endpoints (so a OneBot implementation on loopback
// serves its images, while every other URL is still checked).
func (p *Process) imMedia(ctx context.Context, js jetstream.JetStream, cfg *config.Config, endpoints ...string) (*im.Media, error) {
	store, err := js.ObjectStore(ctx, events.ObjectMedia)
	if err != nil {
		return nil, fmt.Errorf("open media store: %w", err)
	}
	wf := cfg.AI.Agent.WebFetch
	return im.NewMedia(store, netguard.Config{AllowPrivate: wf.AllowPrivate, AllowHosts: wf.AllowHosts}, endpoints...)
}

// imSenders are the egress senders of the native IM adapters configured under im.<platform>.
func (p *Process) imSenders(ctx context.Context, bus roleBus, cfg *config.Config, log *slog.Logger) (map[string]egress.Sender, error) {
	out := map[string]egress.Sender{}
	ims := cfg.IM
	if len(ims.OneBot.Bots)+len(ims.Telegram.Bots)+len(ims.Discord.Bots)+len(ims.Slack.Bots)+len(ims.Matrix.Bots) == 0 {
		return out, nil
	}
	media, err := p.imMedia(ctx, bus.JS, cfg)
	if err != nil {
		return nil, err
	}
	ledger, err := im.NewLedger(ctx, bus.JS)
	if err != nil {
		return nil, err
	}
	elog := log.With("role", events.RoleEgress)
	add := func(platform string, s egress.Sender, err error) error {
		if err == nil {
			out[platform] = s
		}
		return err
	}
	if bots := ims.OneBot.Bots; len(bots) > 0 {
		s, err := onebot.NewSender(bots, bus.NC, nil, media, ledger)
		if err := add(onebot.Platform, s, err); err != nil {
			return nil, err
		}
	}
	// Streaming previews and typing: one egress replica per bot runs each platform's previewer.
	if bots := ims.Telegram.Bots; len(bots) > 0 {
		s, err := telegram.NewSender(bots, nil, media, ledger, bus.NC)
		if err := add(telegram.Platform, s, err); err != nil {
			return nil, err
		}
		spawnPreviewers(p, bots, func(ctx context.Context, b config.TelegramBot, owner string) error {
			return telegram.RunPreviewer(ctx, telegram.PreviewerOptions{Bot: b, NC: bus.NC, JS: bus.JS, Owner: owner, Log: elog})
		})
	}
	if bots := ims.Discord.Bots; len(bots) > 0 {
		s, err := discord.NewSender(bots, nil, media, ledger, bus.NC)
		if err := add(discord.Platform, s, err); err != nil {
			return nil, err
		}
		spawnPreviewers(p, bots, func(ctx context.Context, b config.DiscordBot, owner string) error {
			return discord.RunPreviewer(ctx, discord.PreviewerOptions{Bot: b, NC: bus.NC, JS: bus.JS, Owner: owner, Log: elog})
		})
	}
	if bots := ims.Slack.Bots; len(bots) > 0 {
		s, err := imslack.NewSender(bots, nil, media, ledger, bus.NC)
		if err := add(imslack.Platform, s, err); err != nil {
			return nil, err
		}
		spawnPreviewers(p, bots, func(ctx context.Context, b config.SlackBot, owner string) error {
			return imslack.RunPreviewer(ctx, imslack.PreviewerOptions{Bot: b, NC: bus.NC, JS: bus.JS, Owner: owner, Log: elog})
		})
	}
	if bots := ims.Matrix.Bots; len(bots) > 0 {
		s, err := matrix.NewSender(bots, nil, media, ledger, bus.NC)
		if err := add(matrix.Platform, s, err); err != nil {
			return nil, err
		}
		spawnPreviewers(p, bots, func(ctx context.Context, b config.MatrixBot, owner string) error {
			return matrix.RunPreviewer(ctx, matrix.PreviewerOptions{Bot: b, NC: bus.NC, JS: bus.JS, Owner: owner, Log: elog})
		})
	}
	return out, nil
}

// spawnPreviewers runs one platform's previewer for each of its bots, under one owner name per
// egress process (the previewer lease says which replica shows a bot's previews).
func spawnPreviewers[B any](p *Process, bots []B, run func(ctx context.Context, b B, owner string) error) {
	owner := "egress-" + nuid.Next()
	for _, b := range bots {
		p.spawn("im adapter", func(ctx context.Context) { _ = run(ctx, b, owner) })
	}
}

// startIMInbound starts the inbound halves of the native IM adapters: connections that must be
// single run under a KV lease (pkg/im.Hold); HTTP-reached bots get their routes on mux. It
// reports whether mux got any routes.
func (p *Process) startIMInbound(ctx context.Context, bus roleBus, cfg *config.Config, in *ingest.Ingestor, mux *http.ServeMux, log *slog.Logger) (bool, error) {
	sink := im.SinkFunc(func(ctx context.Context, m *events.IMMessage) error {
		_, err := in.Ingest(ctx, m)
		return err
	})
	owner := "ingest-" + nuid.Next()
	p.health.setID(events.RoleIngest, owner)
	conns := p.health.connStates()
	// track reports an adapter's inbound connection for /readyz and presence; webhook-reached
	// bots have no connection to hold.
	track := func(ctx context.Context, platform, bot string, webhook bool) context.Context {
		t := conns.Track(platform, bot, "inbound")
		if webhook {
			t.Set(im.ConnWebhook, nil)
		}
		return im.WithConnTracker(ctx, t)
	}
	routes := false
	if bots := cfg.IM.OneBot.Bots; len(bots) > 0 {
		ledger, err := im.NewLedger(ctx, bus.JS)
		if err != nil {
			return false, err
		}
		byID := map[string]*onebot.Inbound{}
		for _, b := range bots {
			media, err := p.imMedia(ctx, bus.JS, cfg, b.APIBase)
			if err != nil {
				return false, err
			}
			ib, err := onebot.NewInbound(onebot.InboundOptions{Bot: b, Sink: sink, Media: media, NC: bus.NC, JS: bus.JS,
				Owner: owner, Log: log, Ledger: ledger})
			if err != nil {
				return false, err
			}
			byID[b.ID] = ib
			if onebot.NeedsHTTP(b) {
				routes = true
			}
			p.spawn("im adapter", func(ctx context.Context) { _ = ib.Run(track(ctx, onebot.Platform, b.ID, onebot.NeedsHTTP(b))) })
		}
		if routes {
			onebot.Routes(mux, byID)
		}
	}
	if bots := cfg.IM.Telegram.Bots; len(bots) > 0 {
		media, err := p.imMedia(ctx, bus.JS, cfg)
		if err != nil {
			return false, err
		}
		byID := map[string]*telegram.Inbound{}
		hooks := false
		for _, b := range bots {
			if b.APIBase != "" {
				// The file API lives on the configured Bot API server; allow it like a
				// OneBot endpoint (a self-hosted server may be on the same host).
				if media, err = p.imMedia(ctx, bus.JS, cfg, b.APIBase); err != nil {
					return false, err
				}
			}
			ib, err := telegram.NewInbound(telegram.InboundOptions{Bot: b, Sink: sink, Media: media, JS: bus.JS, Owner: owner, Log: log})
			if err != nil {
				return false, err
			}
			byID[b.ID] = ib
			hooks = hooks || telegram.IsWebhook(b)
			p.spawn("im adapter", func(ctx context.Context) { _ = ib.Run(track(ctx, telegram.Platform, b.ID, telegram.IsWebhook(b))) })
		}
		if hooks {
			telegram.Routes(mux, byID)
			routes = true
		}
	}
	for _, b := range cfg.IM.Discord.Bots {
		// Attachments are fetched from their CDN URL; a configured apiBase (a proxy, a
		// test fake) may serve them too, so its host is allowed like a OneBot endpoint.
		media, err := p.imMedia(ctx, bus.JS, cfg, b.APIBase)
		if err != nil {
			return false, err
		}
		ib, err := discord.NewInbound(discord.InboundOptions{Bot: b, Sink: sink, Media: media, JS: bus.JS, Owner: owner, Log: log})
		if err != nil {
			return false, err
		}
		p.spawn("im adapter", func(ctx context.Context) { _ = ib.Run(track(ctx, discord.Platform, b.ID, false)) })
	}
	if bots := cfg.IM.Slack.Bots; len(bots) > 0 {
		byID := map[string]*imslack.Inbound{}
		hooks := false
		for _, b := range bots {
			// url_private files live on Slack's file host; a configured apiBase (a test fake,
			// a proxy) may serve them, so its host is allowed like a OneBot endpoint.
			media, err := p.imMedia(ctx, bus.JS, cfg, b.APIBase)
			if err != nil {
				return false, err
			}
			ib, err := imslack.NewInbound(imslack.InboundOptions{Bot: b, Sink: sink, Media: media, JS: bus.JS, Owner: owner, Log: log})
			if err != nil {
				return false, err
			}
			byID[b.ID] = ib
			hooks = hooks || imslack.IsEvents(b)
			p.spawn("im adapter", func(ctx context.Context) { _ = ib.Run(track(ctx, imslack.Platform, b.ID, imslack.IsEvents(b))) })
		}
		if hooks {
			imslack.Routes(mux, byID)
			routes = true
		}
	}
	for _, b := range cfg.IM.Matrix.Bots {
		// mxc:// media is downloaded from the configured homeserver, which may be on the same
		// host: the adapter reaches exactly that scheme and host:port directly and everything
		// else through this helper's SSRF guard, which therefore allows no extra host.
		media, err := p.imMedia(ctx, bus.JS, cfg)
		if err != nil {
			return false, err
		}
		ib, err := matrix.NewInbound(matrix.InboundOptions{Bot: b, Sink: sink, Media: media, JS: bus.JS, Owner: owner, Log: log})
		if err != nil {
			return false, err
		}
		p.spawn("im adapter", func(ctx context.Context) { _ = ib.Run(track(ctx, matrix.Platform, b.ID, false)) })
	}
	return routes, nil
}

// imBotRoles adds the native adapters' bots' masters and trusted lists to bots.
func imBotRoles(cfg *config.Config, bots map[string]ingest.BotRoles) {
	for _, b := range cfg.IM.OneBot.Bots {
		bots[onebot.Platform+"/"+b.ID] = ingest.BotRoles{Masters: b.Masters, Trusted: b.Trusted}
	}
	for _, b := range cfg.IM.Telegram.Bots {
		bots[telegram.Platform+"/"+b.ID] = ingest.BotRoles{Masters: b.Masters, Trusted: b.Trusted}
	}
	for _, b := range cfg.IM.Discord.Bots {
		bots[discord.Platform+"/"+b.ID] = ingest.BotRoles{Masters: b.Masters, Trusted: b.Trusted}
	}
	for _, b := range cfg.IM.Slack.Bots {
		bots[imslack.Platform+"/"+b.ID] = ingest.BotRoles{Masters: b.Masters, Trusted: b.Trusted}
	}
	for _, b := range cfg.IM.Matrix.Bots {
		bots[matrix.Platform+"/"+b.ID] = ingest.BotRoles{Masters: b.Masters, Trusted: b.Trusted}
	}
}

// privatePaths are what the file tools and the bash sandbox must never show: the JetStream
// store, the data directory (bus credentials, transcripts, memory files are the turn worker's)
// and the configuration file.
func privatePaths(cfg *config.Config) []string {
	var out []string
	for _, p := range []string{cfg.NATS.StoreDir, cfg.DataDir, cfg.Path} {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}
