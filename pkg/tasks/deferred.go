package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/loop"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/toolbus"
)

// DeferredConsumer is the durable consumer of TASKS task.deferred.> shared by turn workers.
const DeferredConsumer = "deferred"

// startDeferred runs deferred tasks from TASKS (task.deferred.>), like subagents: a task is
// acked once its result is in the session's inbox (or it was cancelled); a worker that dies
// mid-task leaves it to be redelivered, and the rerun finds the tool's result in TOOL_RESULTS
// under the same call id instead of running the tool again.
func (r *Runner) startDeferred(ctx context.Context) error {
	cons, err := natsutil.Consumer(ctx, r.cfg.JS, events.StreamTasks, jetstream.ConsumerConfig{
		Durable: DeferredConsumer, FilterSubject: events.PrefixTask + "." + events.TaskKindDeferred + ".>",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: r.cfg.AckWait, MaxDeliver: 20, MaxAckPending: 64,
	})
	if err != nil {
		return fmt.Errorf("create consumer %s: %w", DeferredConsumer, err)
	}
	return r.consume(cons, r.runDeferred)
}

func (r *Runner) runDeferred(msg jetstream.Msg) {
	var ev events.Event[events.DeferredTask]
	if err := events.Unmarshal(msg.Data(), &ev); err != nil {
		r.deadLetter(msg, "invalid_task", err)
		return
	}
	task := ev.Data
	if task.Kind != events.DeferredKindTool {
		r.deadLetter(msg, "unknown_task_kind", fmt.Errorf("deferred task kind %q has no runner", task.Kind))
		return
	}
	if task.Parent == nil {
		r.deadLetter(msg, "invalid_task", errors.New("a tool task names no parent session"))
		return
	}
	sk, id := *task.Parent, task.TaskID
	log := r.log.With("task", id, "session", sk.String())
	// Who the task runs as and where its result goes come from the turn that queued it, not
	// from the task (taskOrigin).
	var call events.DeferredToolCall
	_ = json.Unmarshal(task.Payload, &call)
	caller, err := r.taskOrigin(r.ctx, sk, task.Turn, task.ToolCallID, RunDeferredTaskName, checkDeferredArgs(call))
	if err == nil && id != events.EncodeToken(task.ToolCallID) {
		err = fmt.Errorf("%w: task id %s is not its call's", errUnasked, id)
	}
	if errors.Is(err, errUnasked) {
		log.Warn("deferred task refused: its turn did not ask for it", "err", err)
		r.deadLetter(msg, "unverified_task", err)
		return
	}
	if err != nil {
		if r.ctx.Err() == nil {
			log.Warn("deferred task: its turn cannot be read yet", "err", err)
			_ = msg.NakWithDelay(5 * time.Second)
		}
		return
	}
	task.Caller = &caller
	owner := caller.SenderID
	if !r.records.Starting(r.ctx, sk, id, events.TaskKindDeferred, LabelOr(task.Label, id), owner) {
		_ = msg.Ack() // its result was delivered (or it was cancelled) before: never twice
		return
	}
	r.progress.Add(msg)
	defer r.progress.Remove(msg)
	text, isErr, cancelled := r.deferredCall(sk, id, task, ev.Trace)
	if r.ctx.Err() != nil {
		return // stopping: redelivered to another worker, which finds the tool's result
	}
	if cancelled || r.records.Cancelled(r.ctx, sk, id) {
		log.Info("deferred task cancelled; result not delivered")
		_ = msg.Ack()
		return
	}
	res := events.TaskResult{TaskID: id, Kind: events.DeferredKindTool, Label: task.Label, Content: []llm.Content{llm.Text(text)}, IsError: isErr}
	out := events.New(res, events.WithSession(sk.String()), events.WithTrace(ev.Trace), events.WithID("task-result-"+id))
	m, err := events.NewMsg(events.AgentInSubject(sk), out)
	if err == nil {
		_, err = r.cfg.Publisher.Publish(r.ctx, m)
	}
	if err != nil {
		log.Error("deferred task result not delivered", "err", err)
		_ = msg.NakWithDelay(5 * time.Second)
		return
	}
	r.records.Finished(r.ctx, sk, id, isErr, text)
	_ = msg.Ack()
}

// deferredCall runs the task's tool call on a tool worker within the task's time limit,
// cancelled early when /tasks cancel marks the record. The call id is fixed per task, so a
// rerun after a crash reads the result the first run left instead of calling again.
func (r *Runner) deferredCall(sk events.SessionKey, id string, task events.DeferredTask, trace string) (text string, isErr, cancelled bool) {
	var call events.DeferredToolCall
	if err := json.Unmarshal(task.Payload, &call); err != nil || call.Tool == "" {
		return fmt.Sprintf("the task has no valid tool call (%v)", err), true, false
	}
	deadline := time.Now().Add(r.cfg.TaskTimeout)
	if task.Deadline > 0 {
		deadline = time.UnixMilli(task.Deadline)
	}
	limit := time.Until(deadline).Round(time.Second)
	ctx, cancel := context.WithDeadline(r.ctx, deadline)
	defer cancel()
	var userCancel sync.Once
	var wasCancelled bool
	stopWatch := r.records.WatchCancel(ctx, sk, id, func() { userCancel.Do(func() { wasCancelled = true; cancel() }) })
	defer stopWatch()
	caller := events.Caller{Platform: sk.Platform, Bot: sk.Bot, Scope: sk.Scope}
	if task.Caller != nil {
		caller = *task.Caller
	}
	busID := "task-" + id
	exec := r.cfg.Tools.Executor(toolbus.Call{Resumed: true, BusID: func(string) string { return busID },
		Scope: toolbus.Scope{SK: sk, Turn: busID, SID: sk.String(), Trace: trace, Caller: caller}})
	args := call.Args
	if args == nil {
		args = map[string]any{}
	}
	if _, ok := r.cfg.Catalog.Entry(call.Tool); !ok {
		_ = r.cfg.Catalog.Refresh(ctx)
		if _, ok := r.cfg.Catalog.Entry(call.Tool); !ok {
			return "no tool worker serves " + call.Tool + " right now", true, false
		}
	}
	res, err := exec.Execute(ctx, loop.ToolCallRequest{ID: "run", Name: call.Tool, Args: args})
	userCancel.Do(func() {}) // from here on a cancel no longer changes the outcome
	switch {
	case wasCancelled:
		return "", false, true
	case errors.Is(err, context.DeadlineExceeded) || (err == nil && ctx.Err() != nil && r.ctx.Err() == nil):
		return fmt.Sprintf("%s did not finish within the task's time limit (%s)", call.Tool, limit), true, false
	case err != nil:
		return call.Tool + ": " + err.Error(), true, false
	}
	text = strings.TrimSpace(llm.TextContentOf(res.Content))
	if res.IsError && time.Now().After(deadline.Add(-time.Second)) {
		// The tool worker gave up at the same deadline a moment before we did.
		return fmt.Sprintf("%s did not finish within the task's time limit (%s): %s", call.Tool, limit, text), true, false
	}
	return text, res.IsError, false
}
