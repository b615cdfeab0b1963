package hooks

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/pkg/config"
)

// Registry holds in-process hooks. The zero value is empty and ready; safe for concurrent use.
type Registry struct {
	mu   sync.RWMutex
	list []*hook
	n    atomic.Int64
}

var defaultRegistry = &Registry{}

// Default is the registry Register fills and every Runner reads unless its Options name
// another.
func Default() *Registry { return defaultRegistry }

// InProcessName labels in-process hooks in metrics and logs (agentbus_hook_calls_total{hook}).
const InProcessName = "go"

// Register adds fn as an in-process hook for event (a dotted name or an alias) to the default
// registry, for programs that embed pkg/app. It has the semantics of a configured hook: it runs
// after the configured hooks of event, in registration order, within
// config.DefaultHookTimeoutMs, and an error or timeout is taken as continue. The returned func
// removes it. Register panics on an unknown event name (a programming error).
func Register(event string, fn Func) (unregister func()) {
	return defaultRegistry.Register(event, fn)
}

// Register adds fn for event to r; see the package-level Register.
func (r *Registry) Register(event string, fn Func) (unregister func()) {
	return r.RegisterWith(event, fn, RegisterOptions{})
}

// RegisterOptions tune an in-process hook.
type RegisterOptions struct {
	// Name labels it in metrics and logs (default InProcessName).
	Name string
	// Timeout bounds a call (default config.DefaultHookTimeoutMs).
	Timeout time.Duration
	// Block makes an error or timeout block the step (onError: block).
	Block bool
}

// RegisterWith is Register with options.
func (r *Registry) RegisterWith(event string, fn Func, o RegisterOptions) (unregister func()) {
	ev, ok := config.HookEvent(event)
	if !ok {
		panic(fmt.Sprintf("hooks: Register: unknown event %q", event))
	}
	if o.Name == "" {
		o.Name = InProcessName
	}
	if o.Timeout <= 0 {
		o.Timeout = config.DefaultHookTimeoutMs * time.Millisecond
	}
	h := &hook{name: o.Name, events: map[string]bool{ev: true}, timeout: o.Timeout, block: o.Block, fn: fn, call: callFunc}
	r.mu.Lock()
	r.list = append(r.list, h)
	r.mu.Unlock()
	r.n.Add(1)
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for i, x := range r.list {
			if x == h {
				r.list = append(r.list[:i:i], r.list[i+1:]...)
				r.n.Add(-1)
				return
			}
		}
	}
}

func (r *Registry) has(event string) bool {
	if r.n.Load() == 0 {
		return false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, h := range r.list {
		if h.events[event] {
			return true
		}
	}
	return false
}

func (r *Registry) forEvent(event string) []*hook {
	if r.n.Load() == 0 {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []*hook
	for _, h := range r.list {
		if h.events[event] {
			out = append(out, h)
		}
	}
	return out
}
