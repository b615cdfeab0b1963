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
	o := toolWorkerOptions(cfg.AI) // options.go
	o.NC, o.JS, o.Registry, o.Log, o.Hooks, o.Tracer = b.NC, b.JS, reg, log.With("role", "tool-worker"), hk, tp
	o.Metrics, o.DeadLetters = metrics.NewTools(p.Metrics), metrics.NewDeadLetters(p.Metrics)
	h, err := toolworker.Run(ctx, o)
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
	senders, err := p.imSenders(ctx, b, cfg, opts, log)
	if err != nil {
		return err
	}
	hk, err := p.hookRunner(cfg, opts.Hooks, b.NC, "egress", log) // hooks.go
	if err != nil {
		return err
	}
	h, err := egress.Run(ctx, withEgressTuning(cfg.IM.Egress, egress.Options{NC: b.NC, JS: b.JS, DataDir: cfg.DataDir, Hooks: hk,
		Log: log, Senders: senders, // egress names its role itself
		Metrics: metrics.NewEgress(p.Metrics), DeadLetters: metrics.NewDeadLetters(p.Metrics), Tracer: tp}))
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

// imDeps opens, once each and only when a platform asks, what the adapters share: the media
// helper and the send ledger.
type imDeps struct {
	p      *Process
	js     jetstream.JetStream
	cfg    *config.Config
	ledger *im.Ledger
}

func (d *imDeps) media(ctx context.Context, endpoints ...string) (*im.Media, error) {
	return d.p.imMedia(ctx, d.js, d.cfg, endpoints...)
}

func (d *imDeps) openLedger(ctx context.Context) (*im.Ledger, error) {
	if d.ledger == nil {
		l, err := im.NewLedger(ctx, d.js)
		if err != nil {
			return nil, err
		}
		d.ledger = l
	}
	return d.ledger, nil
}

// imSenders are the egress senders of every registered platform with bots configured (webhook
// and console always), and their previewers: streaming previews and typing, one egress replica
// per bot, under one owner name per egress process (the previewer lease says which replica
// shows a bot's previews).
func (p *Process) imSenders(ctx context.Context, bus roleBus, cfg *config.Config, opts Options, log *slog.Logger) (map[string]im.Sender, error) {
	deps := &imDeps{p: p, js: bus.JS, cfg: cfg}
	concurrency := cfg.IM.Egress.Concurrency
	if concurrency <= 0 {
		concurrency = egress.DefaultConcurrency
	}
	sd := im.SenderDeps{NC: bus.NC, JS: bus.JS, Media: deps.media, Ledger: deps.openLedger, HTTPClient: opts.HTTPClient, Concurrency: concurrency}
	pd := im.PreviewDeps{NC: bus.NC, JS: bus.JS, Owner: "egress-" + nuid.Next(), Log: log.With("role", events.RoleEgress)}
	out := map[string]im.Sender{}
	for _, pl := range Platforms.All() {
		if pl.NewSender != nil {
			s, err := pl.NewSender(ctx, cfg, sd)
			if err != nil {
				return nil, fmt.Errorf("%s sender: %w", pl.Name, err)
			}
			if s != nil {
				out[pl.Name] = s
			}
		}
		if pl.NewPreviewers != nil {
			for _, run := range pl.NewPreviewers(cfg, pd) {
				p.spawn("im adapter", run)
			}
		}
	}
	return out, nil
}

// startIMInbound starts the inbound halves of every registered platform: connections that must
// be single run under a KV lease (pkg/im.Hold); HTTP-reached bots get their routes on mux. It
// reports whether mux got any routes.
func (p *Process) startIMInbound(ctx context.Context, bus roleBus, cfg *config.Config, in *ingest.Ingestor, mux *http.ServeMux, log *slog.Logger) (bool, error) {
	owner := "ingest-" + nuid.Next()
	p.health.setID(events.RoleIngest, owner)
	conns := p.health.connStates()
	deps := &imDeps{p: p, js: bus.JS, cfg: cfg}
	d := im.InboundDeps{
		Sink: im.SinkFunc(func(ctx context.Context, m *events.IMMessage) error {
			_, err := in.Ingest(ctx, m)
			return err
		}),
		Ingester: ingester{in},
		NC:       bus.NC, JS: bus.JS, Media: deps.media, Ledger: deps.openLedger,
		Owner: owner, Log: log, Mux: mux,
		// Track reports an adapter's inbound connection for /readyz and presence;
		// webhook-reached bots have no connection to hold.
		Track: func(ctx context.Context, platform, bot string, webhook bool) context.Context {
			t := conns.Track(platform, bot, "inbound")
			if webhook {
				t.Set(im.ConnWebhook, nil)
			}
			return im.WithConnTracker(ctx, t)
		},
	}
	routes := false
	for _, pl := range Platforms.All() {
		if pl.NewInbound == nil {
			continue
		}
		ib, err := pl.NewInbound(ctx, cfg, d)
		if err != nil {
			return false, fmt.Errorf("%s inbound: %w", pl.Name, err)
		}
		routes = routes || ib.HTTP
		for _, run := range ib.Run {
			p.spawn("im adapter", run)
		}
	}
	return routes, nil
}

// ingester gives the console ingest's answer (im.Ingester).
type ingester struct{ in *ingest.Ingestor }

func (g ingester) Accept(ctx context.Context, m *events.IMMessage) (im.Accepted, error) {
	res, err := g.in.Ingest(ctx, m)
	if err != nil {
		return im.Accepted{}, err
	}
	a := im.Accepted{Duplicate: res.Duplicate}
	if len(res.Decision.Routes) > 0 {
		a.Route = res.Decision.Routes[0].String()
	}
	return a, nil
}

// imBotRoles adds every platform's bots' masters and trusted lists to bots.
func imBotRoles(cfg *config.Config, bots map[string]ingest.BotRoles) {
	for _, pl := range Platforms.All() {
		if pl.Bots == nil {
			continue
		}
		for _, b := range pl.Bots(cfg) {
			bots[pl.Name+"/"+b.ID] = ingest.BotRoles{Masters: b.Masters, Trusted: b.Trusted}
		}
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
