package turn

import (
	"context"
	"errors"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/loop"
	"github.com/agentbus/agentbus/pkg/schedule"
	"github.com/agentbus/agentbus/pkg/toolbus"
)

// ErrToolTimeout is the error result of a call no tool worker answered in time.
var ErrToolTimeout = toolbus.ErrToolTimeout

// toolClient is what turns and background tasks need of the tool-call protocol
// (toolbus.Client): an executor per turn or task.
type toolClient interface {
	Executor(call toolbus.Call) *toolbus.Executor
}

var _ toolClient = (*toolbus.Client)(nil)

// executor returns the bus executor of a turn (pkg/toolbus).
func (t *turnRun) executor() *toolbus.Executor {
	m := t.msg
	// The requests carry what the turn has not recorded in AGENT_EVENTS (records.go carryStep);
	// a request about to be withdrawn gets it recorded first.
	step := func() []byte {
		t.mu.Lock()
		defer t.mu.Unlock()
		return t.carried.step
	}
	withdrawing := func(ctx context.Context) error { return storeCarried(ctx, t) }
	return t.a.w.toolc.Executor(toolbus.Call{Resumed: t.resumed, Flush: t.flush, Step: step, Withdrawing: withdrawing,
		Subscribed: t.a.resultSub != nil, Fresh: t.fresh && !t.resumed, BusID: t.busID,
		Scope: toolbus.Scope{SK: t.a.sk, Turn: t.id, SID: t.sidStr, Trace: t.trace,
			Caller: events.Caller{Platform: m.Platform, Bot: m.Bot, Scope: t.a.sk.Scope, SenderID: m.Sender.ID, Roles: m.Sender.Roles},
			Model:  t.model}})
}

// afterTool does what a tool's result asks of the turn worker itself, for the session and
// caller of the call's scope (never ones the result names): schedule_followup's reminder,
// which tool workers may not write (schedule.ApplyFollowUp). A reminder that cannot be written
// turns the result into an error the model sees. It is the toolbus.Client's After hook.
func (w *Worker) afterTool(ctx context.Context, sc toolbus.Scope, resumed bool, call loop.ToolCallRequest, res loop.ToolResult) loop.ToolResult {
	if call.Name != schedule.FollowUpToolName || res.IsError || w.bg == nil {
		return res
	}
	asked, err := schedule.ApplyFollowUp(ctx, w.bg.scheds, sc.SK, res.Details, events.Sender{ID: sc.Caller.SenderID})
	switch {
	case !asked:
		return res
	case errors.Is(err, schedule.ErrBadSchedule) && resumed:
		return res // a resumed turn's old reminder that has fired meanwhile
	case err != nil:
		w.log.Warn("reminder not scheduled", "session", sc.SK.String(), "turn", sc.Turn, "err", err)
		return loop.ToolResult{Content: []llm.Content{llm.Text("schedule_followup: the reminder could not be scheduled: " + err.Error())}, IsError: true}
	}
	return res
}
