package schedule

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil"
)

// Tasks is the KV tasks repository: background task records by session. Safe for concurrent
// use; every update is a revision CAS.
type Tasks struct {
	kv jetstream.KeyValue
}

// OpenTasks opens KV tasks (provisioned beforehand).
func OpenTasks(ctx context.Context, js jetstream.JetStream) (*Tasks, error) {
	kv, err := natsutil.KeyValue(ctx, js, events.BucketTasks)
	if err != nil {
		return nil, fmt.Errorf("schedule: open KV %s: %w", events.BucketTasks, err)
	}
	return &Tasks{kv: kv}, nil
}

// Create stores a new record (state pending unless set). An existing record with the same id
// is left alone: a re-queued task keeps its history. It reports whether it created one.
func (t *Tasks) Create(ctx context.Context, r events.TaskRecord) (bool, error) {
	now := time.Now().UnixMilli()
	if r.State == "" {
		r.State = events.TaskPending
	}
	if r.CreatedAt == 0 {
		r.CreatedAt = now
	}
	r.UpdatedAt = now
	b, err := events.MarshalTaskRecord(r)
	if err != nil {
		return false, err
	}
	if _, err := t.kv.Create(ctx, events.TaskKey(r.Session, r.ID), b); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return false, nil
		}
		return false, fmt.Errorf("schedule: create task %s: %w", r.ID, err)
	}
	return true, nil
}

// Put stores r whatever was there (the reminder record, which each new reminder replaces).
func (t *Tasks) Put(ctx context.Context, r events.TaskRecord) error {
	now := time.Now().UnixMilli()
	if r.CreatedAt == 0 {
		r.CreatedAt = now
	}
	r.UpdatedAt = now
	b, err := events.MarshalTaskRecord(r)
	if err != nil {
		return err
	}
	if _, err := t.kv.Put(ctx, events.TaskKey(r.Session, r.ID), b); err != nil {
		return fmt.Errorf("schedule: put task %s: %w", r.ID, err)
	}
	return nil
}

// Get returns the record of task id in session k, or ErrNotFound.
func (t *Tasks) Get(ctx context.Context, k events.SessionKey, id string) (events.TaskRecord, uint64, error) {
	e, err := t.kv.Get(ctx, events.TaskKey(k, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return events.TaskRecord{}, 0, fmt.Errorf("%w: task %s", ErrNotFound, id)
	}
	if err != nil {
		return events.TaskRecord{}, 0, fmt.Errorf("schedule: get task %s: %w", id, err)
	}
	r, err := events.UnmarshalTaskRecord(e.Value())
	return r, e.Revision(), err
}

// Update applies fn to the record of task id (creating it from zero when absent and create is
// set) with a revision CAS, retrying on conflicts. fn returns false to leave it unchanged.
func (t *Tasks) Update(ctx context.Context, k events.SessionKey, id string, fn func(*events.TaskRecord) bool) (events.TaskRecord, error) {
	key := events.TaskKey(k, id)
	for range 10 {
		r, rev, err := t.Get(ctx, k, id)
		if err != nil {
			return r, err
		}
		if !fn(&r) {
			return r, nil
		}
		r.UpdatedAt = time.Now().UnixMilli()
		b, err := events.MarshalTaskRecord(r)
		if err != nil {
			return r, err
		}
		_, err = t.kv.Update(ctx, key, b, rev)
		if err == nil {
			return r, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return r, fmt.Errorf("schedule: update task %s: %w", id, err)
		}
	}
	return events.TaskRecord{}, fmt.Errorf("%w: task %s", ErrConflict, id)
}

// Find returns the task with id in any session (for /tasks cancel <id> from another chat).
func (t *Tasks) Find(ctx context.Context, id string) (events.TaskRecord, error) {
	keys, err := t.kv.ListKeysFiltered(ctx, "*."+events.EncodeToken(id))
	if err != nil {
		return events.TaskRecord{}, fmt.Errorf("schedule: find task %s: %w", id, err)
	}
	for key := range keys.Keys() {
		e, err := t.kv.Get(ctx, key)
		if err != nil {
			continue
		}
		if r, err := events.UnmarshalTaskRecord(e.Value()); err == nil {
			_ = keys.Stop()
			return r, nil
		}
	}
	return events.TaskRecord{}, fmt.Errorf("%w: task %s", ErrNotFound, id)
}

// List returns session k's task records, newest first.
func (t *Tasks) List(ctx context.Context, k events.SessionKey) ([]events.TaskRecord, error) {
	keys, err := t.kv.ListKeysFiltered(ctx, k.Token()+".>")
	if err != nil {
		return nil, fmt.Errorf("schedule: list tasks of %s: %w", k, err)
	}
	var out []events.TaskRecord
	for key := range keys.Keys() {
		e, err := t.kv.Get(ctx, key)
		if err != nil {
			continue // deleted or expired meanwhile
		}
		if r, err := events.UnmarshalTaskRecord(e.Value()); err == nil {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b events.TaskRecord) int { return int(b.CreatedAt - a.CreatedAt) })
	return out, nil
}

// Watch sends the record of task id of session k each time it changes, until ctx ends (the
// channel is closed then).
func (t *Tasks) Watch(ctx context.Context, k events.SessionKey, id string) (<-chan events.TaskRecord, error) {
	w, err := t.kv.Watch(ctx, events.TaskKey(k, id), jetstream.UpdatesOnly())
	if err != nil {
		return nil, fmt.Errorf("schedule: watch task %s: %w", id, err)
	}
	out := make(chan events.TaskRecord, 1)
	go func() {
		defer close(out)
		defer func() { _ = w.Stop() }()
		for {
			e, ok := natsutil.NextUpdate(ctx, w)
			if !ok {
				return
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			if r, err := events.UnmarshalTaskRecord(e.Value()); err == nil {
				select {
				case out <- r:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}
