package tasks

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/loop"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/toolbus"
)

// SubagentConsumer is the durable consumer of TASKS task.subagent.> shared by turn workers.
const SubagentConsumer = "subagents"

// SubagentTools are what a subagent may use (seed: 受限工具集), plus ai.agent.subagentTools.
var SubagentTools = []string{"read_file", "write_file", "edit_file", "list_dir", "glob", "grep", "bash", "web_search", "web_fetch"}

// startSubagents runs background tasks from TASKS: each is a standalone agent loop with the
// restricted tool set, whose tools run on tool workers under the parent's caller (so the exec
// policy, file policy and role gating are the same as in the main conversation). The result
// goes to the parent session's inbox as subagent_result and starts a turn there.
//
// A task is acked when its result is in the inbox; a worker that dies mid-task leaves it to be
// redelivered and run again from the start (a subagent's own steps are not resumable).
func (r *Runner) startSubagents(ctx context.Context) error {
	cons, err := natsutil.Consumer(ctx, r.cfg.JS, events.StreamTasks, jetstream.ConsumerConfig{
		Durable: SubagentConsumer, FilterSubject: events.PrefixTask + "." + events.TaskKindSubagent + ".>",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 3, MaxAckPending: 64,
	})
	if err != nil {
		return fmt.Errorf("create consumer %s: %w", SubagentConsumer, err)
	}
	return r.consume(cons, r.runSubagent)
}

func (r *Runner) runSubagent(msg jetstream.Msg) {
	var ev events.Event[events.SubagentTask]
	if err := events.Unmarshal(msg.Data(), &ev); err != nil {
		r.deadLetter(msg, "invalid_task", err)
		return
	}
	task := ev.Data
	// Who the subagent runs as and where its result goes come from the turn that queued it,
	// not from the task (taskOrigin).
	caller, err := r.taskOrigin(r.ctx, task.Parent, task.ParentTurn, task.ToolCallID, SpawnTaskName, checkSpawnArgs(task.Prompt, task.Agent))
	if err == nil && task.TaskID != events.EncodeToken(task.ToolCallID) {
		err = fmt.Errorf("%w: task id %s is not its call's", errUnasked, task.TaskID)
	}
	if errors.Is(err, errUnasked) {
		r.log.Warn("subagent task refused: its turn did not ask for it", "task", task.TaskID, "err", err)
		r.deadLetter(msg, "unverified_task", err)
		return
	}
	if err != nil {
		if r.ctx.Err() == nil {
			r.log.Warn("subagent task: its turn cannot be read yet", "task", task.TaskID, "err", err)
			_ = msg.NakWithDelay(5 * time.Second)
		}
		return
	}
	task.Caller = caller
	if !r.records.Starting(r.ctx, task.Parent, task.TaskID, events.TaskKindSubagent, task.Prompt, task.Caller.SenderID) {
		_ = msg.Ack() // its result was delivered (or it was cancelled) before: never twice
		return
	}
	r.progress.Add(msg)
	defer r.progress.Remove(msg)
	deadline := time.Now().Add(r.cfg.TaskTimeout)
	if task.Deadline > 0 {
		deadline = time.UnixMilli(task.Deadline)
	}
	ctx, cancel := context.WithDeadline(r.ctx, deadline)
	defer cancel()
	stopWatch := r.records.WatchCancel(ctx, task.Parent, task.TaskID, cancel)
	text, isErr := r.subagentLoop(ctx, task, ev.Trace)
	stopWatch()
	if r.ctx.Err() != nil {
		return // stopping: the task is redelivered to another worker
	}
	if ctx.Err() == context.DeadlineExceeded {
		text, isErr = fmt.Sprintf("the background task did not finish within its time limit (%s)", r.cfg.TaskTimeout), true
	}
	if r.records.Cancelled(r.ctx, task.Parent, task.TaskID) {
		_ = msg.Ack()
		return
	}
	res := events.SubagentResult{TaskID: task.TaskID, ParentTurn: task.ParentTurn, ToolCallID: task.ToolCallID,
		Content: []llm.Content{llm.Text(text)}, IsError: isErr}
	out := events.New(res, events.WithSession(task.Parent.String()), events.WithTrace(ev.Trace), events.WithID("subagent-result-"+task.TaskID))
	m, err := events.NewMsg(events.AgentInSubject(task.Parent), out)
	if err == nil {
		_, err = r.cfg.Publisher.Publish(r.ctx, m)
	}
	if err != nil {
		r.log.Error("subagent result not delivered", "task", task.TaskID, "err", err)
		_ = msg.NakWithDelay(5 * time.Second)
		return
	}
	r.records.Finished(r.ctx, task.Parent, task.TaskID, isErr, text)
	_ = msg.Ack()
}

// subagentSystem is the system prompt of every subagent (after a preset's body, if any).
const subagentSystem = "You are a background worker agent. Complete the task with the tools you have, then answer with a concise report of what you did and found. Nobody can answer questions while you work."

// imageTool is the image generation tool (pkg/imagegen.ToolName).
const imageTool = "generate_image"

// imageWords mark a task that asks for a picture (seed: 任务含「画/生图」等关键词).
var imageWords = []string{"画", "生图", "绘", "图片", "插图", "draw", "paint", "picture", "illustration", "image of", "sketch"}

// wantsImage reports whether a task asks for a picture to be made.
func wantsImage(task string) bool {
	t := strings.ToLower(task)
	for _, k := range imageWords {
		if strings.Contains(t, k) {
			return true
		}
	}
	return false
}

// subagentLoop runs the task and returns its final text.
func (r *Runner) subagentLoop(ctx context.Context, task events.SubagentTask, trace string) (string, bool) {
	model, err := r.cfg.DefaultModel()
	if task.Model != "" {
		for _, alias := range r.cfg.Models.Aliases() {
			if m, e := r.cfg.Models.GetModel(alias, task.Model); e == nil {
				model, err = m, nil
				break
			}
		}
	}
	if err != nil {
		return "subagent has no model: " + err.Error(), true
	}
	allowed := task.Tools
	if len(allowed) == 0 {
		allowed = append(slices.Clone(SubagentTools), r.cfg.SubagentTools...)
		if wantsImage(task.Prompt) { // seed: a drawing task gets generate_image first
			allowed = append(allowed, imageTool)
		}
	}
	caller := events.IMMessage{Platform: task.Caller.Platform, Bot: task.Caller.Bot,
		Scene: events.Scene{Type: task.Caller.Scope, ID: task.Parent.Scene}, Sender: events.Sender{ID: task.Caller.SenderID, Roles: task.Caller.Roles}}
	var offered []loop.AgentTool
	for _, e := range r.cfg.Catalog.For(caller) {
		if slices.Contains(allowed, e.Name) {
			offered = append(offered, loop.AgentTool{Tool: llm.Tool{Name: e.Name, Description: e.Description, Parameters: e.Parameters}})
		}
	}
	maxIter := task.MaxIterations
	if maxIter <= 0 {
		maxIter = r.cfg.MaxSubagentIterations
	}
	exec := r.cfg.Tools.Executor(toolbus.Call{Scope: toolbus.Scope{SK: task.Parent, Turn: "task-" + task.TaskID, SID: task.Parent.String(), Trace: trace, Caller: task.Caller, Model: model}})
	system := subagentSystem
	if task.SystemPrompt != "" {
		system = task.SystemPrompt + "\n\n" + subagentSystem
	}
	ac := &loop.AgentContext{SystemPrompt: system, Tools: offered}
	cfg := &loop.Config{Model: model, StreamFn: r.cfg.StreamFn, GetAPIKey: r.cfg.Models.APIKey, Executor: exec,
		MaxIterations: maxIter, ToolExecution: r.cfg.ToolExecution}
	cfg.StreamOptions.Secrets = r.cfg.Secrets
	msgs, err := loop.Run(ctx, []llm.Message{llm.UserText(task.Prompt, time.Now().UnixMilli())}, ac, cfg, func(loop.Event) {})
	final := lastAssistant(msgs)
	switch {
	case err != nil && !errors.Is(err, loop.ErrMaxIterations):
		return "subagent failed: " + err.Error(), true
	case final == nil:
		return "subagent ended without an answer", true
	case final.StopReason == llm.StopReasonError || final.StopReason == llm.StopReasonAborted:
		return "subagent failed: " + final.ErrorMessage, true
	}
	return final.TextContent(), false
}

// lastAssistant is the last assistant message of ms, or nil.
func lastAssistant(ms []llm.Message) *llm.Message {
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].Role == llm.RoleAssistant {
			return &ms[i]
		}
	}
	return nil
}
