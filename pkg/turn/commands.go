package turn

import (
	"fmt"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/execpolicy"
	"github.com/agentbus/agentbus/pkg/models"
)

// HealthSource adds lines to /health (cost tracking, connected tools, ...).
type HealthSource interface {
	HealthLines() []string
}

// command runs a chat command addressed to the session.
func (a *actor) command(e *events.Event[events.Command], seq uint64) error {
	c := e.Data
	from := c.From()
	pt := &pendingTurn{seq: seq, trace: e.Trace, msg: a.syntheticTarget(from, "")}
	if c.Message != nil {
		pt.msg = *c.Message
	}
	id := fmt.Sprintf("cmd%d", seq)
	var reply string
	switch c.Name {
	case "reset":
		a.abortAll("session reset")
		s, err := a.w.sessions.Archive(a.ctx, a.sk)
		if err != nil {
			return err
		}
		reply = fmt.Sprintf("Session reset: a new conversation starts now (epoch %d). Chat history is kept.", s.Epoch)
	case "models":
		reply = a.w.modelsReport()
	case "health":
		reply = a.w.healthReport()
	case "help":
		reply = "Commands: /reset (new conversation), /models, /health, /cancel, /steer <text> and /followup <text> (masters), /approve … (masters, private chat), /tasks and /tasks cancel <id>."
	case "approve":
		reply = a.approve(c, from)
	case "tasks":
		reply = a.tasksCommand(c, from) // commands_tasks.go
	default:
		reply = "Unknown command /" + c.Name
	}
	a.replyText(pt, id, reply)
	return a.advance(seq, nil)
}

// approve applies an owner /approve command (private chat, master only) to KV approvals.
func (a *actor) approve(c events.Command, from events.Sender) string {
	if !from.HasRole(events.RoleMaster) {
		return "/approve is for the bot's masters only."
	}
	if a.sk.Scope != events.ScopePrivate {
		return "/approve works in a private chat with the bot only."
	}
	if a.w.approvals == nil {
		return "Approvals are not available on this worker."
	}
	cmd, err := execpolicy.ParseApproveCommand(strings.TrimSpace("/approve " + c.Raw))
	if err != nil {
		return err.Error()
	}
	var reply string
	err = a.w.approvals.Update(a.ctx, a.sk.Platform, a.sk.Bot, func(ap *execpolicy.Approvals) (bool, error) {
		r, changed, err := ap.Apply(cmd, execpolicy.ApplyContext{Now: time.Now(), By: from.ID})
		reply = r
		return changed, err
	})
	if err != nil {
		return err.Error()
	}
	return reply
}

func (w *Worker) modelsReport() string {
	if w.opts.ModelsReport != nil {
		return w.opts.ModelsReport()
	}
	return models.Report(w.opts.AI, w.opts.Models, nil, nil)
}

func (w *Worker) healthReport() string {
	w.mu.Lock()
	actors := len(w.actors)
	w.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "ok — worker %s, %s here, %s served", w.opts.ID, count(actors, "active session"), count(w.tools.count(), "tool"))
	if w.opts.Health != nil {
		for _, l := range w.opts.Health.HealthLines() {
			b.WriteString("\n")
			b.WriteString(l)
		}
	}
	return b.String()
}

// count is "1 tool", "2 tools".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
