// Package toolbus is the turn side and the announcing side of the tool-call protocol
// (DESIGN.md §6): the KV tools catalogue (Catalog), the announcer tool workers keep it with
// (Announcer), the client that requests a call on TOOL_CALLS and waits for its result on
// TOOL_RESULTS (Client, Executor), and the router that hands results to waiting calls (Router).
// It holds no role: the turn worker and the tool worker both use it.
package toolbus

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/loop"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/tools"
)

// Catalog mirrors KV tools: the tools some tool worker serves right now. Entries vanish
// when their workers stop refreshing them (bucket TTL).
type Catalog struct {
	kv     jetstream.KeyValue
	mu     sync.RWMutex
	m      map[string]events.ToolEntry
	sorted []events.ToolEntry // by name; Workers and UpdatedAt as when the offer last changed
	// views memoizes what each kind of sender may use: every turn asks, the answer changes only
	// with the catalog. Cleared on change.
	views map[viewKey]*View
}

// viewKey is what the permission filter of For looks at.
type viewKey struct{ platform, scope, roles string }

// View is the tools one kind of sender may use, in the shapes a turn needs them. It is
// shared by every turn that asks: read-only.
type View struct {
	Entries []events.ToolEntry // by name
	Avail   []tools.Tool       // Entries for skills.Select
	Agent   []loop.AgentTool   // Entries for the loop
	Index   map[string]int     // name -> position in Entries
	Pre     []events.ToolEntry // the preExecutable entries
}

// maxViews bounds the memo: roles come from configuration, so kinds of senders are few.
const maxViews = 256

// NewCatalog opens the registry bucket.
func NewCatalog(ctx context.Context, js jetstream.JetStream) (*Catalog, error) {
	kv, err := natsutil.KeyValue(ctx, js, events.BucketTools)
	if err != nil {
		return nil, fmt.Errorf("open KV %s: %w", events.BucketTools, err)
	}
	return &Catalog{kv: kv, m: map[string]events.ToolEntry{}}, nil
}

// Run follows the bucket until ctx ends, watching again a second after a watch fails, and
// returns when ctx ends. The caller runs it on a goroutine it owns and waits for it.
func (c *Catalog) Run(ctx context.Context) {
	for ctx.Err() == nil {
		w, err := c.kv.WatchAll(ctx)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		c.follow(ctx, w)
		_ = w.Stop()
	}
}

// follow applies w's entries until the watch ends or ctx does (natsutil.NextUpdate: a
// worker's Stop waits for this loop).
func (c *Catalog) follow(ctx context.Context, w jetstream.KeyWatcher) {
	for {
		e, ok := natsutil.NextUpdate(ctx, w)
		if !ok {
			return
		}
		if e != nil { // nil: the initial values are done
			c.apply(e)
		}
	}
}

func (c *Catalog) apply(e jetstream.KeyValueEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := e.Key()
	old, had := c.m[key]
	if e.Operation() == jetstream.KeyValuePut {
		if te, err := events.UnmarshalToolEntry(e.Value()); err == nil {
			c.m[key] = te
			if !had || !sameOffer(old, te) {
				c.changedLocked()
			}
			return
		}
	}
	if had {
		delete(c.m, key)
		c.changedLocked()
	}
}

// sameOffer reports whether a and b describe the same tool to turns: everything but who serves
// it and since when, which every heartbeat changes.
func sameOffer(a, b events.ToolEntry) bool {
	return a.Name == b.Name && a.Description == b.Description && bytes.Equal(a.Parameters, b.Parameters) &&
		slices.Equal(a.Platforms, b.Platforms) && slices.Equal(a.Scopes, b.Scopes) && slices.Equal(a.Roles, b.Roles) &&
		a.Idempotent == b.Idempotent && a.PreExecutable == b.PreExecutable && a.TimeoutMs == b.TimeoutMs && a.Source == b.Source &&
		slices.Equal(a.Keywords, b.Keywords)
}

func (c *Catalog) changedLocked() {
	sorted := make([]events.ToolEntry, 0, len(c.m))
	for _, t := range c.m {
		sorted = append(sorted, t)
	}
	slices.SortFunc(sorted, func(a, b events.ToolEntry) int { return strings.Compare(a.Name, b.Name) })
	c.sorted = sorted
	c.views = nil
}

// Refresh reads the bucket once (used before the watcher caught up, and by tests).
func (c *Catalog) Refresh(ctx context.Context) error {
	keys, err := c.kv.ListKeys(ctx)
	if err != nil {
		return err
	}
	for k := range keys.Keys() {
		e, err := c.kv.Get(ctx, k)
		if err == nil {
			c.apply(e)
		}
	}
	return nil
}

// For returns the tools the sender of m may use here, sorted by name. The slice is shared:
// read-only.
func (c *Catalog) For(m events.IMMessage) []events.ToolEntry { return c.View(m).Entries }

// View returns the memoized View for m's kind of sender.
func (c *Catalog) View(m events.IMMessage) *View {
	key := viewKey{m.Platform, m.Scene.Type, strings.Join(m.Sender.Roles, "\x00")}
	c.mu.RLock()
	v := c.views[key]
	c.mu.RUnlock()
	if v != nil {
		return v
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v = c.views[key]; v != nil {
		return v
	}
	v = &View{Index: map[string]int{}}
	for _, t := range c.sorted {
		if len(t.Platforms) > 0 && !slices.Contains(t.Platforms, m.Platform) {
			continue
		}
		if len(t.Scopes) > 0 && !slices.Contains(t.Scopes, m.Scene.Type) {
			continue
		}
		if len(t.Roles) > 0 && !slices.ContainsFunc(t.Roles, m.Sender.HasRole) {
			continue
		}
		v.Index[t.Name] = len(v.Entries)
		v.Entries = append(v.Entries, t)
		v.Avail = append(v.Avail, tools.Tool{Name: t.Name, Description: t.Description, Parameters: t.Parameters, Keywords: t.Keywords})
		v.Agent = append(v.Agent, loop.AgentTool{Tool: llm.Tool{Name: t.Name, Description: t.Description, Parameters: t.Parameters}})
		if t.PreExecutable {
			v.Pre = append(v.Pre, t)
		}
	}
	if c.views == nil || len(c.views) >= maxViews {
		c.views = map[viewKey]*View{}
	}
	c.views[key] = v
	return v
}

// Count is the number of tools the catalogue lists.
func (c *Catalog) Count() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}

// Served reports whether the registry lists a tool worker serving the tool (entries expire
// when their workers stop refreshing them).
func (c *Catalog) Served(name string) bool {
	t, ok := c.Entry(name)
	return ok && len(t.Workers) > 0
}

// CopiesStep reports whether every tool worker the registry lists for the tool copies a call's
// step into its result (events.ToolEntry.StepWorkers): only then may a turn leave the step out
// of AGENT_EVENTS and carry it on the tool's requests (events.ToolCall.Step). An entry written
// by a worker of an earlier version has no StepWorkers, so it says no.
func (c *Catalog) CopiesStep(name string) bool {
	t, ok := c.Entry(name)
	if !ok || len(t.Workers) == 0 {
		return false
	}
	for _, w := range t.Workers {
		if !slices.Contains(t.StepWorkers, w) {
			return false
		}
	}
	return true
}

// Entry is the catalogue's entry of the tool name.
func (c *Catalog) Entry(name string) (events.ToolEntry, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	t, ok := c.m[events.EncodeToken(name)]
	return t, ok
}
