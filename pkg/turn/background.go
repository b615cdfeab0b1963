package turn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/chunk"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/identity"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/loop"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/schedule"
	"github.com/agentbus/agentbus/pkg/tasks"
	"github.com/agentbus/agentbus/pkg/toolbus"
)

// Background work of the turn worker (docs/tasks.md). pkg/tasks runs it (the subagent and
// deferred-task runners, the ai.scheduler schedules: TaskRunner); this file is how the session
// actor handles what it delivers (inbox.scheduled, inbox.task_result), the tool selection of
// ai.agent.toolSearch, and the runner's wiring.

// HeartbeatOK is the answer of a heartbeat with nothing to do; it is not posted to the chat.
const HeartbeatOK = tasks.HeartbeatOK

// background holds the worker's handles on schedules and task records.
type background struct {
	scheds *schedule.Schedules
	tasks  *schedule.Tasks
}

func newBackground(ctx context.Context, js jetstream.JetStream) (*background, error) {
	s, err := schedule.Open(ctx, js)
	if err != nil {
		return nil, err
	}
	t, err := schedule.OpenTasks(ctx, js)
	if err != nil {
		return nil, err
	}
	return &background{scheds: s, tasks: t}, nil
}

// onScheduled handles a schedule that fired: a reminder or a job starts a turn; the heartbeat
// starts one only when HEARTBEAT.md has content. Each firing that runs a turn is recorded in
// KV tasks (recent tasks in /tasks) under the id <schedule id>@<inbox seq>.
func (tev taskEvents) onScheduled(e *events.Event[events.Scheduled], seq uint64) error {
	a := tev.a
	s := e.Data
	kind := s.Kind
	if kind == "" {
		kind = events.ScheduleFollowUp
	}
	var text string
	switch kind {
	case events.ScheduleHeartbeat:
		var err error
		if text, err = a.w.runner.HeartbeatInput(); err != nil {
			a.log.Warn("heartbeat: read HEARTBEAT.md", "file", a.w.runner.HeartbeatFile(), "err", err)
		}
		if text == "" {
			return a.advance(seq, nil) // not recorded: an idle heartbeat every period would crowd /tasks
		}
	case events.ScheduleJob:
		text = "[scheduled job " + strings.TrimPrefix(s.ScheduleID, events.ScheduleJob+"-") + "] " + identity.SanitizeText(s.Text)
	default: // a reminder's text is a user's words, set through the model
		text = "[scheduled reminder] It is time for the reminder the user asked for. Tell them now, in their language: " + identity.SanitizeText(s.Text)
	}
	a.te.recordFiring(s, seq, kind, events.TaskDone, "")
	if kind == events.ScheduleFollowUp && s.ScheduleID == schedule.FollowUpID {
		// The reminder record (pending, written by schedule_followup) is done now.
		if _, err := a.w.bg.tasks.Update(a.ctx, a.sk, s.ScheduleID, func(r *events.TaskRecord) bool {
			if r.State != events.TaskPending || r.DueAt > time.Now().Add(time.Minute).UnixMilli() {
				return false // a newer reminder
			}
			r.State = events.TaskDone
			return true
		}); err != nil && !errors.Is(err, schedule.ErrNotFound) {
			a.log.Warn("reminder record", "err", err)
		}
	}
	m := llm.UserText(text, time.Now().UnixMilli())
	// No roles from a schedule: a schedule keeps none (schedule.ApplyFollowUp), and one that
	// claims some was not written by agentbus. The turn runs with user-level tools as the one
	// who set it.
	sender := events.Sender{ID: s.CreatedBy.ID, Name: s.CreatedBy.Name}
	pt := &pendingTurn{seq: seq, input: []llm.Message{m}, msg: a.out.syntheticTarget(sender, s.ReplyTo), trace: e.Trace,
		heartbeat: kind == events.ScheduleHeartbeat, parent: a.parent}
	return a.schedule(pt, "parallel")
}

// recordFiring notes a schedule firing in KV tasks; a failure to record is logged only.
func (tev taskEvents) recordFiring(s events.Scheduled, seq uint64, kind, state, note string) {
	a := tev.a
	label := s.Text
	if r := []rune(label); len(r) > 60 {
		label = string(r[:60]) + "…"
	}
	rec := events.TaskRecord{ID: fmt.Sprintf("%s@%d", s.ScheduleID, seq), Kind: kind, Session: a.sk, Label: label,
		State: state, Owner: s.CreatedBy.ID, Error: note}
	if _, err := a.w.bg.tasks.Create(a.ctx, rec); err != nil {
		a.log.Warn("record schedule firing", "schedule", s.ScheduleID, "err", err)
	}
}

// onTaskResult posts a deferred task's result to the chat as a message of its own (out ids
// "task-<id>-<part>": a redelivered result is dropped by egress) and adds it to the context so
// that the conversation knows about it. No model call.
func (tev taskEvents) onTaskResult(e *events.Event[events.TaskResult], seq uint64) error {
	a := tev.a
	r := e.Data
	text := strings.TrimSpace(llm.TextContentOf(r.Content))
	label := r.Label
	if label == "" {
		label = r.TaskID
	}
	if r.IsError {
		text = "⚠️ Background task " + label + " failed: " + text
	} else if text == "" {
		text = "Background task " + label + " finished without output."
	}
	pt := &pendingTurn{seq: seq, trace: e.Trace, msg: a.out.syntheticTarget(events.Sender{ID: "system"}, "")}
	a.out.replyText(pt, "task-"+events.EncodeToken(r.TaskID), chatText(text, r.IsError))
	note := llm.UserText("[background task "+label+" (id "+r.TaskID+") finished; its result was posted to the chat]\n"+text, time.Now().UnixMilli())
	if err := a.cx.appendContext(seq, []llm.Message{note}); err != nil {
		return err
	}
	return a.advance(seq, nil)
}

// Orchestration tools: what the main agent keeps with ai.agent.toolSearch (seed).
var orchestrationTools = tasks.OrchestrationTools

// orchestrationNote tells the model how to work with toolSearch.
const orchestrationNote = "## Tools on workers\nYour own tools are only orchestration tools. To do anything else, call " +
	tasks.ToolSearchName + " with what you need, then " + tasks.RunDeferredTaskName + " with the tool name and its arguments: " +
	"it runs in the background and its result is posted to this chat as a separate message, so tell the user it is on its way."

// triggered reports the tools a message's keywords offer whatever the selection says (seed:
// schedule_followup's 触发关键词).
func triggered(text string) []string {
	low := strings.ToLower(text)
	for _, k := range schedule.FollowUpKeywords {
		if strings.Contains(low, k) {
			return []string{schedule.FollowUpToolName}
		}
	}
	return nil
}

// backgroundSelection applies ai.agent.toolSearch and the trigger keywords to the selection:
// with toolSearch only the orchestration tools (and triggered ones) stay; otherwise triggered
// tools are added when the selection left them out. It returns the extra system prompt text.
func (w *Worker) backgroundSelection(v *toolbus.View, text string, entries []events.ToolEntry, agentTools []loop.AgentTool) ([]events.ToolEntry, []loop.AgentTool, string) {
	keep := triggered(text)
	if w.opts.ToolSearch {
		keep = append(keep, orchestrationTools...)
		var e2 []events.ToolEntry
		var a2 []loop.AgentTool
		for _, name := range keep {
			if i, ok := v.Index[name]; ok && !slices.ContainsFunc(e2, func(e events.ToolEntry) bool { return e.Name == name }) {
				e2 = append(e2, v.Entries[i])
				a2 = append(a2, v.Agent[i])
			}
		}
		return e2, a2, orchestrationNote
	}
	for _, name := range keep {
		i, ok := v.Index[name]
		if !ok || slices.ContainsFunc(entries, func(e events.ToolEntry) bool { return e.Name == name }) {
			continue
		}
		entries = append(slices.Clip(entries), v.Entries[i])
		agentTools = append(slices.Clip(agentTools), v.Agent[i])
	}
	return entries, agentTools, ""
}

// chatText is what of a task's result goes to the chat: a result with images (generate_image
// answers with media links and a note for the model) is posted as just its images; anything
// else as it is.
func chatText(text string, isErr bool) string {
	if isErr {
		return text
	}
	var imgs []string
	for _, p := range chunk.SplitImages(text) {
		if p.ImageURL != "" {
			imgs = append(imgs, "!["+p.Alt+"]("+p.ImageURL+")")
		}
	}
	if len(imgs) == 0 {
		return text
	}
	return strings.Join(imgs, "\n")
}

// taskEvents handles the background-task events that reach a session's inbox (a schedule
// firing, a task's result) for its actor's goroutine.
type taskEvents struct{ a *actor }

// TaskRunner runs the background work queued on TASKS for this replica (a *tasks.Runner):
// subagent tasks, deferred tool calls, and the ai.scheduler schedules. The Worker starts it
// with its own lifetime and in-progress acks (Start), and asks it what a heartbeat that fired
// should run.
type TaskRunner interface {
	// Start installs the schedules and starts the consumers; they run until ctx ends, their
	// goroutines counted in wg.
	Start(startCtx, ctx context.Context, wg *sync.WaitGroup, progress *natsutil.InProgress) error
	// HeartbeatInput is the heartbeat's prompt with HEARTBEAT.md, "" when the file is
	// missing or blank; HeartbeatFile names the file (for logs).
	HeartbeatInput() (string, error)
	HeartbeatFile() string
}

var _ TaskRunner = (*tasks.Runner)(nil)

// newTaskRunner builds the replica's task runner on the Worker's parts (called by New once
// they are open).
func newTaskRunner(w *Worker) (*tasks.Runner, error) {
	return tasks.NewRunner(tasks.RunnerConfig{Options: w.opts.Tasks, Worker: w.opts.ID, JS: w.js,
		Inbox: w.inbox, Publisher: w.inboxPub, Schedules: w.bg.scheds, Tasks: w.bg.tasks, Turns: taskTurns{w},
		Catalog: w.tools, Tools: w.toolc, Models: w.opts.Models, DefaultModel: w.defaultModel,
		StreamFn: w.opts.StreamFn, Secrets: w.opts.Secrets, AckWait: w.opts.AckWait, DeadLetter: w.deadLetter, Log: w.log})
}

// taskTurns reads turns back for the task runner, which checks each task against the turn
// that queued it (tasks.Turns).
type taskTurns struct{ w *Worker }

func (t taskTurns) ReadTurn(ctx context.Context, sk events.SessionKey, turn string) (*events.TurnStarted, []llm.Message, error) {
	tl, err := t.w.readTurn(ctx, sk, turn)
	if err != nil {
		return nil, nil, err
	}
	return tl.started, tl.messages, nil
}
