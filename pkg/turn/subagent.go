package turn

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
func (tr taskRunner) startSubagents(ctx context.Context) error {
	w := tr.w
	cons, err := natsutil.Consumer(ctx, w.js, events.StreamTasks, jetstream.ConsumerConfig{
		Durable: SubagentConsumer, FilterSubject: events.PrefixTask + "." + events.TaskKindSubagent + ".>",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 3, MaxAckPending: 64,
	})
	if err != nil {
		return fmt.Errorf("create consumer %s: %w", SubagentConsumer, err)
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.runner.runSubagent(msg)
		}()
	}, natsutil.FailoverConsume(jetstream.PullMaxMessages(8))...)
	if err != nil {
		return err
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		<-w.ctx.Done()
		cc.Stop()
	}()
	return nil
}

func (tr taskRunner) runSubagent(msg jetstream.Msg) {
	w := tr.w
	var ev events.Event[events.SubagentTask]
	if err := events.Unmarshal(msg.Data(), &ev); err != nil {
		meta, _ := msg.Metadata()
		var seq uint64
		if meta != nil {
			seq = meta.Sequence.Stream
		}
		w.deadLetter(msg.Subject(), seq, msg.Data(), msg.Headers(), "invalid_task", err)
		_ = msg.Term()
		return
	}
	task := ev.Data
	// Who the subagent runs as and where its result goes come from the turn that queued it,
	// not from the task (taskOrigin).
	caller, err := w.runner.taskOrigin(w.ctx, task.Parent, task.ParentTurn, task.ToolCallID, "spawn_task", checkSpawnArgs(task.Prompt, task.Agent))
	if err == nil && task.TaskID != events.EncodeToken(task.ToolCallID) {
		err = fmt.Errorf("%w: task id %s is not its call's", errUnasked, task.TaskID)
	}
	if errors.Is(err, errUnasked) {
		meta, _ := msg.Metadata()
		var seq uint64
		if meta != nil {
			seq = meta.Sequence.Stream
		}
		w.log.Warn("subagent task refused: its turn did not ask for it", "task", task.TaskID, "err", err)
		w.deadLetter(msg.Subject(), seq, msg.Data(), msg.Headers(), "unverified_task", err)
		_ = msg.Term()
		return
	}
	if err != nil {
		if w.ctx.Err() == nil {
			w.log.Warn("subagent task: its turn cannot be read yet", "task", task.TaskID, "err", err)
			_ = msg.NakWithDelay(5 * time.Second)
		}
		return
	}
	task.Caller = caller
	if !w.records.Starting(w.ctx, task.Parent, task.TaskID, events.TaskKindSubagent, task.Prompt, task.Caller.SenderID) {
		_ = msg.Ack() // its result was delivered (or it was cancelled) before: never twice
		return
	}
	w.progress.Add(msg)
	defer w.progress.Remove(msg)
	deadline := time.Now().Add(w.runner.taskTimeout())
	if task.Deadline > 0 {
		deadline = time.UnixMilli(task.Deadline)
	}
	ctx, cancel := context.WithDeadline(w.ctx, deadline)
	defer cancel()
	stopWatch := w.records.WatchCancel(ctx, task.Parent, task.TaskID, cancel)
	text, isErr := w.runner.subagentLoop(ctx, task, ev.Trace)
	stopWatch()
	if w.ctx.Err() != nil {
		return // stopping: the task is redelivered to another worker
	}
	if ctx.Err() == context.DeadlineExceeded {
		text, isErr = fmt.Sprintf("the background task did not finish within its time limit (%s)", w.runner.taskTimeout()), true
	}
	if w.records.Cancelled(w.ctx, task.Parent, task.TaskID) {
		_ = msg.Ack()
		return
	}
	res := events.SubagentResult{TaskID: task.TaskID, ParentTurn: task.ParentTurn, ToolCallID: task.ToolCallID,
		Content: []llm.Content{llm.Text(text)}, IsError: isErr}
	out := events.New(res, events.WithSession(task.Parent.String()), events.WithTrace(ev.Trace), events.WithID("subagent-result-"+task.TaskID))
	m, err := events.NewMsg(events.AgentInSubject(task.Parent), out)
	if err == nil {
		_, err = w.inboxPub.Publish(w.ctx, m)
	}
	if err != nil {
		w.log.Error("subagent result not delivered", "task", task.TaskID, "err", err)
		_ = msg.NakWithDelay(5 * time.Second)
		return
	}
	w.records.Finished(w.ctx, task.Parent, task.TaskID, isErr, text)
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
func (tr taskRunner) subagentLoop(ctx context.Context, task events.SubagentTask, trace string) (string, bool) {
	w := tr.w
	model, err := w.defaultModel()
	if task.Model != "" {
		for _, alias := range w.opts.Models.Aliases() {
			if m, e := w.opts.Models.GetModel(alias, task.Model); e == nil {
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
		allowed = append(slices.Clone(SubagentTools), w.opts.AI.Agent.SubagentTools...)
		if wantsImage(task.Prompt) { // seed: a drawing task gets generate_image first
			allowed = append(allowed, imageTool)
		}
	}
	caller := events.IMMessage{Platform: task.Caller.Platform, Bot: task.Caller.Bot,
		Scene: events.Scene{Type: task.Caller.Scope, ID: task.Parent.Scene}, Sender: events.Sender{ID: task.Caller.SenderID, Roles: task.Caller.Roles}}
	var offered []loop.AgentTool
	for _, e := range w.tools.For(caller) {
		if slices.Contains(allowed, e.Name) {
			offered = append(offered, loop.AgentTool{Tool: llm.Tool{Name: e.Name, Description: e.Description, Parameters: e.Parameters}})
		}
	}
	maxIter := task.MaxIterations
	if maxIter <= 0 {
		maxIter = w.opts.AI.Agent.MaxSubagentIterations
	}
	exec := w.toolc.Executor(toolbus.Call{Scope: toolbus.Scope{SK: task.Parent, Turn: "task-" + task.TaskID, SID: task.Parent.String(), Trace: trace, Caller: task.Caller, Model: model}})
	system := subagentSystem
	if task.SystemPrompt != "" {
		system = task.SystemPrompt + "\n\n" + subagentSystem
	}
	ac := &loop.AgentContext{SystemPrompt: system, Tools: offered}
	cfg := &loop.Config{Model: model, StreamFn: w.opts.StreamFn, GetAPIKey: w.opts.Models.APIKey, Executor: exec,
		MaxIterations: maxIter, ToolExecution: loop.ToolExecutionMode(w.opts.AI.Agent.ToolExecution)}
	cfg.StreamOptions.Secrets = w.opts.Secrets
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
