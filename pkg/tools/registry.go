package tools

import (
	"fmt"
	"slices"
	"sort"
	"sync"
)

// Registry holds the tools a process offers. It is safe for concurrent use; List and Allowed
// return copies sorted by name, so prompts are stable from turn to turn (prompt caching).
type Registry struct {
	mu     sync.RWMutex
	tools  map[string]Tool
	sorted []Tool // snapshot sorted by name; nil after a change. Never modified in place.
}

// NewRegistry returns a registry holding ts (see Add).
func NewRegistry(ts ...Tool) (*Registry, error) {
	r := &Registry{tools: map[string]Tool{}}
	for _, t := range ts {
		if err := r.Add(t); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Add registers t; a second tool of the same name is ErrDuplicate.
func (r *Registry) Add(t Tool) error {
	if err := t.Validate(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tools == nil {
		r.tools = map[string]Tool{}
	}
	if _, ok := r.tools[t.Name]; ok {
		return fmt.Errorf("%w: %s", ErrDuplicate, t.Name)
	}
	r.tools[t.Name] = t
	r.sorted = nil
	return nil
}

// Put registers t, replacing a tool of the same name (hot reload of file tools).
func (r *Registry) Put(t Tool) error {
	if err := t.Validate(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tools == nil {
		r.tools = map[string]Tool{}
	}
	r.tools[t.Name] = t
	r.sorted = nil
	return nil
}

// Remove unregisters name and reports whether it was there.
func (r *Registry) Remove(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.tools[name]
	delete(r.tools, name)
	r.sorted = nil
	return ok
}

// Get returns the tool called name.
func (r *Registry) Get(name string) (Tool, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.tools[name]
	return t, ok
}

// snapshot returns the sorted snapshot, building it after a change. Callers must not modify it.
func (r *Registry) snapshot() []Tool {
	r.mu.RLock()
	s := r.sorted
	r.mu.RUnlock()
	if s != nil {
		return s
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sorted == nil {
		s := make([]Tool, 0, len(r.tools))
		for _, t := range r.tools {
			s = append(s, t)
		}
		sort.Slice(s, func(i, j int) bool { return s[i].Name < s[j].Name })
		r.sorted = s
	}
	return r.sorted
}

// List returns every tool, sorted by name.
func (r *Registry) List() []Tool { return slices.Clone(r.snapshot()) }

// Allowed returns the tools env may use, sorted by name (see AllowedFor). It is called for
// every turn, so it filters a cached snapshot instead of re-sorting.
func (r *Registry) Allowed(env Env) []Tool { return Filter(r.snapshot(), env) }

// Filter keeps the tools of ts that env may use, in order.
func Filter(ts []Tool, env Env) []Tool {
	out := make([]Tool, 0, len(ts))
	for i := range ts {
		if ts[i].AllowedFor(env) {
			out = append(out, ts[i])
		}
	}
	return out
}

// AllowedFor applies the IM gating: the env's platform must be in Platforms, its scope in
// Scopes (each when non-empty), and the sender must hold one of RequiredAnyRole (master holds
// every role, user is everyone's). A tool that names platforms or scopes is hidden from an env
// that does not say its platform or scope: gating fails closed.
func (t Tool) AllowedFor(env Env) bool {
	if len(t.Platforms) > 0 && !slices.Contains(t.Platforms, env.Platform) {
		return false
	}
	if len(t.Scopes) > 0 && !slices.Contains(t.Scopes, env.Scope) {
		return false
	}
	return env.HasAnyRole(t.RequiredAnyRole...)
}
