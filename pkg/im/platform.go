package im

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
)

// Platform is one IM platform as the composition root (pkg/app) sees it: its name, its bots,
// and constructors for its inbound half (run by ingest), its outbound half (run by egress) and
// its streaming previews (run by egress). Each adapter package declares one Platform value
// next to its code; pkg/app lists them in one registry, so adding a platform touches the
// platform's own folder plus one registration line (and its block of pkg/config).
//
// Every constructor reads its bots from the configuration itself and returns nothing (a nil
// Sender, an empty Inbound, no previewers) when the platform has none configured. A nil
// constructor means the platform has no such half.
type Platform struct {
	// Name is the platform's name in session keys and subjects ("telegram").
	Name string
	// Bots lists the configured bots with their roles (ingest trusts masters and trusted users).
	Bots func(cfg *config.Config) []Bot
	// NewInbound prepares the inbound half: connections to run (under Hold where the platform
	// allows only one), HTTP routes added to d.Mux. ctx bounds the preparation only.
	NewInbound func(ctx context.Context, cfg *config.Config, d InboundDeps) (Inbound, error)
	// NewSender returns the outbound half (nil when no bot is configured). ctx bounds the
	// construction only.
	NewSender func(ctx context.Context, cfg *config.Config, d SenderDeps) (Sender, error)
	// NewPreviewers returns one runner per bot that shows streaming previews and typing from
	// agent.live (each holds a lease, so one egress replica per bot shows them).
	NewPreviewers func(cfg *config.Config, d PreviewDeps) []Runner
}

// Bot is a configured bot and the users it trusts by configuration.
type Bot struct {
	ID      string
	Masters []string
	Trusted []string
}

// Runner runs until ctx ends; the composition root runs each on a goroutine it owns.
type Runner func(ctx context.Context)

// Inbound is a prepared inbound half.
type Inbound struct {
	// Run are the bots' connections (or subscriptions), each run until ctx ends.
	Run []Runner
	// HTTP reports whether routes were added to InboundDeps.Mux (the webhook listener must
	// then serve).
	HTTP bool
}

// Accepted is ingest's answer for one message: whether it was a repeat, and the route it took
// ("session" key or "dropped: reason"), for platforms that tell their caller (the console).
type Accepted struct {
	Duplicate bool
	Route     string
}

// Ingester is Sink with ingest's answer.
type Ingester interface {
	Accept(ctx context.Context, m *events.IMMessage) (Accepted, error)
}

// InboundDeps is what the ingest role gives an inbound half.
type InboundDeps struct {
	Sink     Sink
	Ingester Ingester
	NC       *nats.Conn
	JS       jetstream.JetStream
	// Media returns the media helper with the SSRF policy widened by the given platform
	// endpoints (a loopback OneBot implementation, a configured API base).
	Media func(ctx context.Context, endpoints ...string) (*Media, error)
	// Ledger returns the shared send ledger (opened once).
	Ledger func(ctx context.Context) (*Ledger, error)
	// Owner names this ingest replica in connection leases.
	Owner string
	Log   *slog.Logger
	// Mux takes the platform's HTTP routes (served on im.webhook.listen).
	Mux *http.ServeMux
	// Track reports a bot's inbound connection (for /readyz and presence); webhook marks a
	// bot reached over HTTP, which holds no connection.
	Track func(ctx context.Context, platform, bot string, webhook bool) context.Context
}

// SenderDeps is what the egress role gives an outbound half.
type SenderDeps struct {
	NC *nats.Conn
	JS jetstream.JetStream
	// Media and Ledger as in InboundDeps.
	Media  func(ctx context.Context, endpoints ...string) (*Media, error)
	Ledger func(ctx context.Context) (*Ledger, error)
	// HTTPClient overrides a platform's HTTP client (tests); nil keeps the platform's own.
	HTTPClient *http.Client
	// Concurrency is how many parts egress sends at once (sizes connection pools).
	Concurrency int
}

// Open returns the media helper (no extra endpoints) and the ledger: what every native
// adapter's sender needs.
func (d SenderDeps) Open(ctx context.Context) (*Media, *Ledger, error) {
	media, err := d.Media(ctx)
	if err != nil {
		return nil, nil, err
	}
	ledger, err := d.Ledger(ctx)
	if err != nil {
		return nil, nil, err
	}
	return media, ledger, nil
}

// PreviewDeps is what the egress role gives the previewers.
type PreviewDeps struct {
	NC *nats.Conn
	JS jetstream.JetStream
	// Owner names this egress replica in previewer leases.
	Owner string
	Log   *slog.Logger
}

// Registry is the set of platforms a process knows, in registration order.
type Registry struct {
	list []Platform
}

// NewRegistry returns a registry of ps. It panics on a platform without a name or a name
// registered twice: both are programming errors of the registration list.
func NewRegistry(ps ...Platform) *Registry {
	r := &Registry{}
	for _, p := range ps {
		if p.Name == "" {
			panic("im: platform without a name")
		}
		if _, ok := r.Get(p.Name); ok {
			panic(fmt.Sprintf("im: platform %q registered twice", p.Name))
		}
		r.list = append(r.list, p)
	}
	return r
}

// All returns the platforms in registration order.
func (r *Registry) All() []Platform { return slices.Clone(r.list) }

// Get returns the platform named name.
func (r *Registry) Get(name string) (Platform, bool) {
	for _, p := range r.list {
		if p.Name == name {
			return p, true
		}
	}
	return Platform{}, false
}

// Names returns the platforms' names in registration order.
func (r *Registry) Names() []string {
	out := make([]string, len(r.list))
	for i, p := range r.list {
		out[i] = p.Name
	}
	return out
}

// BotsOf turns a platform's configured bots into Bot values.
func BotsOf[B any](bots []B, get func(B) Bot) []Bot {
	out := make([]Bot, 0, len(bots))
	for _, b := range bots {
		out = append(out, get(b))
	}
	return out
}

// Previewers makes one Runner per bot from a platform's RunPreviewer.
func Previewers[B any](bots []B, run func(ctx context.Context, b B) error) []Runner {
	out := make([]Runner, 0, len(bots))
	for _, b := range bots {
		out = append(out, func(ctx context.Context) { _ = run(ctx, b) })
	}
	return out
}
