package tasks_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
	"github.com/agentbus/agentbus/pkg/schedule"
	"github.com/agentbus/agentbus/pkg/tasks"
)

// A task runs once: Starting says go until its record is terminal, Finished records the end,
// and a cancellation reaches a running task through WatchCancel and keeps it from being
// recorded as done.
func TestRecords(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := natstest.New(t, natstest.WithMemoryStorage())
	st, err := schedule.OpenTasks(ctx, ns.JS)
	if err != nil {
		t.Fatal(err)
	}
	r := tasks.Records{Tasks: st, Worker: "tw-1", Log: slog.New(slog.DiscardHandler)}
	sk := events.SessionKey{Platform: "webhook", Bot: "b", Scope: "private", Scene: "u1"}

	if !r.Starting(ctx, sk, "t1", events.TaskKindSubagent, "look something up", "u1") {
		t.Fatal("a new task may not start")
	}
	rec, _, err := st.Get(ctx, sk, "t1")
	if err != nil || rec.State != events.TaskRunning || rec.Worker != "tw-1" || rec.Attempts != 1 {
		t.Fatalf("record after Starting: %+v (%v)", rec, err)
	}
	r.Finished(ctx, sk, "t1", false, "found it")
	if r.Starting(ctx, sk, "t1", events.TaskKindSubagent, "look something up", "u1") {
		t.Fatal("a finished task starts again")
	}

	if !r.Starting(ctx, sk, "t2", events.TaskKindDeferred, "draw", "u1") {
		t.Fatal("a new task may not start")
	}
	cancelled := make(chan struct{})
	stop := r.WatchCancel(ctx, sk, "t2", func() { close(cancelled) })
	defer stop()
	if _, err := st.Update(ctx, sk, "t2", func(t *events.TaskRecord) bool { t.State = events.TaskCancelled; return true }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cancelled:
	case <-ctx.Done():
		t.Fatal("the cancellation never reached the running task")
	}
	if !r.Cancelled(ctx, sk, "t2") {
		t.Fatal("Cancelled: want true")
	}
	r.Finished(ctx, sk, "t2", true, "too late")
	if rec, _, _ := st.Get(ctx, sk, "t2"); rec.State != events.TaskCancelled {
		t.Fatalf("a cancelled task was recorded as %s", rec.State)
	}
}
