package toolbus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/internal/jsconflict"
	"github.com/agentbus/agentbus/pkg/events"
)

// Announcer keeps one tool worker's entries in KV tools: Announce merges the worker's id into
// a tool's entry, Withdraw takes it out. Stale ids drop out by generation: an announcement that
// finds an entry last refreshed in an earlier Window starts the Workers list afresh. Safe for
// concurrent use once its fields are set.
type Announcer struct {
	KV     jetstream.KeyValue // KV tools
	ID     string             // the tool worker's id
	Window time.Duration      // the registry generation window (2 × the heartbeat)
}

// generation numbers the registry windows; a worker list older than the current window is
// rebuilt from scratch, so ids of crashed workers drop out within one window.
func (h *Announcer) generation(ms int64) int64 { return ms / h.Window.Milliseconds() }

// Announce puts entry (Workers and UpdatedAt unset) with this worker's id merged into Workers
// (revision CAS, so workers announcing the same tool at once all end up listed).
func (h *Announcer) Announce(ctx context.Context, t events.ToolEntry) error {
	key := events.EncodeToken(t.Name)
	err := jsconflict.Retry(ctx, func() error {
		now := time.Now().UnixMilli()
		entry := t
		entry.UpdatedAt = now
		cur, err := h.KV.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			entry.Workers = []string{h.ID}
			data, err := events.MarshalToolEntry(entry)
			if err != nil {
				return err
			}
			_, err = h.KV.Create(ctx, key, data)
			return err
		case err != nil:
			return err
		}
		var workers []string
		if old, err := events.UnmarshalToolEntry(cur.Value()); err == nil && h.generation(old.UpdatedAt) == h.generation(now) {
			workers = slices.Clone(old.Workers)
		}
		if !slices.Contains(workers, h.ID) {
			workers = append(workers, h.ID)
		}
		slices.Sort(workers)
		entry.Workers = workers
		data, err := events.MarshalToolEntry(entry)
		if err != nil {
			return err
		}
		_, err = h.KV.Update(ctx, key, data, cur.Revision())
		return err
	})
	if err != nil {
		return fmt.Errorf("announce %s: %w", t.Name, err)
	}
	return nil
}

// Withdraw removes this worker's id from the tool's entry, and the entry when no worker is left.
func (h *Announcer) Withdraw(ctx context.Context, name string) error {
	key := events.EncodeToken(name)
	err := jsconflict.Retry(ctx, func() error {
		cur, err := h.KV.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil
		} else if err != nil {
			return err
		}
		entry, err := events.UnmarshalToolEntry(cur.Value())
		if err != nil {
			// Not ours to repair; drop it only if nobody else could be named in it.
			return h.KV.Delete(ctx, key, jetstream.LastRevision(cur.Revision()))
		}
		i := slices.Index(entry.Workers, h.ID)
		if i < 0 {
			return nil
		}
		entry.Workers = slices.Delete(entry.Workers, i, i+1)
		if len(entry.Workers) == 0 {
			return h.KV.Delete(ctx, key, jetstream.LastRevision(cur.Revision()))
		}
		data, err := events.MarshalToolEntry(entry)
		if err != nil {
			return err
		}
		_, err = h.KV.Update(ctx, key, data, cur.Revision())
		return err
	})
	if err != nil {
		return fmt.Errorf("withdraw %s: %w", name, err)
	}
	return nil
}
