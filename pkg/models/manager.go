package models

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/llm"
)

// Model list sources reported by Manager.Status.
const (
	SourceAllowlist  = "allowlist"  // ai.providers.<alias>.models: discovery skipped
	SourceDiscovered = "discovered" // listed by the provider in this process
	SourceCache      = "cache"      // restored from the cache, not (yet) refreshed
	SourceNone       = "none"       // nothing known yet
)

// ManagerOptions tune a Manager. Zero values pick the documented defaults.
type ManagerOptions struct {
	// Cache keeps results across restarts: a FileCache in the data dir for a single process,
	// a KVCache when on the bus. Nil: no cache.
	Cache Cache
	// HTTPClient for discovery requests (default http.DefaultClient).
	HTTPClient *http.Client
	// Timeout bounds one provider's discovery (default 15s).
	Timeout time.Duration
	// Interval re-runs discovery periodically after the first refresh (0 = only at Start).
	Interval time.Duration
	// FreshFor: at Start, a cache entry younger than this is used without asking the provider
	// (0 = always refresh at Start; the cached list still serves until the refresh ends).
	FreshFor time.Duration
	// Tiers ranks discovered models, best first (default DefaultTiers), so GetModel(alias, "")
	// and an agents.<name> binding without a model get the best one.
	Tiers *Tiers
	Log   *slog.Logger
}

// ProviderStatus is what the Manager knows about one provider's model list.
type ProviderStatus struct {
	Alias     string
	API       string
	Source    string
	Models    int
	FetchedAt time.Time
	// Err is the last discovery error ("" when the last attempt worked).
	Err string
}

// Manager fills an llm.Registry with discovered models: it restores cached lists at Start,
// then refreshes every provider without an allowlist in the background. Discovery failures
// are logged and reported by Status, never fatal: the registry keeps the cached (or empty)
// list, and an empty list does not block ai.agents bindings with an explicit model (the
// registry accepts any id without an allowlist).
type Manager struct {
	reg       *llm.Registry
	providers map[string]config.Provider
	opts      ManagerOptions
	log       *slog.Logger

	mu     sync.Mutex
	status map[string]*ProviderStatus

	wg     sync.WaitGroup
	cancel context.CancelFunc
	done   chan struct{} // made by Start, closed when its goroutine ends
}

// NewManager prepares a manager for the providers of ai.providers (the same map the registry
// was built from).
func NewManager(reg *llm.Registry, providers map[string]config.Provider, opts ManagerOptions) *Manager {
	if opts.Timeout <= 0 {
		opts.Timeout = 15 * time.Second
	}
	if opts.Tiers == nil {
		opts.Tiers = DefaultTiers
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	m := &Manager{reg: reg, providers: providers, opts: opts, log: opts.Log, status: map[string]*ProviderStatus{}}
	for _, alias := range slices.Sorted(maps.Keys(providers)) {
		p := providers[alias]
		if p.API == "" { // an image generation driver
			continue
		}
		st := &ProviderStatus{Alias: alias, API: p.API, Source: SourceNone}
		if len(p.Models) > 0 {
			st.Source, st.Models = SourceAllowlist, len(p.Models)
		}
		m.status[alias] = st
	}
	return m
}

// discoverable lists the aliases discovery applies to: no allowlist, a known api.
func (m *Manager) discoverable() []string {
	var out []string
	for _, alias := range slices.Sorted(maps.Keys(m.providers)) {
		p := m.providers[alias]
		if len(p.Models) > 0 {
			continue
		}
		switch p.API {
		case llm.APIOpenAICompletions, llm.APIOpenAIResponses, llm.APIOllamaChat, llm.APIAnthropicMessages, llm.APIGoogleGenerative:
			out = append(out, alias)
		}
	}
	return out
}

// LoadCache restores every discoverable provider's cached list into the registry. It returns
// the aliases for which the cache entry is younger than FreshFor.
func (m *Manager) LoadCache(ctx context.Context) (fresh []string) {
	if m.opts.Cache == nil {
		return nil
	}
	for _, alias := range m.discoverable() {
		e, err := m.opts.Cache.Load(ctx, alias)
		if err != nil {
			if !errors.Is(err, ErrCacheMiss) {
				m.log.Warn("model cache unreadable", "provider", alias, "error", err)
			}
			continue
		}
		ms := slices.Clone(e.Models)
		m.opts.Tiers.Rank(ms)
		if err := m.reg.SetModels(alias, ms); err != nil {
			m.log.Warn("model cache: provider rejected", "provider", alias, "error", err)
			continue
		}
		m.setStatus(alias, func(st *ProviderStatus) {
			st.Source, st.Models, st.FetchedAt = SourceCache, len(ms), e.FetchedAt
		})
		if m.opts.FreshFor > 0 && time.Since(e.FetchedAt) < m.opts.FreshFor {
			fresh = append(fresh, alias)
		}
	}
	return fresh
}

// Refresh discovers the models of the given aliases (none: every discoverable provider), one
// after the other, each bounded by Timeout. Results are ranked, set in the registry and
// stored in the cache. The returned error joins the failures (each already logged).
func (m *Manager) Refresh(ctx context.Context, aliases ...string) error {
	if len(aliases) == 0 {
		aliases = m.discoverable()
	}
	var errs []error
	for _, alias := range aliases {
		if err := m.refreshOne(ctx, alias); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (m *Manager) refreshOne(ctx context.Context, alias string) error {
	p, ok := m.providers[alias]
	if !ok {
		return llm.ErrUnknownProvider
	}
	dctx, cancel := context.WithTimeout(ctx, m.opts.Timeout)
	defer cancel()
	start := time.Now()
	ms, err := Discover(dctx, alias, p, DiscoverOptions{APIKey: m.reg.APIKey(alias), HTTPClient: m.opts.HTTPClient})
	if err == nil {
		m.opts.Tiers.Rank(ms)
		err = m.reg.SetModels(alias, ms)
	}
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("model discovery failed; keeping the previous list", "provider", alias, "error", err)
		}
		m.setStatus(alias, func(st *ProviderStatus) { st.Err = err.Error() })
		return err
	}
	now := time.Now()
	m.setStatus(alias, func(st *ProviderStatus) {
		st.Source, st.Models, st.FetchedAt, st.Err = SourceDiscovered, len(ms), now, ""
	})
	m.log.Info("models discovered", "provider", alias, "count", len(ms), "took", time.Since(start).Round(time.Millisecond))
	if m.opts.Cache != nil {
		if err := m.opts.Cache.Store(ctx, CacheEntry{Alias: alias, Models: ms, FetchedAt: now}); err != nil {
			m.log.Warn("model cache write failed", "provider", alias, "error", err)
		}
	}
	return nil
}

// Start restores the cache synchronously (so the registry is usable at once) and refreshes in
// the background: once, then every Interval if set. Stop ends the background work.
func (m *Manager) Start(ctx context.Context) {
	fresh := m.LoadCache(ctx)
	var stale []string
	for _, a := range m.discoverable() {
		if !slices.Contains(fresh, a) {
			stale = append(stale, a)
		}
	}
	ctx, m.cancel = context.WithCancel(ctx)
	m.done = make(chan struct{})
	m.wg.Add(1)
	go func() {
		defer close(m.done)
		defer m.wg.Done()
		if len(stale) > 0 {
			_ = m.Refresh(ctx, stale...)
		}
		if m.opts.Interval <= 0 {
			return
		}
		t := time.NewTicker(m.opts.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = m.Refresh(ctx)
			}
		}
	}()
}

// Wait blocks until the background work of Start has ended (the first refresh when no
// Interval is set).
func (m *Manager) Wait() { m.wg.Wait() }

// Stop cancels the background refresh and waits for it to end, at most until ctx ends (then
// it returns ctx's error; Done reports the end). Safe to call more than once.
func (m *Manager) Stop(ctx context.Context) error {
	if m.cancel == nil {
		return nil // never started
	}
	m.cancel()
	select {
	case <-m.Done():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("models: stop: %w", ctx.Err())
	}
}

// Done is closed once the background work Start began has ended. Before Start it is nil.
func (m *Manager) Done() <-chan struct{} { return m.done }

func (m *Manager) setStatus(alias string, f func(*ProviderStatus)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.status[alias]
	if !ok {
		st = &ProviderStatus{Alias: alias, API: m.providers[alias].API, Source: SourceNone}
		m.status[alias] = st
	}
	f(st)
}

// Status reports every chat provider's list source, sorted by alias.
func (m *Manager) Status() []ProviderStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]ProviderStatus, 0, len(m.status))
	for _, alias := range slices.Sorted(maps.Keys(m.status)) {
		out = append(out, *m.status[alias])
	}
	return out
}
