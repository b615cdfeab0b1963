package turn

import (
	"errors"
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

// commands runs the slash commands of one session's actor (events.Command): the reports, the
// session settings, approvals, /tasks, /tree and /compact. It holds nothing of its own; the
// actor's goroutine calls it (actor.handle), so it may use the actor's goroutine-only state.
type commands struct{ a *actor }

// command runs a chat command addressed to the session.
func (cs commands) command(e *events.Event[events.Command], seq uint64) error {
	a := cs.a
	c := e.Data
	from := c.From()
	pt := &pendingTurn{seq: seq, trace: e.Trace, msg: a.out.syntheticTarget(from, "")}
	if c.Message != nil {
		pt.msg = *c.Message
	}
	id := fmt.Sprintf("cmd%d", seq)
	var reply string
	switch c.Name {
	case "reset":
		r, err := cs.resetSession()
		if err != nil {
			return err
		}
		reply = r
	case "models":
		reply = cs.modelsReport()
	case "health":
		reply = cs.healthReport()
	case "help":
		reply = helpText
	case "approve":
		reply = cs.approve(c, from)
	case "tasks":
		reply = cs.tasksCommand(c, from) // commands_tasks.go
	case "tree": // commands_tree.go
		r, err := cs.treeCommand(c, from, pt)
		if err != nil {
			return err
		}
		reply = r
	case "compact": // commands_compact.go
		r, err := cs.compactionCommand(c, from, pt)
		if err != nil {
			return err
		}
		reply = r
	default:
		r, ok, err := cs.sessionCommand(c, from, pt.msg)
		switch {
		case err != nil:
			return err
		case ok:
			reply = r
		default:
			reply = "Unknown command /" + c.Name + ". /help lists the commands."
		}
	}
	a.out.replyText(pt, id, reply)
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
/tools [filter] [page]: the tools you may use here
/cmd [filter] [page]: the commands, one per line
/endpoints [filter] [page]: the IM endpoints (platform/bot) and their adapters' state (masters, trusted)
/mcp, /bindings: MCP servers, ai.agents bindings (masters, trusted)
/models, /health: providers and models, worker health
/steer <text>, /followup <text>: add to the running turn (masters)
/approve [id]: let a waiting bash command of this chat (or the one with that id) run once (masters)
/approve always|rule …|list|revoke …: approve bash commands for good (masters, private chat)
/tasks, /tasks cancel <id>: reminders, scheduled jobs and background tasks of this chat`

// approve applies an owner /approve command (master only) to KV approvals. "/approve",
// "/approve once" and "/approve [once] <id>" answer one pending request and work in any chat;
// the rest change the endpoint's approvals for good and work in a private chat only.
func (cs commands) approve(c events.Command, from events.Sender) string {
	a := cs.a
	if !from.HasRole(events.RoleMaster) {
		return "/approve is for the bot's masters only."
	}
	if a.w.approvals == nil {
		return "Approvals are not available on this worker."
	}
	if id, ok := approveOnceArg(c.Raw); ok {
		return cs.approveOnce(from, id)
	}
	if a.sk.Scope != events.ScopePrivate {
		return "/approve " + strings.TrimSpace(c.Raw) + " works in a private chat with the bot only (here: /approve or /approve <id>)."
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
	if cmd.Kind == execpolicy.ApproveList {
		if w := cs.waitingText(""); w != "" {
			reply += "\n" + w
		}
	}
	return reply
}

// approveOnceArg recognises "/approve", "/approve once", "/approve <id>" and
// "/approve once <id>" (an id is hex digits, as approvals.Request.ID), returning the id.
func approveOnceArg(raw string) (string, bool) {
	f := strings.Fields(raw)
	if len(f) > 0 && f[0] == "once" {
		f = f[1:]
	}
	switch {
	case len(f) == 0:
		return "", true
	case len(f) == 1 && isRequestID(f[0]):
		return f[0], true
	}
	return "", false
}

// isRequestID: 4 to 8 hex digits (a request id or a prefix of one). No /approve keyword is one.
func isRequestID(s string) bool {
	if len(s) < 4 || len(s) > 8 {
		return false
	}
	for _, r := range strings.ToLower(s) {
		if !strings.ContainsRune("0123456789abcdef", r) {
			return false
		}
	}
	return true
}

// approveOnce is "/approve [once] [id]": without an id the newest command waiting in this chat
// may run once; another chat's command only by its id, and the answer names the command and
// the chat, so the owner never lets a command of a chat they did not look at run by accident.
func (cs commands) approveOnce(from events.Sender, id string) string {
	a := cs.a
	here := a.sk.String()
	r, err := a.w.approvals.ApproveOnce(a.ctx, a.sk.Platform, a.sk.Bot, from.ID, here, id)
	switch {
	case errors.Is(err, approvals.ErrNothingPending):
		msg := "No bash command of this chat is waiting for approval (requests lapse after " + approvals.PendingWindow.String() + ")."
		if w := cs.waitingText(here); w != "" {
			msg += "\n" + w
		}
		return msg
	case errors.Is(err, approvals.ErrUnknownRequest):
		msg := scrubForUser(err.Error())
		if w := cs.waitingText(""); w != "" {
			msg += "\n" + w
		}
		return msg
	case err != nil:
		return scrubForUser(err.Error())
	}
	where := "this chat"
	if r.Session != here {
		where = chatName(r.Session)
	}
	by := ""
	if r.Sender != "" {
		by = ", asked by " + r.Sender
	}
	return fmt.Sprintf("Approved once [%s]: `%s` (%s) in %s%s. It runs when the conversation there continues (e.g. answer \"yes\" there) within %s. "+
		"For good: /approve rule <regex> or /approve always.", r.ID, r.Line, strings.Join(r.Commands, "; "), where, by, approvals.PendingWindow)
}

// waitingText lists the endpoint's requests waiting for the owner outside chat except (all
// when except is ""), with what approves each: "" when there are none.
func (cs commands) waitingText(except string) string {
	a := cs.a
	p, _, err := a.w.approvals.LoadPending(a.ctx, a.sk.Platform, a.sk.Bot)
	if err != nil {
		return ""
	}
	var b strings.Builder
	for _, r := range p.Waiting() {
		if r.Session == except {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("Waiting for approval (/approve <id> lets one run once in its chat):")
		}
		fmt.Fprintf(&b, "\n- %s: `%s` in %s", r.ID, r.Line, chatName(r.Session))
		if r.Sender != "" {
			fmt.Fprintf(&b, ", asked by %s", r.Sender)
		}
		fmt.Fprintf(&b, ", %s ago", time.Since(time.UnixMilli(r.At)).Round(time.Second))
	}
	return b.String()
}

// chatName describes a session key for the owner: "group g1 (webhook:b1:group:g1)".
func chatName(session string) string {
	sk, err := events.ParseSessionKey(session)
	if err != nil {
		return session
	}
	return fmt.Sprintf("%s %s (%s)", sk.Scope, sk.Scene, session)
}

func (cs commands) modelsReport() string {
	w := cs.a.w
	if w.opts.ModelsReport != nil {
		return w.opts.ModelsReport()
	}
	return models.Report(w.opts.AI, w.opts.Models, nil, nil)
}

func (cs commands) healthReport() string {
	w := cs.a.w
	actors := w.own.Running()
	var b strings.Builder
	fmt.Fprintf(&b, "ok — worker %s, %s here, %s served", w.opts.ID, count(actors, "active session"), count(w.tools.Count(), "tool"))
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
