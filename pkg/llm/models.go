package llm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
)

// ProviderSettings is what the registry knows of one provider: the api that talks to it, where
// it is, the key, and the models it allows. It is the library's own shape; an application maps
// its configuration onto it (agentbus does so in pkg/models.RegistryFromConfig).
type ProviderSettings struct {
	// API names the registered API implementation (APIOpenAICompletions, ...). Required.
	API string
	// BaseURL is the endpoint (for ollama its host); empty means the API's default.
	BaseURL string
	// APIKey is the key sent with requests. When empty, Registry.APIKey asks the registry's key
	// lookup (WithKeyLookup), if any.
	APIKey string
	// Headers are sent with every request.
	Headers map[string]string
	// ContextWindow and MaxTokens apply to models that do not state their own (0: unknown).
	ContextWindow, MaxTokens int
	// Models is the allowlist: when non-empty only these ids are accepted and each entry's
	// non-zero fields describe the model. Empty accepts any id.
	Models []ModelSpec
	// Compat, when set, is copied into every model of the provider.
	Compat *Compat
	// Vision and Thinking, when set, override what discovery or the allowlist says.
	Vision, Thinking *bool
}

// ModelSpec is one allowlisted model; zero fields fall back to the provider's settings and to
// discovered details.
type ModelSpec struct {
	ID, Name      string
	Reasoning     bool
	Input         []string
	ContextWindow int
	MaxTokens     int
	Cost          ModelCost
}

// KeyLookup finds a key for a provider whose settings carry none (for example from the
// environment). It must be safe for concurrent use.
type KeyLookup func(alias string, s ProviderSettings) string

// RegistryOption configures a Registry.
type RegistryOption func(*Registry) error

// WithKeyLookup sets the lookup APIKey uses for providers without a configured key.
func WithKeyLookup(f KeyLookup) RegistryOption {
	return func(r *Registry) error {
		if f == nil {
			return fmt.Errorf("%w: nil key lookup", ErrInvalidOption)
		}
		r.lookup = f
		return nil
	}
}

// Registry resolves (provider alias, model id) pairs into Models. It is safe for concurrent
// use; discovery may fill model lists later with SetModels.
//
// A provider with a models allowlist accepts only those ids, and each allowlist entry's details
// (name, reasoning, input, context window, max tokens, cost) describe the model. Without an
// allowlist any id is accepted: the Model is taken from the discovered list when it is there,
// otherwise synthesized from the provider's settings. Either way the provider's api, base URL,
// headers and compat apply, and fields the entry leaves zero fall back to the provider's
// ContextWindow / MaxTokens and then to the discovered model. A zero ContextWindow or MaxTokens
// means "unknown": callers fall back to their own limits.
type Registry struct {
	mu        sync.RWMutex
	providers map[string]*providerEntry
	lookup    KeyLookup
}

type providerEntry struct {
	alias      string
	cfg        ProviderSettings
	allowlist  []ModelSpec // nil: any id
	discovered []Model
}

// NewRegistry builds a registry of providers by alias. It fails on a provider without an api,
// naming the alias.
func NewRegistry(providers map[string]ProviderSettings, opts ...RegistryOption) (*Registry, error) {
	r := &Registry{providers: make(map[string]*providerEntry, len(providers))}
	for _, o := range opts {
		if err := o(r); err != nil {
			return nil, err
		}
	}
	var errs []string
	for _, alias := range slices.Sorted(maps.Keys(providers)) {
		p := providers[alias]
		if p.API == "" {
			errs = append(errs, fmt.Sprintf("provider %s: api is required", alias))
			continue
		}
		e := &providerEntry{alias: alias, cfg: p}
		if len(p.Models) > 0 {
			e.allowlist = p.Models
		}
		r.providers[alias] = e
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("model registry: %s", strings.Join(errs, "; "))
	}
	return r, nil
}

// ParseCompat reads a compat block given as a generic map (as decoded from YAML or JSON);
// unknown keys are an error so a typo does not pass silently.
func ParseCompat(m map[string]any) (*Compat, error) {
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

// Settings returns the settings an alias was registered with.
func (r *Registry) Settings(alias string) (ProviderSettings, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.providers[alias]
	if !ok {
		return ProviderSettings{}, false
	}
	return e.cfg, true
}

func (r *Registry) entry(alias string) (*providerEntry, error) {
	e, ok := r.providers[alias]
	if !ok {
		known := slices.Sorted(maps.Keys(r.providers))
		if len(known) == 0 {
			return nil, fmt.Errorf("%w %q: no providers are registered", ErrUnknownProvider, alias)
		}
		return nil, fmt.Errorf("%w %q (registered: %s)", ErrUnknownProvider, alias, strings.Join(known, ", "))
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
			return nil, fmt.Errorf("%w: provider %q: no model id given and no model listed or discovered", ErrUnknownModel, providerAlias)
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
	return e.model(&ModelSpec{ID: modelID}, disc), nil
}

// model builds a Model from an entry, the provider's settings and a discovered model.
func (e *providerEntry) model(me *ModelSpec, disc *Model) *Model {
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
	if v := p.Vision; v != nil {
		has := slices.Contains(m.Input, InputImage)
		if *v && !has {
			m.Input = append(m.Input, InputImage)
		} else if !*v && has {
			m.Input = slices.DeleteFunc(m.Input, func(s string) bool { return s == InputImage })
		}
	}
	if v := p.Thinking; v != nil {
		m.Reasoning = *v
	}
	if me.Cost != (ModelCost{}) {
		m.Cost = me.Cost
	}
	m.ContextWindow = firstPositive(me.ContextWindow, p.ContextWindow, m.ContextWindow)
	m.MaxTokens = firstPositive(me.MaxTokens, p.MaxTokens, m.MaxTokens)
	if p.BaseURL != "" {
		m.BaseURL = p.BaseURL
	}
	if len(p.Headers) > 0 {
		if m.Headers == nil {
			m.Headers = make(map[string]string, len(p.Headers))
		}
		maps.Copy(m.Headers, p.Headers)
	}
	if p.Compat != nil {
		c := *p.Compat
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

// APIKey returns the key for an alias: its configured APIKey, else what the registry's key
// lookup finds (WithKeyLookup), else "". It has the shape of the agent loop's GetAPIKey hook.
func (r *Registry) APIKey(providerAlias string) string {
	r.mu.RLock()
	e, ok := r.providers[providerAlias]
	lookup := r.lookup
	r.mu.RUnlock()
	if !ok {
		return ""
	}
	if e.cfg.APIKey != "" {
		return e.cfg.APIKey
	}
	if lookup != nil {
		return lookup(providerAlias, e.cfg)
	}
	return ""
}
