package turn

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/schedule"
)

// maxRecentTasks bounds the finished tasks /tasks lists.
const maxRecentTasks = 10

// tasksCommand answers /tasks (this chat's pending schedules, pending and running tasks, and
// recent ones, with their ids) and /tasks cancel <id> (the owner of the task or a master).
func (cs commands) tasksCommand(c events.Command, from events.Sender) string {
	args := c.Args
	if len(args) == 0 {
		args = strings.Fields(c.Raw)
	}
	if len(args) > 0 && args[0] == "cancel" {
		if len(args) < 2 {
			return "Usage: /tasks cancel <id> (ids are listed by /tasks)."
		}
		return cs.cancelTask(args[1], from)
	}
	if len(args) > 0 {
		return "Usage: /tasks, or /tasks cancel <id>."
	}
	return cs.tasksReport()
}

func (cs commands) tasksReport() string {
	a := cs.a
	var b strings.Builder
	now := time.Now()
	pending, err := a.w.bg.scheds.List(a.ctx, a.sk)
	if err != nil {
		return "Could not read the schedules: " + err.Error()
	}
	recs, err := a.w.bg.tasks.List(a.ctx, a.sk)
	if err != nil {
		return "Could not read the tasks: " + err.Error()
	}
	if len(pending) > 0 {
		b.WriteString("Scheduled:")
		for _, p := range pending {
			fmt.Fprintf(&b, "\n- %s [%s] %s", p.ID, kindOf(p), strings.TrimPrefix(schedule.Describe(p), p.ID+" "))
		}
	}
	var active, recent []events.TaskRecord
	for _, r := range recs {
		if r.ID == schedule.FollowUpID {
			continue // the reminder itself is listed with the schedules; its firings are records of their own
		}
		if r.Terminal() {
			if len(recent) < maxRecentTasks {
				recent = append(recent, r)
			}
		} else {
			active = append(active, r)
		}
	}
	line := func(r events.TaskRecord) {
		fmt.Fprintf(&b, "\n- %s [%s] %s — %s", r.ID, r.Kind, r.Label, r.State)
		if r.Attempts > 1 {
			fmt.Fprintf(&b, " (attempt %d)", r.Attempts)
		}
		fmt.Fprintf(&b, ", %s ago", now.Sub(time.UnixMilli(r.UpdatedAt)).Round(time.Second))
		if r.Error != "" && r.State == events.TaskFailed {
			fmt.Fprintf(&b, ": %s", truncate(r.Error, 80))
		}
	}
	if len(active) > 0 {
		sep(&b)
		b.WriteString("Pending and running:")
		for _, r := range active {
			line(r)
		}
	}
	if len(recent) > 0 {
		sep(&b)
		b.WriteString("Recent:")
		for _, r := range recent {
			line(r)
		}
	}
	if b.Len() == 0 {
		return "No background tasks in this chat."
	}
	b.WriteString("\n\nCancel one with /tasks cancel <id>.")
	return b.String()
}

func sep(b *strings.Builder) {
	if b.Len() > 0 {
		b.WriteString("\n\n")
	}
}

func truncate(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

func kindOf(p schedule.Pending) string {
	if p.Event.Kind != "" {
		return p.Event.Kind
	}
	return events.ScheduleKindOf(p.ID)
}

// cancelTask cancels a pending schedule of this chat or a background task by id. Reminders
// and tasks may be cancelled by whoever created them and by masters; heartbeat and job
// schedules (operator configuration) by masters only.
func (cs commands) cancelTask(id string, from events.Sender) string {
	a := cs.a
	master := from.HasRole(events.RoleMaster)
	if p, err := a.w.bg.scheds.Get(a.ctx, a.sk, id); err == nil {
		kind := kindOf(*p)
		if kind == events.ScheduleFollowUp && p.Event.CreatedBy.ID != from.ID && !master {
			return "Only whoever set the reminder, or a master, may cancel it."
		}
		if kind != events.ScheduleFollowUp && !master {
			return "Only masters may cancel a " + kind + " schedule."
		}
		if _, err := a.w.bg.scheds.Cancel(a.ctx, a.sk, id); err != nil {
			return "Could not cancel " + id + ": " + err.Error()
		}
		if id == schedule.FollowUpID {
			_, _ = a.w.bg.tasks.Update(a.ctx, a.sk, id, func(r *events.TaskRecord) bool {
				if r.State != events.TaskPending {
					return false
				}
				r.State, r.Error = events.TaskCancelled, "cancelled by "+from.ID
				return true
			})
		}
		reply := "Cancelled " + schedule.Describe(*p) + "."
		if kind != events.ScheduleFollowUp {
			reply += " It is installed again when a turn worker starts unless it is removed from ai.scheduler."
		}
		return reply
	} else if !errors.Is(err, schedule.ErrNotFound) {
		return "Could not read the schedules: " + err.Error()
	}
	rec, _, err := a.w.bg.tasks.Get(a.ctx, a.sk, id)
	if errors.Is(err, schedule.ErrNotFound) && master {
		rec, err = a.w.bg.tasks.Find(a.ctx, id) // masters may cancel a task of another chat
	}
	if errors.Is(err, schedule.ErrNotFound) {
		return "No task or schedule " + id + " here; /tasks lists them."
	}
	if err != nil {
		return "Could not read task " + id + ": " + err.Error()
	}
	if rec.Owner != from.ID && !master {
		return "Only whoever started task " + id + ", or a master, may cancel it."
	}
	if rec.Terminal() {
		return "Task " + id + " is already " + rec.State + "."
	}
	var was string
	if _, err := a.w.bg.tasks.Update(a.ctx, rec.Session, rec.ID, func(r *events.TaskRecord) bool {
		if r.Terminal() {
			was = r.State
			return false
		}
		r.State, r.Error = events.TaskCancelled, "cancelled by "+from.ID
		return true
	}); err != nil {
		return "Could not cancel task " + id + ": " + err.Error()
	}
	if was != "" {
		return "Task " + id + " is already " + was + "."
	}
	return "Cancelled task " + id + " (" + rec.Label + "); its result will not be posted."
}
