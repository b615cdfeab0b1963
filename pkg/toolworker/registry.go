package toolworker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/internal/jsconflict"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/tools"
)

// timeoutFor is the run limit of a tool on this worker.
func (h *Handle) timeoutFor(name string) time.Duration {
	if d, ok := h.opts.Timeouts[name]; ok && d > 0 {
		return d
	}
	return h.opts.DefaultTimeout
}

// Entry is the registry entry this worker announces for t (Workers and UpdatedAt unset).
func (h *Handle) Entry(t tools.Tool) events.ToolEntry {
	l := t.LLM()
	src := t.Source
	if src == "" {
		src = "builtin"
	}
	return events.ToolEntry{
		Name: t.Name, Description: t.Description, Parameters: l.Parameters,
		Platforms: t.Platforms, Scopes: t.Scopes, Roles: t.RequiredAnyRole,
		Idempotent: t.Idempotent, PreExecutable: t.PreExecutable, TimeoutMs: h.timeoutFor(t.Name).Milliseconds(), Source: src,
		Keywords: t.Keywords,
	}
}

// generation numbers the registry windows; a worker list older than the current window is
// rebuilt from scratch, so ids of crashed workers drop out within one window.
func (h *Handle) generation(ms int64) int64 { return ms / h.window.Milliseconds() }

// announce puts t's entry with this worker's id merged into Workers (revision CAS, so workers
// announcing the same tool at once all end up listed).
func (h *Handle) announce(ctx context.Context, t tools.Tool) error {
	key := events.EncodeToken(t.Name)
	err := jsconflict.Retry(ctx, func() error {
		now := time.Now().UnixMilli()
		entry := h.Entry(t)
		entry.UpdatedAt = now
		cur, err := h.toolsKV.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			entry.Workers = []string{h.opts.ID}
			data, err := events.MarshalToolEntry(entry)
			if err != nil {
				return err
			}
			_, err = h.toolsKV.Create(ctx, key, data)
			return err
		case err != nil:
			return err
		}
		var workers []string
		if old, err := events.UnmarshalToolEntry(cur.Value()); err == nil && h.generation(old.UpdatedAt) == h.generation(now) {
			workers = slices.Clone(old.Workers)
		}
		if !slices.Contains(workers, h.opts.ID) {
			workers = append(workers, h.opts.ID)
		}
		slices.Sort(workers)
		entry.Workers = workers
		data, err := events.MarshalToolEntry(entry)
		if err != nil {
			return err
		}
		_, err = h.toolsKV.Update(ctx, key, data, cur.Revision())
		return err
	})
	if err != nil {
		return fmt.Errorf("announce %s: %w", t.Name, err)
	}
	return nil
}

// withdraw removes this worker's id from the tool's entry, and the entry when no worker is left.
func (h *Handle) withdraw(ctx context.Context, name string) error {
	key := events.EncodeToken(name)
	err := jsconflict.Retry(ctx, func() error {
		cur, err := h.toolsKV.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil
		} else if err != nil {
			return err
		}
		entry, err := events.UnmarshalToolEntry(cur.Value())
		if err != nil {
			// Not ours to repair; drop it only if nobody else could be named in it.
			return h.toolsKV.Delete(ctx, key, jetstream.LastRevision(cur.Revision()))
		}
		i := slices.Index(entry.Workers, h.opts.ID)
		if i < 0 {
			return nil
		}
		entry.Workers = slices.Delete(entry.Workers, i, i+1)
		if len(entry.Workers) == 0 {
			return h.toolsKV.Delete(ctx, key, jetstream.LastRevision(cur.Revision()))
		}
		data, err := events.MarshalToolEntry(entry)
		if err != nil {
			return err
		}
		_, err = h.toolsKV.Update(ctx, key, data, cur.Revision())
		return err
	})
	if err != nil {
		return fmt.Errorf("withdraw %s: %w", name, err)
	}
	return nil
}
