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
	// CopiesStep: the worker copies each call's step into its result (events.ToolCall.Step);
	// its id then goes into the entry's StepWorkers as well.
	CopiesStep bool
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
			entry.Workers, entry.StepWorkers = []string{h.ID}, nil
			if h.CopiesStep {
				entry.StepWorkers = []string{h.ID}
			}
			data, err := events.MarshalToolEntry(entry)
			if err != nil {
				return err
			}
			_, err = h.KV.Create(ctx, key, data)
			return err
		case err != nil:
			return err
		}
		var workers, stepWorkers []string
		if old, err := events.UnmarshalToolEntry(cur.Value()); err == nil && h.generation(old.UpdatedAt) == h.generation(now) {
			workers, stepWorkers = slices.Clone(old.Workers), slices.Clone(old.StepWorkers)
		}
		workers = addID(workers, h.ID)
		if h.CopiesStep {
			stepWorkers = addID(stepWorkers, h.ID)
		} else if i := slices.Index(stepWorkers, h.ID); i >= 0 {
			stepWorkers = slices.Delete(stepWorkers, i, i+1)
		}
		entry.Workers, entry.StepWorkers = workers, stepWorkers
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
		if j := slices.Index(entry.StepWorkers, h.ID); j >= 0 {
			entry.StepWorkers = slices.Delete(entry.StepWorkers, j, j+1)
		}
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

// addID adds id to the sorted list ids unless it is there.
func addID(ids []string, id string) []string {
	if !slices.Contains(ids, id) {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
