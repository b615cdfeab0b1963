package schedule

import (
	"context"
	"errors"
	"fmt"
	"math"
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
// message schedule (id "followup") that fires an inbox.scheduled into the session. Creating a
// reminder replaces the pending one. Served by tool workers.
func FollowUpTool(s *Schedules) tools.Tool {
	return tools.MustNew(FollowUpToolName,
		"Schedule a follow-up reminder in this chat: action create with delay_minutes (or at) and message; list shows the pending one; cancel removes it. A new reminder replaces the pending one.",
		func(ctx context.Context, c tools.Call, a followUpArgs) (tools.Result, error) {
			sk, err := events.ParseSessionKey(c.Env.SessionKey)
			if err != nil {
				return tools.ErrorResult("schedule_followup needs a chat session: %v", err), nil
			}
			id := events.ScheduleID(events.ScheduleFollowUp, "")
			switch strings.ToLower(strings.TrimSpace(a.Action)) {
			case "create", "":
				return createFollowUp(ctx, s, sk, id, c, a, time.Now())
			case "list":
				p, err := s.Get(ctx, sk, id)
				if errors.Is(err, ErrNotFound) {
					return tools.TextResult("No pending reminder in this chat."), nil
				}
				if err != nil {
					return tools.Result{}, err
				}
				return tools.TextResult("Pending reminder " + Describe(*p) + "."), nil
			case "cancel":
				p, err := s.Cancel(ctx, sk, id)
				if errors.Is(err, ErrNotFound) {
					return tools.TextResult("There was no pending reminder to cancel."), nil
				}
				if err != nil {
					return tools.Result{}, err
				}
				return tools.TextResult("Cancelled the reminder " + Describe(*p) + "."), nil
			}
			return tools.ErrorResult("schedule_followup: unknown action %q (want create, list or cancel)", a.Action), nil
		}, tools.WithKeywords(FollowUpKeywords...), tools.WithSource("builtin"))
}

func createFollowUp(ctx context.Context, s *Schedules, sk events.SessionKey, id string, c tools.Call, a followUpArgs, now time.Time) (tools.Result, error) {
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
	ev := events.Scheduled{Text: a.Message, Kind: events.ScheduleFollowUp,
		CreatedBy: events.Sender{ID: c.Env.SenderID, Roles: c.Env.SenderRoles}}
	if ev.CreatedBy.ID == "" {
		ev.CreatedBy.ID = "unknown"
	}
	old, err := s.Put(ctx, sk, id, At(at), "", ev)
	if errors.Is(err, ErrBadSchedule) {
		return tools.ErrorResult("schedule_followup: %v", err), nil
	}
	if err != nil {
		return tools.Result{}, fmt.Errorf("schedule_followup: %w", err)
	}
	text := fmt.Sprintf("Reminder set for %s (in %s): %q.", at.UTC().Format(time.RFC3339), at.Sub(now).Round(time.Second), a.Message)
	if old != nil {
		text += " It replaces the pending reminder " + Describe(*old) + "."
	}
	return tools.TextResult(text), nil
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
