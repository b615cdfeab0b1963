package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/tools"
)

// FollowUpToolName is the seed's reminder tool.
const FollowUpToolName = "schedule_followup"

// FollowUpKeywords offer schedule_followup when a message contains one (seed: 触发关键词).
var FollowUpKeywords = []string{"提醒", "定时", "过一会", "跟进", "别忘", "分钟后", "小时后", "remind", "reminder", "follow up", "later"}

// MaxFollowUpAhead bounds how far ahead a reminder may be set.
const MaxFollowUpAhead = 366 * 24 * time.Hour

// followUpArgs are schedule_followup's parameters.
type followUpArgs struct {
	Action       string  `json:"action" jsonschema:"create, list or cancel"`
	DelayMinutes float64 `json:"delay_minutes,omitempty" jsonschema:"create: minutes from now (fractions allowed)"`
	At           string  `json:"at,omitempty" jsonschema:"create: an absolute time instead, RFC 3339 with offset, e.g. 2026-12-02T09:00:00+08:00"`
	Message      string  `json:"message,omitempty" jsonschema:"create: what to remind the user of, in their language"`
}

// FollowUpTool is schedule_followup: it keeps one pending reminder per session as a JetStream
// message schedule (id "followup") that fires an inbox.scheduled into the session, and a
// record of it in KV tasks (id "followup", state pending, DueAt). Creating a reminder replaces
// the pending one. Served by tool workers, which may use KV tasks but neither read the inbox
// stream nor write schedules: the tool answers list and "it replaces ..." from the record, and
// asks for the schedule in its result (FollowUpRequest in Details), which the turn worker that
// made the call writes for its own session and caller (ApplyFollowUp). So a tool worker can
// make the bot speak later only in a chat whose turn asked it to.
func FollowUpTool(tasks *Tasks) tools.Tool {
	return tools.MustNew(FollowUpToolName,
		"Schedule a follow-up reminder in this chat: action create with delay_minutes (or at) and message; list shows the pending one; cancel removes it. A new reminder replaces the pending one; only whoever set a reminder, or a master, may replace or cancel it.",
		func(ctx context.Context, c tools.Call, a followUpArgs) (tools.Result, error) {
			sk, err := events.ParseSessionKey(c.Env.SessionKey)
			if err != nil {
				return tools.ErrorResult("schedule_followup needs a chat session: %v", err), nil
			}
			now := time.Now()
			pending, err := pendingFollowUp(ctx, tasks, sk, now)
			if err != nil {
				return tools.Result{}, fmt.Errorf("schedule_followup: %w", err)
			}
			action := strings.ToLower(strings.TrimSpace(a.Action))
			if (action == "create" || action == "" || action == "cancel") && pending != nil && !mayChange(*pending, c.Env) {
				// The chat's reminder belongs to whoever set it: another member (of a group) may
				// neither cancel nor replace it, as /tasks cancel refuses too (issue 36).
				return tools.ErrorResult("schedule_followup: the pending reminder %s was set by %s; only they or a master may change or cancel it",
					describeRecord(*pending), pending.Owner), nil
			}
			switch action {
			case "create", "":
				return createFollowUp(ctx, tasks, sk, c, a, now, pending)
			case "list":
				if pending == nil {
					return tools.TextResult("No pending reminder in this chat."), nil
				}
				return tools.TextResult("Pending reminder " + describeRecord(*pending) + "."), nil
			case "cancel":
				if pending == nil {
					return tools.TextResult("There was no pending reminder to cancel."), nil
				}
				if _, err := tasks.Update(ctx, sk, FollowUpID, func(r *events.TaskRecord) bool {
					r.State, r.Error = events.TaskCancelled, "cancelled by "+c.Env.SenderID
					return true
				}); err != nil {
					return tools.Result{}, err
				}
				return withRequest(tools.TextResult("Cancelled the reminder "+describeRecord(*pending)+"."), FollowUpRequest{Action: "cancel"}), nil
			}
			return tools.ErrorResult("schedule_followup: unknown action %q (want create, list or cancel)", a.Action), nil
		}, tools.WithKeywords(FollowUpKeywords...), tools.WithSource("builtin"))
}

// mayChange reports whether the call's sender may replace or cancel the reminder r: whoever
// set it, or a master. Roles come from the call's Env, which the turn worker fills from the
// message ingest attributed (never from the model's arguments).
func mayChange(r events.TaskRecord, env tools.Env) bool {
	return slices.Contains(env.SenderRoles, tools.RoleMaster) || env.SenderID != "" && env.SenderID == r.Owner
}

// FollowUpID is the schedule and task id of a session's reminder.
var FollowUpID = events.ScheduleID(events.ScheduleFollowUp, "")

// pendingFollowUp is the session's reminder record while it is pending and not yet due.
func pendingFollowUp(ctx context.Context, tasks *Tasks, sk events.SessionKey, now time.Time) (*events.TaskRecord, error) {
	r, _, err := tasks.Get(ctx, sk, FollowUpID)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if r.State != events.TaskPending || r.DueAt < now.UnixMilli() {
		return nil, nil
	}
	return &r, nil
}

func describeRecord(r events.TaskRecord) string {
	return fmt.Sprintf("%s at %s: %q", r.ID, time.UnixMilli(r.DueAt).UTC().Format(time.RFC3339), r.Label)
}

// FollowUpRequest is what schedule_followup asks of the turn worker that called it, in its
// result's Details: "create" (At, Message) or "cancel" the session's reminder.
type FollowUpRequest struct {
	Action  string `json:"followup"`
	At      int64  `json:"at,omitempty"` // Unix ms
	Message string `json:"message,omitempty"`
}

// MaxFollowUpText bounds a reminder's text.
const MaxFollowUpText = 4000

func withRequest(r tools.Result, req FollowUpRequest) tools.Result {
	r.Details, _ = json.Marshal(req)
	return r
}

// ApplyFollowUp writes the reminder schedule_followup's result asks for (details, a
// FollowUpRequest) into session k, as set by `by`: the caller of the turn that made the call,
// known to the turn worker, never a claim of the tool's. It reports whether details asked for
// anything. A create whose time has passed (a resumed turn applying an old result) is
// ErrBadSchedule.
func ApplyFollowUp(ctx context.Context, s *Schedules, k events.SessionKey, details json.RawMessage, by events.Sender) (bool, error) {
	var req FollowUpRequest
	if len(details) == 0 || json.Unmarshal(details, &req) != nil || req.Action == "" {
		return false, nil
	}
	switch req.Action {
	case "cancel":
		return true, s.Clear(ctx, k, FollowUpID)
	case "create":
		at := time.UnixMilli(req.At)
		switch {
		case strings.TrimSpace(req.Message) == "":
			return true, fmt.Errorf("%w: a reminder needs a message", ErrBadSchedule)
		case len(req.Message) > MaxFollowUpText:
			return true, fmt.Errorf("%w: a reminder's message is over %d bytes", ErrBadSchedule, MaxFollowUpText)
		case at.Sub(time.Now()) > MaxFollowUpAhead+time.Minute:
			return true, fmt.Errorf("%w: more than a year ahead", ErrBadSchedule)
		}
		if by.ID == "" {
			by.ID = "unknown"
		}
		// Roles are not kept: a fired schedule vouches for nobody (see onScheduled).
		ev := events.Scheduled{Text: req.Message, Kind: events.ScheduleFollowUp, CreatedBy: events.Sender{ID: by.ID, Name: by.Name}}
		return true, s.Set(ctx, k, FollowUpID, At(at), "", ev)
	}
	return true, fmt.Errorf("%w: unknown follow-up action %q", ErrBadSchedule, req.Action)
}

func createFollowUp(ctx context.Context, tasks *Tasks, sk events.SessionKey, c tools.Call, a followUpArgs, now time.Time, old *events.TaskRecord) (tools.Result, error) {
	if strings.TrimSpace(a.Message) == "" {
		return tools.ErrorResult("schedule_followup: message is required to create a reminder"), nil
	}
	var at time.Time
	switch {
	case a.At != "":
		t, err := time.Parse(time.RFC3339, a.At)
		if err != nil {
			return tools.ErrorResult("schedule_followup: at %q is not an RFC 3339 time: %v", a.At, err), nil
		}
		at = t
	case a.DelayMinutes > 0 && !math.IsInf(a.DelayMinutes, 0):
		at = now.Add(time.Duration(a.DelayMinutes * float64(time.Minute)))
	default:
		return tools.ErrorResult("schedule_followup: give delay_minutes > 0 or at"), nil
	}
	// The server fires at whole seconds: round up so that a reminder never fires early.
	if at.Truncate(time.Second).Before(at) {
		at = at.Truncate(time.Second).Add(time.Second)
	}
	switch {
	case !at.After(now):
		return tools.ErrorResult("schedule_followup: %s is not in the future", at.UTC().Format(time.RFC3339)), nil
	case at.Sub(now) > MaxFollowUpAhead:
		return tools.ErrorResult("schedule_followup: %s is more than a year ahead", at.UTC().Format(time.RFC3339)), nil
	}
	if len(a.Message) > MaxFollowUpText {
		return tools.ErrorResult("schedule_followup: the message is over %d bytes", MaxFollowUpText), nil
	}
	if err := CheckPattern(At(at), now); err != nil {
		return tools.ErrorResult("schedule_followup: %v", err), nil
	}
	owner := c.Env.SenderID
	if owner == "" {
		owner = "unknown"
	}
	if err := tasks.Put(ctx, events.TaskRecord{ID: FollowUpID, Kind: events.ScheduleFollowUp, Session: sk, Label: a.Message,
		State: events.TaskPending, Owner: owner, DueAt: at.UnixMilli()}); err != nil {
		return tools.Result{}, fmt.Errorf("schedule_followup: %w", err)
	}
	text := fmt.Sprintf("Reminder set for %s (in %s): %q.", at.UTC().Format(time.RFC3339), at.Sub(now).Round(time.Second), a.Message)
	if old != nil {
		text += " It replaces the pending reminder " + describeRecord(*old) + "."
	}
	return withRequest(tools.TextResult(text), FollowUpRequest{Action: "create", At: at.UnixMilli(), Message: a.Message}), nil
}

// Describe is a one-line description of a pending schedule for the chat.
func Describe(p Pending) string {
	when := p.Pattern
	if !p.Next.IsZero() {
		when = "at " + p.Next.UTC().Format(time.RFC3339)
	}
	text := p.Event.Text
	if r := []rune(text); len(r) > 60 {
		text = string(r[:60]) + "…"
	}
	return fmt.Sprintf("%s %s: %q", p.ID, when, text)
}
