package tasks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/natsutil"
)

// errUnasked marks a background task that its parent turn did not ask for: no such turn in the
// session, no call of the queuing tool under the task's call id, or arguments that differ.
// Such a task is dead-lettered and never run.
var errUnasked = errors.New("tasks: background task not asked for by its turn")

// taskOrigin is who a background task runs as, derived from the turn worker's own records
// and never from the task: tool workers queue tasks (spawn_task, run_deferred_task) and may
// publish on task.>, so a task's claims (its caller's roles, the chat its result goes to) are
// worth nothing by themselves. The task names the session, the turn and the bus id of the
// tool call that queued it; the turn's log (AGENT_EVENTS, which only turn workers write) must
// hold an assistant message of that turn calling tool under that bus id (bus ids as the turn
// worker's noteCalls gives them), whose arguments check accepts; and the caller is the sender
// of the inbox event that started the turn (SESSION_IN, where only ingest, which sets the
// roles, and turn workers publish), as the turn itself ran with. Errors wrap errUnasked when
// the task was not asked for; other errors are the bus's (try again later).
func (r *Runner) taskOrigin(ctx context.Context, sk events.SessionKey, turn, callID, tool string, check func(args map[string]any) error) (events.Caller, error) {
	if turn == "" || callID == "" {
		return events.Caller{}, fmt.Errorf("%w: it names no turn or tool call", errUnasked)
	}
	if err := sk.Validate(); err != nil {
		return events.Caller{}, fmt.Errorf("%w: %w", errUnasked, err)
	}
	started, messages, err := r.cfg.Turns.ReadTurn(ctx, sk, turn)
	if err != nil {
		return events.Caller{}, err
	}
	if started == nil {
		return events.Caller{}, fmt.Errorf("%w: session %s has no turn %s", errUnasked, sk, turn)
	}
	seen := map[string]int{}
	found := false
	for i := range messages {
		m := &messages[i]
		if m.Role != llm.RoleAssistant {
			continue
		}
		for _, c := range m.ToolCalls() {
			seen[c.ID]++
			id := turn + "-" + c.ID
			if n := seen[c.ID]; n > 1 {
				id += "~" + strconv.Itoa(n)
			}
			if id != callID {
				continue
			}
			if c.Name != tool {
				return events.Caller{}, fmt.Errorf("%w: call %s of turn %s is %s, not %s", errUnasked, callID, turn, c.Name, tool)
			}
			if err := check(c.Arguments); err != nil {
				return events.Caller{}, fmt.Errorf("%w: call %s of turn %s: %w", errUnasked, callID, turn, err)
			}
			found = true
		}
	}
	if !found {
		return events.Caller{}, fmt.Errorf("%w: turn %s made no call %s", errUnasked, turn, callID)
	}
	raw, err := natsutil.GetMsg(ctx, r.cfg.JS, r.cfg.Inbox, natsutil.MsgQuery{Seq: started.Trigger.Seq})
	if err != nil {
		return events.Caller{}, fmt.Errorf("read the trigger of turn %s: %w", turn, err)
	}
	ev, err := events.Decode(raw.Data)
	if err != nil {
		return events.Caller{}, fmt.Errorf("%w: the trigger of turn %s does not decode: %w", errUnasked, turn, err)
	}
	caller := events.Caller{Platform: sk.Platform, Bot: sk.Bot, Scope: sk.Scope}
	// The sender the turn ran as (the turn worker's actor.inboxMessage and pendingFrom); any
	// other trigger (a schedule, a subagent result) ran without roles.
	switch e := ev.(type) {
	case *events.Event[events.UserMessage]:
		caller.SenderID, caller.Roles = e.Data.Message.Sender.ID, e.Data.Message.Sender.Roles
	case *events.Event[events.Steer]:
		caller.SenderID, caller.Roles = e.Data.Sender.ID, e.Data.Sender.Roles
		if e.Data.Message != nil {
			caller.SenderID, caller.Roles = e.Data.Message.Sender.ID, e.Data.Message.Sender.Roles
		}
	case *events.Event[events.FollowUp]:
		caller.SenderID, caller.Roles = e.Data.Sender.ID, e.Data.Sender.Roles
		if e.Data.Message != nil {
			caller.SenderID, caller.Roles = e.Data.Message.Sender.ID, e.Data.Message.Sender.Roles
		}
	case *events.Event[events.Scheduled]:
		caller.SenderID = e.Data.CreatedBy.ID
	default:
		caller.SenderID = "system"
	}
	return caller, nil
}

// checkSpawnArgs accepts a spawn_task call whose task is the end of prompt (tasks queued
// before presets moved to the system prompt put the preset's text before the task) and, when
// the task names a preset, whose agent argument names the same one.
func checkSpawnArgs(prompt, agent string) func(map[string]any) error {
	return func(args map[string]any) error {
		task, _ := args["task"].(string)
		if task == "" || !strings.HasSuffix(prompt, task) {
			return errors.New("the task's prompt is not what the call asked")
		}
		if asked, _ := args["agent"].(string); agent != "" && asked != agent {
			return fmt.Errorf("the call asked for agent preset %q, the task runs %q", asked, agent)
		}
		return nil
	}
}

// checkDeferredArgs accepts a run_deferred_task call of the same tool with the same arguments.
func checkDeferredArgs(call events.DeferredToolCall) func(map[string]any) error {
	return func(args map[string]any) error {
		if name, _ := args["tool"].(string); name != call.Tool {
			return fmt.Errorf("the call asked for tool %q, the task runs %q", name, call.Tool)
		}
		asked, _ := args["args"].(map[string]any)
		if !sameJSON(asked, call.Args) {
			return errors.New("the task's arguments are not what the call asked")
		}
		return nil
	}
}

// sameJSON compares two argument objects as JSON (an absent object equals an empty one).
func sameJSON(a, b map[string]any) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}
