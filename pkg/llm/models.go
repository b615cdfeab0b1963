package llm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/agentbus/agentbus/pkg/config"
)

// Registry resolves (provider alias, model id) pairs from configuration (ai.providers) into
// Models. It is safe for concurrent use; discovery may fill model lists later with SetModels.
//
// A provider with a models allowlist accepts only those ids, and each allowlist entry's details
// (name, reasoning, input, context window, max tokens, cost) describe the model. Without an
// allowlist any id is accepted: the Model is taken from the discovered list when it is there,
// otherwise synthesized from the provider's settings. Either way the provider's api, base URL
// (host for ollama), headers and compat apply, and fields the entry leaves zero fall back to
// the provider's contextWindow / maxTokens (num_ctx for ollama) and then to the discovered
// model. A zero ContextWindow or MaxTokens means "unknown": callers fall back to their own
// limits (ai.agent.contextTokens).
type Registry struct {
	mu        sync.RWMutex
	providers map[string]*providerEntry
}

type providerEntry struct {
	alias      string
	cfg        config.Provider
	compat     *Compat
	allowlist  []config.ModelEntry // nil: any id
	discovered []Model
}

// NewRegistry builds a registry from ai.providers. It fails on a provider without an api (that
// is not an image-generation driver) and on a compat block that does not parse, naming the
// provider and key.
func NewRegistry(providers map[string]config.Provider) (*Registry, error) {
	r := &Registry{providers: make(map[string]*providerEntry, len(providers))}
	var errs []string
	for _, alias := range slices.Sorted(maps.Keys(providers)) {
		p := providers[alias]
		if p.API == "" && p.Driver == "" {
			errs = append(errs, fmt.Sprintf("ai.providers.%s.api is required", alias))
			continue
		}
		e := &providerEntry{alias: alias, cfg: p}
		if len(p.Models) > 0 {
			e.allowlist = p.Models
		}
		if len(p.Compat) > 0 {
			c, err := parseCompat(p.Compat)
			if err != nil {
				errs = append(errs, fmt.Sprintf("ai.providers.%s.compat: %v", alias, err))
				continue
			}
			e.compat = c
		}
		r.providers[alias] = e
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("model registry: %s", strings.Join(errs, "; "))
	}
	return r, nil
}

// parseCompat reads a compat block; unknown keys are an error so a typo does not pass silently.
func parseCompat(m map[string]any) (*Compat, error) {
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var c Compat
	if err := dec.Decode(&c); err != nil {
		return nil, err
	}
	return &c, nil
}

// Aliases lists the configured provider aliases, sorted.
func (r *Registry) Aliases() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.providers))
}

// Provider returns an alias's configuration (for settings the Model does not carry, such as
// the default thinking level or provider options).
func (r *Registry) Provider(alias string) (config.Provider, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.providers[alias]
	if !ok {
		return config.Provider{}, false
	}
	return e.cfg, true
}

func (r *Registry) entry(alias string) (*providerEntry, error) {
	e, ok := r.providers[alias]
	if !ok {
		known := slices.Sorted(maps.Keys(r.providers))
		if len(known) == 0 {
			return nil, fmt.Errorf("%w %q: no providers are configured under ai.providers", ErrUnknownProvider, alias)
		}
		return nil, fmt.Errorf("%w %q (configured: %s)", ErrUnknownProvider, alias, strings.Join(known, ", "))
	}
	if e.cfg.API == "" {
		return nil, fmt.Errorf("%w %q: it is an image generation driver (%s), not a model api", ErrUnknownProvider, alias, e.cfg.Driver)
	}
	return e, nil
}

// GetModel returns the model modelID of the provider configured as providerAlias. An empty
// modelID picks the first allowlisted (else first discovered) model. The Model is a fresh copy.
func (r *Registry) GetModel(providerAlias, modelID string) (*Model, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, err := r.entry(providerAlias)
	if err != nil {
		return nil, err
	}
	if modelID == "" {
		switch {
		case len(e.allowlist) > 0:
			modelID = e.allowlist[0].ID
		case len(e.discovered) > 0:
			modelID = e.discovered[0].ID
		default:
			return nil, fmt.Errorf("provider %q: no model id given and none configured (set ai.providers.%s.models)", providerAlias, providerAlias)
		}
	}
	var disc *Model
	for i := range e.discovered {
		if e.discovered[i].ID == modelID {
			disc = &e.discovered[i]
			break
		}
	}
	if e.allowlist != nil {
		for i := range e.allowlist {
			if e.allowlist[i].ID == modelID {
				return e.model(&e.allowlist[i], disc), nil
			}
		}
		ids := make([]string, len(e.allowlist))
		for i := range e.allowlist {
			ids[i] = e.allowlist[i].ID
		}
		return nil, fmt.Errorf("%w %q for provider %q (allowed: %s)", ErrUnknownModel, modelID, providerAlias, strings.Join(ids, ", "))
	}
	return e.model(&config.ModelEntry{ID: modelID}, disc), nil
}

// model builds a Model from an entry, the provider's settings and a discovered model.
func (e *providerEntry) model(me *config.ModelEntry, disc *Model) *Model {
	p := &e.cfg
	m := &Model{ID: me.ID}
	if disc != nil {
		*m = *disc
		m.Input = slices.Clone(disc.Input)
		m.Headers = maps.Clone(disc.Headers)
		if disc.Compat != nil {
			c := *disc.Compat
			m.Compat = &c
		}
	}
	m.ID, m.API, m.Provider = me.ID, p.API, e.alias
	if me.Name != "" {
		m.Name = me.Name
	}
	if m.Name == "" {
		m.Name = me.ID
	}
	if me.Reasoning {
		m.Reasoning = true
	}
	if len(me.Input) > 0 {
		m.Input = slices.Clone(me.Input)
	}
	if len(m.Input) == 0 {
		m.Input = []string{InputText}
	}
	if v := p.Capabilities.Vision; v != nil {
		has := slices.Contains(m.Input, InputImage)
		if *v && !has {
			m.Input = append(m.Input, InputImage)
		} else if !*v && has {
			m.Input = slices.DeleteFunc(m.Input, func(s string) bool { return s == InputImage })
		}
	}
	if v := p.Capabilities.Thinking; v != nil {
		m.Reasoning = *v
	}
	if me.Cost.Input != 0 || me.Cost.Output != 0 || me.Cost.CacheRead != 0 || me.Cost.CacheWrite != 0 {
		m.Cost = ModelCost{Input: me.Cost.Input, Output: me.Cost.Output, CacheRead: me.Cost.CacheRead, CacheWrite: me.Cost.CacheWrite}
	}
	m.ContextWindow = firstPositive(me.ContextWindow, p.ContextWindow, m.ContextWindow)
	if p.API == APIOllamaChat {
		m.ContextWindow = firstPositive(me.ContextWindow, p.ContextWindow, p.NumCtx, m.ContextWindow)
	}
	m.MaxTokens = firstPositive(me.MaxTokens, p.MaxTokens, m.MaxTokens)
	switch {
	case p.BaseURL != "":
		m.BaseURL = p.BaseURL
	case p.Host != "":
		m.BaseURL = p.Host
	}
	if len(p.Headers) > 0 {
		if m.Headers == nil {
			m.Headers = make(map[string]string, len(p.Headers))
		}
		maps.Copy(m.Headers, p.Headers)
	}
	if e.compat != nil {
		c := *e.compat
		m.Compat = &c
	}
	return m
}

func firstPositive(vs ...int) int {
	for _, v := range vs {
		if v > 0 {
			return v
		}
	}
	return 0
}

// Models lists the models known for an alias: the allowlist if configured, else what discovery
// set. Each is a fresh copy.
func (r *Registry) Models(providerAlias string) ([]Model, error) {
	r.mu.RLock()
	e, err := r.entry(providerAlias)
	if err != nil {
		r.mu.RUnlock()
		return nil, err
	}
	var ids []string
	if e.allowlist != nil {
		for i := range e.allowlist {
			ids = append(ids, e.allowlist[i].ID)
		}
	} else {
		for i := range e.discovered {
			ids = append(ids, e.discovered[i].ID)
		}
	}
	r.mu.RUnlock()
	out := make([]Model, 0, len(ids))
	for _, id := range ids {
		m, err := r.GetModel(providerAlias, id)
		if err != nil {
			return nil, err
		}
		out = append(out, *m)
	}
	return out, nil
}

// SetModels records the models discovery found for an alias (replacing earlier ones). With an
// allowlist they only add details to the allowlisted ids; without one they become the list
// Models returns and GetModel's source of details.
func (r *Registry) SetModels(providerAlias string, models []Model) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, err := r.entry(providerAlias)
	if err != nil {
		return err
	}
	e.discovered = slices.Clone(models)
	return nil
}

// APIKey returns the key for an alias: the configured apiKey; else the environment variable
// <ALIAS>_API_KEY (alias upper-cased, other characters as "_"); else the variable conventional
// for the api (OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY or GOOGLE_API_KEY,
// OLLAMA_API_KEY) — the last only when the provider talks to that vendor's own endpoint (no
// baseUrl, or the vendor's host), so an OpenAI key is never sent to a third-party server.
func (r *Registry) APIKey(providerAlias string) string {
	r.mu.RLock()
	e, ok := r.providers[providerAlias]
	r.mu.RUnlock()
	if !ok {
		return ""
	}
	if e.cfg.APIKey != "" {
		return e.cfg.APIKey
	}
	if v := os.Getenv(aliasEnvVar(providerAlias)); v != "" {
		return v
	}
	base := e.cfg.BaseURL
	if base == "" {
		base = e.cfg.Host
	}
	vars, host := vendorKeyEnv(e.cfg.API)
	if base != "" {
		u, err := url.Parse(base)
		if err != nil || host == "" || !strings.EqualFold(u.Hostname(), host) {
			return ""
		}
	}
	for _, v := range vars {
		if k := os.Getenv(v); k != "" {
			return k
		}
	}
	return ""
}

func aliasEnvVar(alias string) string {
	b := []byte(strings.ToUpper(alias))
	for i, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	return string(b) + "_API_KEY"
}

// vendorKeyEnv returns the conventional key variables of an api and the vendor host they
// belong to.
func vendorKeyEnv(api string) ([]string, string) {
	switch api {
	case APIOpenAICompletions, APIOpenAIResponses:
		return []string{"OPENAI_API_KEY"}, "api.openai.com"
	case APIAnthropicMessages:
		return []string{"ANTHROPIC_API_KEY"}, "api.anthropic.com"
	case APIGoogleGenerative:
		return []string{"GEMINI_API_KEY", "GOOGLE_API_KEY"}, "generativelanguage.googleapis.com"
	case APIOllamaChat:
		return []string{"OLLAMA_API_KEY"}, "ollama.com"
	}
	return nil, ""
}
