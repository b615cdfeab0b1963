package turn

import (
	"fmt"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/approvals"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/execpolicy"
	"github.com/agentbus/agentbus/pkg/models"
	"github.com/agentbus/agentbus/pkg/sandbox"
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
		r, err := a.resetSession()
		if err != nil {
			return err
		}
		reply = r
	case "models":
		reply = a.w.modelsReport()
	case "health":
		reply = a.w.healthReport()
	case "help":
		reply = helpText
	case "approve":
		reply = a.approve(c, from)
	case "tasks":
		reply = a.tasksCommand(c, from) // commands_tasks.go
	case "tree": // commands_tree.go
		r, err := a.treeCommand(c, from, pt)
		if err != nil {
			return err
		}
		reply = r
	case "compact": // commands_compact.go
		r, err := a.compactionCommand(c, from, pt)
		if err != nil {
			return err
		}
		reply = r
	default:
		r, ok, err := a.sessionCommand(c, from, pt.msg)
		switch {
		case err != nil:
			return err
		case ok:
			reply = r
		default:
			reply = "Unknown command /" + c.Name + ". /help lists the commands."
		}
	}
	a.replyText(pt, id, reply)
	return a.advance(seq, nil)
}

// helpText answers /help.
const helpText = `Commands:
/new, /clear, /reset: start a new conversation (chat history is kept)
/cancel: stop the running turn
/status: this session: model, concurrency, turns, context size
/model [name]: show or switch this chat's model (masters, trusted)
/queue [policy]: show or set how messages during a turn are handled: parallel, queue, steer, interrupt, collect
/usage: tokens and cost of this conversation
/context: what the model sees next turn, how full the window is, compactions so far
/compact [instructions]: summarize the older part of the conversation now (masters, trusted)
/tree, /tree N: the conversation's points; continue from point N (masters, trusted)
/whoami: who the bot takes you for
/tools [filter]: the tools you may use here
/mcp, /bindings: MCP servers, ai.agents bindings (masters, trusted)
/models, /health: providers and models, worker health
/steer <text>, /followup <text>: add to the running turn (masters)
/approve [once|always|rule …|list|revoke …]: approve bash commands (masters, private chat)
/tasks, /tasks cancel <id>: reminders, scheduled jobs and background tasks of this chat`

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
	if arg := strings.TrimSpace(c.Raw); arg == "" || arg == "once" {
		return a.approveOnce(from)
	}
	cmd, err := execpolicy.ParseApproveCommand(strings.TrimSpace("/approve " + c.Raw))
	if err != nil {
		return scrubForUser(err.Error())
	}
	pending := false
	if cmd.Kind == execpolicy.ApproveAlways {
		if pending, err = a.w.approvals.HasPending(a.ctx, a.sk.Platform, a.sk.Bot); err != nil {
			return err.Error()
		}
	}
	var reply string
	err = a.w.approvals.Update(a.ctx, a.sk.Platform, a.sk.Bot, func(ap *execpolicy.Approvals) (bool, error) {
		r, changed, err := ap.Apply(cmd, execpolicy.ApplyContext{Now: time.Now(), By: from.ID, PendingBash: pending})
		reply = r
		return changed, err
	})
	if err != nil {
		return scrubForUser(err.Error())
	}
	return reply
}

// approveOnce is "/approve" (or "/approve once"): the newest command waiting for the owner on
// this endpoint may run once, in the chat that asked for it.
func (a *actor) approveOnce(from events.Sender) string {
	r, err := a.w.approvals.ApproveOnce(a.ctx, a.sk.Platform, a.sk.Bot, from.ID)
	if err != nil {
		return err.Error()
	}
	where := "this chat"
	if r.Session != a.sk.String() {
		where = r.Session
	}
	return fmt.Sprintf("Approved once: `%s` (%s). It runs when the conversation in %s continues (e.g. answer \"yes\" there) within %s. "+
		"For good: /approve rule <regex> or /approve always.", r.Line, strings.Join(r.Commands, "; "), where, approvals.PendingWindow)
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
	if l := sandbox.HealthLine(); l != "" { // the bash sandbox of a tool worker in this process
		b.WriteString("\n" + l)
	}
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
