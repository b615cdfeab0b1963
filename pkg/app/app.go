// Package app composes agentbus's roles into processes: `agentbus up` runs all four roles on
// one embedded NATS server; cmd/ingest, cmd/turn-worker, cmd/tool-worker and cmd/egress run
// one role each against a NATS URL.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/buildinfo"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/costs"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/hooks"
	"github.com/agentbus/agentbus/pkg/ingest"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/memory"
	"github.com/agentbus/agentbus/pkg/metrics"
	"github.com/agentbus/agentbus/pkg/models"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/netguard"
	"github.com/agentbus/agentbus/pkg/skills"
	"github.com/agentbus/agentbus/pkg/tools"
	"github.com/agentbus/agentbus/pkg/toolworker"
	"github.com/agentbus/agentbus/pkg/tracing"
	"github.com/agentbus/agentbus/pkg/turn"
)

// Roles selects what a process runs.
type Roles struct {
	Ingest, TurnWorker, ToolWorker, Egress bool
}

// AllRoles runs everything (agentbus up).
var AllRoles = Roles{true, true, true, true}

// FromConfig applies roles: from the file over defaults.
func (r Roles) FromConfig(c config.Roles) Roles {
	return Roles{
		Ingest:     config.Bool(c.Ingest, r.Ingest),
		TurnWorker: config.Bool(c.TurnWorker, r.TurnWorker),
		ToolWorker: config.Bool(c.ToolWorker, r.ToolWorker),
		Egress:     config.Bool(c.Egress, r.Egress),
	}
}

// Options adjust Run.
type Options struct {
	Roles Roles
	// Out receives the human-readable start banner (default os.Stdout).
	Out io.Writer
	Log *slog.Logger
	// Ready, when set, is called with the running process once every role has started.
	Ready func(*Process)
	// NoProbe skips looking for a local Ollama / API keys when no provider is configured.
	NoProbe bool
	// HTTPClient is used for webhook callbacks (tests).
	HTTPClient *http.Client
	// ExtraTools are served by the tool worker next to the configured tool set (benchmarks and
	// tests add a trivial tool this way; see pkg/bench).
	ExtraTools []tools.Tool
	// Hooks holds this process's in-process hooks (docs/hooks.md); nil means hooks.Default(),
	// which hooks.Register fills.
	Hooks *hooks.Registry
}

// Process is a running agentbus process.
type Process struct {
	Config     *config.Config
	NC         *nats.Conn
	JS         jetstream.JetStream
	Embedded   *natsutil.Embedded // nil when connected to an external server
	WebhookURL string             // http://host:port, when ingest runs
	HealthURL  string             // http://host:port/healthz, when health.listen is set
	Turn       *turn.Worker
	Models     *llm.Registry
	Demo       bool           // the built-in demo model is in use
	Costs      *costs.Tracker // model usage and cost, when the turn worker runs here
	// Metrics holds the process's Prometheus families; every role registers its own. Served
	// on metrics.listen (MetricsURL) when set.
	Metrics    *metrics.Registry
	MetricsURL string // http://host:port/metrics, when metrics.listen is set
	turnOpts   turn.Options
	movedFrom  string // the default NATS address that was taken, when the server moved off it
	health     health
	stops      []stopStep
	skills     *skills.Store
	buses      map[string]roleBus // each role's own connection (bus)

	stopOnce sync.Once
	initOnce sync.Once
	stopErr  error
	done     chan struct{} // closed when Stop has finished
}

// stopStep stops one part of the process.
type stopStep struct {
	name string
	stop func(ctx context.Context) error
}

// Stop stops the roles in reverse start order and then the bus, each part waiting for its own
// goroutines, all within ctx. It returns every part's error joined (a part that did not finish
// in time reports ctx's error; the others are still stopped). Safe to call more than once and
// concurrently; later calls wait for the first and return its result.
func (p *Process) Stop(ctx context.Context) error {
	p.stopOnce.Do(func() {
		var errs []error
		for i := len(p.stops) - 1; i >= 0; i-- {
			st := p.stops[i]
			if err := st.stop(ctx); err != nil {
				errs = append(errs, fmt.Errorf("stop %s: %w", st.name, err))
			}
		}
		p.stops = nil
		p.stopErr = errors.Join(errs...)
		close(p.doneCh())
	})
	select {
	case <-p.doneCh():
		return p.stopErr
	case <-ctx.Done():
		return fmt.Errorf("app: stop: %w", ctx.Err())
	}
}

// Done is closed once Stop has stopped every part.
func (p *Process) Done() <-chan struct{} { return p.doneCh() }

func (p *Process) doneCh() chan struct{} {
	p.initOnce.Do(func() { p.done = make(chan struct{}) })
	return p.done
}

// onStop registers how to stop a part; Stop runs the steps in reverse order.
func (p *Process) onStop(name string, f func(ctx context.Context) error) {
	p.stops = append(p.stops, stopStep{name: name, stop: f})
}

// onStopFunc registers a step that cannot fail or wait.
func (p *Process) onStopFunc(name string, f func()) {
	p.onStop(name, func(context.Context) error { f(); return nil })
}

// spawn runs f on a goroutine the process owns: f's context ends when Stop reaches this step
// (in reverse start order, like every other part), and Stop waits for f to return.
func (p *Process) spawn(name string, f func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(ctx)
	}()
	p.onStop(name, func(sctx context.Context) error {
		cancel()
		select {
		case <-done:
			return nil
		case <-sctx.Done():
			return sctx.Err()
		}
	})
}

// startDiscovery fills the model registry from the providers' model lists (cached in KV
// models), in the background; providers with an explicit models: list are not asked.
func (p *Process) startDiscovery(ctx context.Context, js jetstream.JetStream, cfg *config.Config, reg *llm.Registry, log *slog.Logger) *models.Manager {
	opts := models.ManagerOptions{Log: log.With("role", "models"), Interval: time.Hour, FreshFor: 10 * time.Minute}
	if kvc, err := models.OpenKVCache(ctx, js); err == nil {
		opts.Cache = kvc
	}
	mgr := models.NewManager(reg, cfg.AI.Providers, opts)
	mgr.Start(ctx)
	p.onStop("model discovery", mgr.Stop)
	return mgr
}

// maxImageBytes caps an image fetched for a vision model.
const maxImageBytes = 8 << 20

// skillStore loads skills/ (workspace and working directory) once per process and keeps it
// hot-reloaded; the turn worker selects with it, the tool worker activates from it.
func (p *Process) skillStore(cfg *config.Config, log *slog.Logger) *skills.Store {
	if p.skills != nil {
		return p.skills
	}
	a := cfg.AI.Agent
	p.skills = skills.NewStore(log, filepath.Join(a.Workspace, a.SkillsDir), a.SkillsDir)
	if err := p.skills.Load(); err != nil {
		log.Warn("skills not loaded", "err", err)
	}
	p.spawn("skills watcher", func(ctx context.Context) { p.skills.Watch(ctx, 0) })
	return p.skills
}

// Run starts the configured roles and blocks until ctx ends, then stops them.
func Run(ctx context.Context, cfg *config.Config, opts Options) error {
	p, err := Start(ctx, cfg, opts)
	if err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	return p.Stop(sctx)
}

// stopTimeout bounds Run's stop: long enough for in-flight tool calls and deliveries to finish
// (egress waits up to its SendTimeout + 5 s), short enough for a supervisor's kill timeout.
const stopTimeout = 30 * time.Second

// Start starts the configured roles and returns once they run. On failure it stops what it
// had started (the bus connection, the embedded server, the data-directory lock) and returns
// an error that says what to fix; the Process is then nil.
func Start(ctx context.Context, cfg *config.Config, opts Options) (*Process, error) {
	if opts.Out == nil {
		opts.Out = os.Stdout
	}
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	p := &Process{Config: cfg, Metrics: metrics.New()}
	if err := p.start(ctx, cfg, opts, log); err != nil {
		sctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		_ = p.Stop(sctx)
		return nil, err
	}
	p.banner(opts.Out, opts.Roles)
	if opts.Ready != nil {
		opts.Ready(p)
	}
	return p, nil
}

func (p *Process) start(ctx context.Context, cfg *config.Config, opts Options, log *slog.Logger) error {
	if err := p.prepareDataDir(cfg, opts.Roles); err != nil {
		return err
	}
	if err := p.connect(ctx, cfg, log); err != nil {
		return err
	}
	r := opts.Roles
	if r.TurnWorker {
		if err := p.startTurnWorker(ctx, cfg, opts, log); err != nil {
			return fmt.Errorf("turn-worker: %w", err)
		}
		p.health.add("turn-worker")
	}
	if r.ToolWorker {
		if err := p.startToolWorker(ctx, cfg, opts, log); err != nil {
			return fmt.Errorf("tool-worker: %w", err)
		}
		p.health.add("tool-worker")
	}
	if r.Egress {
		if err := p.startEgress(ctx, cfg, opts, log); err != nil {
			return fmt.Errorf("egress: %w", err)
		}
		p.health.add("egress")
	}
	if r.Ingest {
		if err := p.startIngest(ctx, cfg, log); err != nil {
			return fmt.Errorf("ingest: %w", err)
		}
		p.health.add("ingest")
	}
	p.announceRoles(ctx, r, log)
	if err := p.startHealth(cfg, log); err != nil {
		return err
	}
	return p.startMetrics(cfg, log)
}

// drain drains nc and waits until the client reports it closed (or ctx ends, then it closes
// it), so that the embedded server, stopped next, does not pull subscriptions out from under a
// drain still in progress.
func drain(ctx context.Context, nc *nats.Conn) error {
	closed := make(chan struct{})
	var once sync.Once
	prev := nc.Opts.ClosedCB
	nc.SetClosedHandler(func(c *nats.Conn) {
		if prev != nil {
			prev(c)
		}
		once.Do(func() { close(closed) })
	})
	if nc.IsClosed() {
		return nil
	}
	if err := nc.Drain(); err != nil {
		nc.Close()
		return nil // already closing or closed: nothing left to drain
	}
	select {
	case <-closed:
		return nil
	case <-ctx.Done():
		nc.Close()
		return fmt.Errorf("drain: %w", ctx.Err())
	}
}

// connect starts the embedded server (nats.embedded) or dials nats.url, then provisions.
func (p *Process) connect(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	if cfg.NATS.Embedded {
		if err := os.MkdirAll(cfg.NATS.StoreDir, 0o755); err != nil {
			return fmt.Errorf("create the NATS store directory (nats.storeDir %s): %w", cfg.NATS.StoreDir, err)
		}
		listen := cfg.NATS.Listen
		if listen == "" {
			listen = DefaultNATSListen
		}
		// The server reports a port in use only as "not ready" after its ready timeout, so the
		// port is tried here first, to say at once what is wrong.
		if err := portFree(listen); err != nil {
			if cfg.NATS.Listen != "" {
				return fmt.Errorf("nats.listen %s cannot be used (%v): stop what listens there (another agentbus or NATS server?), or set nats.listen to a free port (\"127.0.0.1:0\" picks one)", cfg.NATS.Listen, err)
			}
			// The default port is taken (another agentbus?): take a free one and say so.
			p.movedFrom = listen
			listen = "127.0.0.1:0"
		}
		eo := natsutil.EmbeddedOptions{StoreDir: cfg.NATS.StoreDir, Listen: listen,
			Token: cfg.NATS.Token, User: cfg.NATS.User, Password: cfg.NATS.Password}
		var creds *natsutil.Credentials
		// Each role runs as its own user with its deployment permissions (BusRoles); the
		// configured or generated user is the admin (provisioning, agentbus chat/sessions).
		eo.RoleUsers = eo.Token == ""
		if eo.Token == "" && eo.User == "" {
			// No client connects unauthenticated: without configured credentials, generated
			// ones are kept in the data directory (0600) for `agentbus chat/sessions/replay`.
			c, err := natsutil.LoadOrCreateCredentials(cfg.DataDir)
			if err != nil {
				return fmt.Errorf("embedded NATS credentials: %w", err)
			}
			creds, eo.User, eo.Password = &c, c.User, c.Password
		}
		emb, err := natsutil.StartEmbedded(eo)
		if err != nil {
			return fmt.Errorf("start the embedded NATS server on %s (store %s): %w", listen, cfg.NATS.StoreDir, err)
		}
		p.Embedded = emb
		p.onStop("embedded NATS", func(context.Context) error { return emb.Close() })
		if p.movedFrom != "" {
			log.Warn("NATS port taken; the embedded server listens elsewhere", "taken", p.movedFrom, "url", emb.ClientURL(),
				"recorded_in", filepath.Join(cfg.DataDir, URLFile))
		}
		if err := p.writeURLFile(emb.ClientURL()); err != nil {
			return err
		}
		if creds != nil {
			creds.URL = emb.ClientURL()
			if err := natsutil.WriteCredentials(filepath.Join(cfg.DataDir, natsutil.CredentialsFile), *creds); err != nil {
				return err
			}
		}
		nc, err := emb.Connect()
		if err != nil {
			return err
		}
		p.NC = nc
	} else {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		nc, err := natsutil.Connect(cctx, cfg.NATS)
		cancel()
		if err != nil {
			return fmt.Errorf("%w (is the NATS server running and reachable? check nats.url, --nats or AGENTBUS_NATS_URL)", err)
		}
		p.NC = nc
	}
	nc := p.NC
	p.onStop("bus connection", func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return drain(ctx, nc)
	})
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	js = natsutil.FastPublish(js, 0) // the roles' publishes read their acks without encoding/json
	p.JS = js
	if r := cfg.NATS.Region; r.Standby {
		return p.standby(ctx, js, cfg, log)
	}
	if err := p.provision(ctx, js, cfg); err != nil {
		return err
	}
	if cfg.NATS.Region.Enabled() {
		return p.regionCheckpoints(ctx, js, cfg, log)
	}
	return nil
}

// provision provisions (or waits for) the streams as nats.provision says.
func (p *Process) provision(ctx context.Context, js jetstream.JetStream, cfg *config.Config) error {
	if cfg.NATS.Provision == "wait" {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		return natsutil.WaitProvisioned(wctx, js, natsutil.SpecFromConfig(cfg.NATS))
	}
	// Generous: on a fresh cluster that many processes provision at once, every create waits
	// for the meta leader; Provision retries each request on its own timeout.
	pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := natsutil.Provision(pctx, js, natsutil.SpecFromConfig(cfg.NATS)); err != nil {
		return fmt.Errorf("provision streams (is JetStream enabled on the NATS server?): %w", err)
	}
	if cfg.NATS.Region.Enabled() {
		if err := natsutil.ProvisionRegion(pctx, js, natsutil.SpecFromConfig(cfg.NATS)); err != nil {
			return err
		}
	}
	return nil
}

// standby is a standby region's start (nats.region.standby, docs/regions.md): it creates the
// mirrors of the live region's streams that do not exist yet (never a live stream, never an
// update), then waits, however long it takes, until `agentbus region promote` has made them
// live; only then do the roles start. After promotion the process changes no stream (the
// promotion provisioned them) and records consumer checkpoints as a live region does.
func (p *Process) standby(ctx context.Context, js jetstream.JetStream, cfg *config.Config, log *slog.Logger) error {
	r := cfg.NATS.Region
	spec := natsutil.SpecFromConfig(cfg.NATS)
	if cfg.NATS.Provision != "wait" {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := natsutil.ProvisionStandby(pctx, js, spec, r.Source)
		cancel()
		if errors.Is(err, natsutil.ErrLiveStream) {
			log.Warn("standby region: the streams are live already (promoted); starting as a live region", "region", r.Name)
		} else if err != nil {
			return fmt.Errorf("standby region %s: mirror the live region (domain %s): %w", r.Name, r.Source, err)
		}
	}
	log.Info("standby region: waiting for promotion (agentbus region promote)", "region", r.Name, "source", r.Source)
	if err := natsutil.WaitPromoted(ctx, js, spec, 250*time.Millisecond); err != nil {
		return err
	}
	log.Info("standby region promoted: roles start", "region", r.Name)
	return p.regionCheckpoints(ctx, js, cfg, log)
}

// regionCheckpoints records, every nats.region.checkpointMs, the ack floors of the durable
// consumers in KV region, for a standby that may be promoted (natsutil.Checkpointer).
func (p *Process) regionCheckpoints(ctx context.Context, js jetstream.JetStream, cfg *config.Config, log *slog.Logger) error {
	cp, err := natsutil.NewCheckpointer(ctx, js, natsutil.SpecFromConfig(cfg.NATS))
	if err != nil {
		return err
	}
	every := time.Duration(cfg.NATS.Region.CheckpointMs) * time.Millisecond
	if every <= 0 {
		every = 2 * time.Second
	}
	p.spawn("region checkpoints", func(ctx context.Context) {
		cp.Run(ctx, every, log.With("component", "region"))
	})
	return nil
}

// roleBus is one role's connection to the bus.
type roleBus struct {
	NC *nats.Conn
	JS jetstream.JetStream
}

// bus returns role's connection. On an embedded server with role users (`agentbus up`) it is
// the role's own user, connected on first use and drained when the process stops (after the
// role, which registers its stop later); otherwise it is the process's connection, whose
// configured user every role of the process shares (a deployment runs one role per process,
// each with its own user).
func (p *Process) bus(role string) (roleBus, error) {
	if p.Embedded == nil || !p.Embedded.HasRoleUsers() {
		return roleBus{p.NC, p.JS}, nil
	}
	if b, ok := p.buses[role]; ok {
		return b, nil
	}
	nc, err := p.Embedded.ConnectRole(role)
	if err != nil {
		return roleBus{}, err
	}
	p.onStop("bus connection of "+role, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return drain(ctx, nc)
	})
	js, err := jetstream.New(nc)
	if err != nil {
		return roleBus{}, err
	}
	b := roleBus{nc, natsutil.FastPublish(js, 0)}
	if p.buses == nil {
		p.buses = map[string]roleBus{}
	}
	p.buses[role] = b
	return b, nil
}

// DefaultNATSListen is where the embedded server listens unless nats.listen says otherwise;
// when it is taken the server picks a free port and records it in the data directory.
const DefaultNATSListen = "127.0.0.1:4222"

func (p *Process) startTurnWorker(ctx context.Context, cfg *config.Config, opts Options, log *slog.Logger) error {
	if err := cfg.MissingAPIKeyError(); err != nil {
		return err
	}
	b, err := p.bus(natsutil.RoleTurnWorker)
	if err != nil {
		return err
	}
	demo, err := ApplyDefaultModel(ctx, cfg, !opts.NoProbe, log)
	if err != nil {
		return err
	}
	p.Demo = demo
	reg, err := models.NewRegistry(cfg.AI.Providers)
	if err != nil {
		return err
	}
	if err := RegisterProviders(cfg); err != nil {
		return err
	}
	p.Models = reg
	busProviders, err := newBusProviders(cfg, b.NC)
	if err != nil {
		return err
	}
	mgr := p.startDiscovery(ctx, b.JS, cfg, reg, log)
	p.Costs = costs.New()
	// Every model call (each attempt of a fallback chain) is a "chat <model>" span of the turn.
	fb := models.NewFallback(models.FallbackOptions{Registry: reg, Stream: models.StreamFunc(tracing.WrapStream(tracing.StreamFunc(p.Costs.Wrap(costs.StreamFunc(metrics.NewLLM(p.Metrics).Wrap(modelLogContext(busStream(busProviders, llm.Stream)))))))), Log: log.With("role", "turn-worker")})
	guard, err := netguard.New(netguard.Config{AllowPrivate: cfg.AI.Agent.WebFetch.AllowPrivate, AllowHosts: cfg.AI.Agent.WebFetch.AllowHosts})
	if err != nil {
		return err
	}
	profiles, err := toolworker.NewProfileCache(ctx, b.JS, log.With("role", "turn-worker"))
	if err != nil {
		return err
	}
	p.spawn("profile cache", profiles.Run)
	mem := memory.New(cfg.DataDir, memory.Limits{})
	o := turnOptions(cfg.AI, reg) // options.go
	o.Log = log.With("role", "turn-worker")
	o.Metrics, o.DeadLetters = metrics.NewTurn(p.Metrics), metrics.NewDeadLetters(p.Metrics)
	o.StreamFn, o.Health, o.Secrets = fb.Stream, p.Costs, cfg.Secrets()
	o.ModelsReport = func() string { return models.Report(cfg.AI, reg, nil, mgr.Status()) }
	o.Prompt, o.Skills, o.Memory = &promptSources{profiles: profiles, dataDir: cfg.DataDir, memory: mem}, p.skillStore(cfg, log), mem
	o.Endpoints = webhookEndpoints(cfg)
	o.FetchImage = func(ctx context.Context, url string) ([]byte, string, error) {
		res, err := guard.Fetch(ctx, url, netguard.FetchOptions{MaxBytes: maxImageBytes, Timeout: 20 * time.Second})
		if err != nil {
			return nil, "", err
		}
		if res.Status < 200 || res.Status > 299 {
			return nil, "", fmt.Errorf("HTTP %d", res.Status)
		}
		if res.Truncated {
			return nil, "", fmt.Errorf("image over %d bytes", maxImageBytes)
		}
		return res.Body, res.ContentType, nil
	}
	if o.Tasks, err = taskOptions(cfg.AI); err != nil {
		return err
	}
	p.turnOpts = o
	if p.turnOpts.Tracer, err = p.tracer(ctx, "turn-worker"); err != nil {
		return err
	}
	if p.turnOpts.Hooks, err = p.hookRunner(cfg, opts.Hooks, b.NC, "turn-worker", log); err != nil { // hooks.go
		return err
	}
	w, err := p.AddTurnWorker(ctx, "")
	if err != nil {
		return err
	}
	p.Turn = w
	p.watchConsumers(log, events.StreamSessionIn)
	return nil
}

// AddTurnWorker starts one more turn-worker replica in this process, configured like the
// process's own (same models, prompt sources, connection), under id (a random one when empty).
// It stops with the process. Benchmarks and tests use it to run several replicas side by side,
// e.g. to kill one and watch another take its sessions over. It needs the turn-worker role.
func (p *Process) AddTurnWorker(ctx context.Context, id string) (*turn.Worker, error) {
	if p.turnOpts.Models == nil {
		return nil, errors.New("app: AddTurnWorker: this process does not run the turn-worker role")
	}
	b, err := p.bus(natsutil.RoleTurnWorker)
	if err != nil {
		return nil, err
	}
	o := p.turnOpts
	o.ID, o.NC, o.JS = id, b.NC, b.JS
	w, err := turn.Run(ctx, o)
	if err != nil {
		return nil, err
	}
	p.onStop("turn worker "+w.ID(), w.Stop)
	p.announce(ctx, events.RoleTurnWorker, w.ID(), o.Log)
	return w, nil
}

func (p *Process) startIngest(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	b, err := p.bus(natsutil.RoleIngest)
	if err != nil {
		return err
	}
	b.JS = deadLetterCounter{b.JS, metrics.NewDeadLetters(p.Metrics)}
	bots := map[string]ingest.BotRoles{}
	imBotRoles(cfg, bots)
	in := ingest.New(b.JS, ingestOptions(cfg.AI, bots, log.With("role", "ingest")))
	in.WithMetrics(metrics.NewIngest(p.Metrics))
	tp, err := p.tracer(ctx, "ingest")
	if err != nil {
		return err
	}
	in.SetTracer(tp)
	if media, err := b.JS.ObjectStore(ctx, events.ObjectMedia); err == nil {
		in.WithMedia(media) // inline uploads go to the media store, events carry references
	}
	mux := http.NewServeMux()
	imRoutes, err := p.startIMInbound(ctx, b, cfg, in, mux, log.With("role", "ingest"))
	if err != nil {
		return err
	}
	if len(cfg.IM.Webhook.Bots) == 0 && !imRoutes {
		return nil
	}
	wh := webhookOptions(cfg.IM.Webhook) // options.go
	if err := ingest.CheckReplayWindow(ctx, b.JS, wh.Tolerance); err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	ingest.NewWebhookHandler(in, wh, log.With("role", "ingest")).Routes(mux)
	mux.HandleFunc("GET /healthz", p.serveHealthz)
	mux.HandleFunc("GET /readyz", p.serveReadyz)
	if sameAddr(cfg.Metrics.Listen, cfg.IM.Webhook.Listen) {
		mux.Handle("GET /metrics", p.Metrics.Handler())
	}
	ln, err := net.Listen("tcp", cfg.IM.Webhook.Listen)
	if err != nil {
		return fmt.Errorf("im.webhook.listen %s cannot be used (%w): stop what listens there (another agentbus?), or set im.webhook.listen to a free address", cfg.IM.Webhook.Listen, err)
	}
	p.serveHTTP("webhook server", mux, ln, 5*time.Second, log)
	p.WebhookURL = "http://" + ln.Addr().String()
	return nil
}

// serveHTTP serves h on ln on a goroutine the process owns; Stop lets requests in flight
// finish (up to limit, see webhookServer.stop) and waits for the server to return.
func (p *Process) serveHTTP(name string, h http.Handler, ln net.Listener, limit time.Duration, log *slog.Logger) {
	ws := newWebhookServer(h)
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := ws.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(name, "err", err)
		}
	}()
	p.onStop(name, func(ctx context.Context) error {
		ws.stop(limit)
		select {
		case <-served:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
}

func (p *Process) banner(out io.Writer, r Roles) {
	fmt.Fprintln(out, "agentbus is running.")
	fmt.Fprintf(out, "  Version:          %s\n", buildinfo.Get())
	if p.Embedded != nil {
		fmt.Fprintf(out, "  NATS (embedded):  %s   data: %s\n", p.Embedded.ClientURL(), filepath.Clean(p.Config.NATS.StoreDir))
		if p.movedFrom != "" {
			fmt.Fprintf(out, "                    (%s was taken, so the server chose this port; it is recorded in %s)\n",
				p.movedFrom, filepath.Join(filepath.Clean(p.Config.DataDir), URLFile))
		}
	}
	if p.Demo {
		fmt.Fprintln(out, "  Model:            built-in DEMO model (no provider configured, no local Ollama, no API key found).")
		fmt.Fprintln(out, "                    It echoes and can call tools by name; configure ai.providers for a real model.")
	} else if p.Models != nil {
		for _, a := range p.Models.Aliases() {
			pc, _ := p.Models.Settings(a)
			fmt.Fprintf(out, "  Provider:         %s (%s)\n", a, pc.API)
		}
	}
	if p.MetricsURL != "" {
		fmt.Fprintf(out, "  Metrics:          GET %s\n", p.MetricsURL)
	}
	if r.Ingest {
		url := ""
		if p.Embedded != nil && filepath.Clean(p.Config.DataDir) != filepath.Clean(config.DefaultDataDir) {
			url = " --data " + filepath.Clean(p.Config.DataDir) // chat finds the server through the data directory
		} else if p.Embedded == nil {
			url = " --nats URL"
		}
		fmt.Fprintf(out, "  Chat:             agentbus chat%s   (or: go run ./cmd/agentbus chat%s)\n", url, url)
		if p.WebhookURL != "" {
			fmt.Fprintf(out, "  Webhook:          POST %s/webhook/{bot}  (signed with the bot's secret)\n", p.WebhookURL)
		}
	}
	fmt.Fprintln(out, "Stop with Ctrl-C.")
}

// webhookEndpoints names the webhook bots ("webhook/<id>") for /endpoints: they hold no
// connection, so KV presence does not list them.
func webhookEndpoints(cfg *config.Config) []string {
	var out []string
	for _, b := range cfg.IM.Webhook.Bots {
		out = append(out, "webhook/"+b.ID)
	}
	return out
}
