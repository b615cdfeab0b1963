package tasks

import (
	"context"
	"log/slog"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/schedule"
)

// Records keeps the KV tasks records of the background tasks a turn worker runs (subagent
// and deferred tasks): a run starts only if its record is not terminal, a result is delivered
// only if the task was not cancelled meanwhile, and /tasks cancel reaches a running task
// through WatchCancel. Safe for concurrent use once its fields are set.
type Records struct {
	Tasks  *schedule.Tasks
	Worker string // the turn worker's id, recorded as the task's runner
	Log    *slog.Logger
}

// Starting records that task id of session sk starts here (one more attempt) and reports
// whether it should run: false when its result was delivered, or it was cancelled, before.
func (r Records) Starting(ctx context.Context, sk events.SessionKey, id, kind, label, owner string) bool {
	_, _ = r.Tasks.Create(ctx, events.TaskRecord{ID: id, Kind: kind, Session: sk, Label: LabelOr("", label), Owner: owner})
	run := true
	if _, err := r.Tasks.Update(ctx, sk, id, func(t *events.TaskRecord) bool {
		if t.Terminal() {
			run = false
			return false
		}
		t.State, t.Worker = events.TaskRunning, r.Worker
		t.Attempts++
		return true
	}); err != nil {
		r.Log.Warn("task record", "task", id, "err", err)
	}
	return run
}

// Cancelled reports whether the task's record says it was cancelled.
func (r Records) Cancelled(ctx context.Context, sk events.SessionKey, id string) bool {
	t, _, err := r.Tasks.Get(ctx, sk, id)
	return err == nil && t.State == events.TaskCancelled
}

// Finished records the task's end (done, or failed with the start of text), unless it was
// cancelled.
func (r Records) Finished(ctx context.Context, sk events.SessionKey, id string, failed bool, text string) {
	if _, err := r.Tasks.Update(ctx, sk, id, func(t *events.TaskRecord) bool {
		if t.State == events.TaskCancelled {
			return false
		}
		t.State, t.Error = events.TaskDone, ""
		if failed {
			t.State, t.Error = events.TaskFailed, truncate(text, 500)
		}
		return true
	}); err != nil {
		r.Log.Warn("task record", "task", id, "err", err)
	}
}

// WatchCancel calls cancel when the task's record becomes cancelled, until ctx ends; the
// returned func stops watching (and waits for the watch to end).
func (r Records) WatchCancel(ctx context.Context, sk events.SessionKey, id string, cancel func()) func() {
	wctx, stop := context.WithCancel(ctx)
	watcher, err := r.Tasks.Watch(wctx, sk, id)
	if err != nil {
		stop()
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-wctx.Done():
				return
			case t, ok := <-watcher:
				if !ok {
					return
				}
				if t.State == events.TaskCancelled {
					cancel()
					return
				}
			}
		}
	}()
	return func() { stop(); <-done }
}

// truncate cuts s to n runes, marking the cut.
func truncate(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
