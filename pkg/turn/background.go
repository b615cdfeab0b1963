package turn

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/chunk"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/identity"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/loop"
	"github.com/agentbus/agentbus/pkg/schedule"
	"github.com/agentbus/agentbus/pkg/tasks"
	"github.com/agentbus/agentbus/pkg/toolbus"
)

// Background work of the turn worker (docs/tasks.md): the deferred-task runner, the heartbeat
// and recurring-job schedules from ai.scheduler, and how the session actor handles what they
// deliver (inbox.scheduled, inbox.task_result).

// HeartbeatPrompt is the seed's fixed heartbeat prompt; the file's content follows it.
const HeartbeatPrompt = "[heartbeat] This is your periodic check of HEARTBEAT.md, the task list below. " +
	"Do what is due now, using your tools, and report briefly in this chat. " +
	"If nothing needs attention right now, answer exactly " + HeartbeatOK + " and nothing else."

// HeartbeatOK is the answer of a heartbeat with nothing to do; it is not posted to the chat.
const HeartbeatOK = "HEARTBEAT_OK"

// DefaultTaskTimeout bounds a background task when ai.agent.taskTimeoutMs is not set.
const DefaultTaskTimeout = tasks.DefaultTimeout

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

func (tr taskRunner) taskTimeout() time.Duration {
	w := tr.w
	if ms := w.opts.AI.Agent.TaskTimeoutMs; ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return DefaultTaskTimeout
}

// startBackground installs the configured schedules and starts the deferred-task runner.
func (tr taskRunner) startBackground(ctx context.Context) error {
	w := tr.w
	if err := w.runner.installSchedules(ctx); err != nil {
		// Not fatal: the bus may be busy; the schedules are installed by the next start or
		// by another replica. Say so loudly.
		w.log.Error("install ai.scheduler schedules", "err", err)
	}
	return w.runner.startDeferred(ctx)
}

// configuredSchedule is one schedule ai.scheduler asks for.
type configuredSchedule struct {
	sk           events.SessionKey
	id, pattern  string
	tz           string
	ev           events.Scheduled
	heartbeatCfg bool
}

// wantedSchedules turns ai.scheduler into schedules.
func wantedSchedules(s config.Scheduler) ([]configuredSchedule, error) {
	var out []configuredSchedule
	operator := events.Sender{ID: "scheduler", Name: "ai.scheduler"}
	if h := s.Heartbeat; h.Session != "" {
		sk, err := events.ParseSessionKey(h.Session)
		if err != nil {
			return nil, fmt.Errorf("ai.scheduler.heartbeat.session: %w", err)
		}
		out = append(out, configuredSchedule{sk: sk, id: events.ScheduleID(events.ScheduleHeartbeat, ""),
			pattern: schedule.Every(h.HeartbeatEvery()), heartbeatCfg: true,
			ev: events.Scheduled{Text: "check HEARTBEAT.md", CreatedBy: operator, Kind: events.ScheduleHeartbeat}})
	}
	for _, j := range s.Jobs {
		sk, err := events.ParseSessionKey(j.Session)
		if err != nil {
			return nil, fmt.Errorf("ai.scheduler.jobs %s: %w", j.ID, err)
		}
		pattern := j.Cron
		if j.Every != "" {
			d, err := time.ParseDuration(j.Every)
			if err != nil {
				return nil, fmt.Errorf("ai.scheduler.jobs %s: every: %w", j.ID, err)
			}
			pattern = schedule.Every(d)
		}
		out = append(out, configuredSchedule{sk: sk, id: events.ScheduleID(events.ScheduleJob, j.ID), pattern: pattern, tz: j.TimeZone,
			ev: events.Scheduled{Text: j.Prompt, CreatedBy: operator, Kind: events.ScheduleJob}})
	}
	return out, nil
}

// installSchedules makes the heartbeat and job schedules match ai.scheduler: missing or
// changed ones are written (once, whatever the number of replicas starting), and heartbeat and
// job schedules no longer configured are removed. An unchanged "@every" schedule is left
// alone so that restarts do not shift its period.
func (tr taskRunner) installSchedules(ctx context.Context) error {
	w := tr.w
	want, err := wantedSchedules(w.opts.AI.Scheduler)
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	var errs []error
	for _, c := range want {
		keep[events.ScheduleSubject(c.sk, c.id)] = true
		wrote, err := w.bg.scheds.Ensure(ctx, c.sk, c.id, c.pattern, c.tz, c.ev)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if wrote {
			w.log.Info("schedule installed", "session", c.sk.String(), "id", c.id, "schedule", c.pattern)
		}
	}
	all, err := w.bg.scheds.ListAll(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, p := range all {
		kind := events.ScheduleKindOf(p.ID)
		if (kind == events.ScheduleHeartbeat || kind == events.ScheduleJob) && !keep[events.ScheduleSubject(p.Session, p.ID)] {
			if _, err := w.bg.scheds.Cancel(ctx, p.Session, p.ID); err != nil && !errors.Is(err, schedule.ErrNotFound) {
				errs = append(errs, err)
			} else {
				w.log.Info("schedule removed (no longer in ai.scheduler)", "session", p.Session.String(), "id", p.ID)
			}
		}
	}
	return errors.Join(errs...)
}

// heartbeatFile is the HEARTBEAT.md the heartbeat reads, in the agent's workspace (the file
// tools edit the same file).
func (tr taskRunner) heartbeatFile() string {
	w := tr.w
	name := w.opts.AI.Scheduler.Heartbeat.File
	if name == "" {
		name = "HEARTBEAT.md"
	}
	if filepath.IsAbs(name) {
		return name
	}
	return filepath.Join(w.opts.AI.Agent.Workspace, name)
}

// maxHeartbeatBytes bounds what of HEARTBEAT.md goes into the prompt.
const maxHeartbeatBytes = 16 << 10

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
		body, err := os.ReadFile(a.w.runner.heartbeatFile())
		if len(body) > maxHeartbeatBytes {
			body = body[:maxHeartbeatBytes]
		}
		if err != nil || strings.TrimSpace(string(body)) == "" {
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				a.log.Warn("heartbeat: read HEARTBEAT.md", "file", a.w.runner.heartbeatFile(), "err", err)
			}
			return a.advance(seq, nil) // not recorded: an idle heartbeat every period would crowd /tasks
		}
		prompt := a.w.opts.AI.Scheduler.Heartbeat.Prompt
		if prompt == "" {
			prompt = HeartbeatPrompt
		}
		text = prompt + "\n\n## HEARTBEAT.md\n" + strings.TrimSpace(string(body))
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
	if w.opts.AI.Agent.ToolSearch {
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

// labelOr is label, or the start of text.
func labelOr(label, text string) string { return tasks.LabelOr(label, text) }

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

// taskRunner runs the background work queued on TASKS for this replica: subagent tasks
// (subagent.go), deferred tool calls (deferred.go), and the schedules and heartbeat
// (schedule.Scheduler). It holds nothing of its own: its goroutines are the Worker's.
type taskRunner struct{ w *Worker }
