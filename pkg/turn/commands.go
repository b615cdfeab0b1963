package turn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/approvals"
	"github.com/agentbus/agentbus/pkg/command"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/execpolicy"
	"github.com/agentbus/agentbus/pkg/llm"
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
	reply := "Unknown command /" + c.Name + ". /help lists the commands."
	cmd, ok := command.Lookup(c.Name)
	switch {
	case !ok:
	case !cmd.Access.Allows(a.sk.Scope, from):
		// Ingest refuses these before they reach the inbox; a command published straight
		// onto agent.in (docs/events.md) is held to the same table here.
		reply = cmd.Access.Refusal(c.Name)
	default:
		r, ran, err := cmd.Run(a.ctx, commandSession{cs: cs, pt: pt}, c)
		if err != nil {
			return err
		}
		if ran {
			reply = r
		}
	}
	a.out.replyText(pt, id, reply)
	return a.advance(seq, nil)
}

// commandSession is the session as pkg/command's handlers see it, for one command event: pt
// is the pending turn its reply answers (/tree and /compact also act on it). Each method
// answers the command of its name; access was checked by ingest (command.Access).
type commandSession struct {
	cs commands
	pt *pendingTurn
}

var _ command.Session = commandSession{}

func (s commandSession) Reset(context.Context, events.Command) (string, error) {
	return s.cs.resetSession(s.pt.seq)
}

func (s commandSession) Model(_ context.Context, c events.Command) (string, error) {
	return s.cs.modelCommand(strings.TrimSpace(c.Raw))
}

func (s commandSession) Queue(_ context.Context, c events.Command) (string, error) {
	return s.cs.queueCommand(strings.TrimSpace(c.Raw))
}

func (s commandSession) Compact(_ context.Context, c events.Command) (string, error) {
	return s.cs.compactionCommand(c, c.From(), s.pt) // commands_compact.go
}

func (s commandSession) Tree(_ context.Context, c events.Command) (string, error) {
	return s.cs.treeCommand(c, c.From(), s.pt) // commands_tree.go
}

func (s commandSession) Status(context.Context, events.Command) (string, error) {
	return s.cs.statusReport()
}

func (s commandSession) Usage(context.Context, events.Command) (string, error) {
	return s.cs.usageReport()
}

func (s commandSession) Context(context.Context, events.Command) (string, error) {
	return s.cs.contextReport()
}

func (s commandSession) Whoami(_ context.Context, c events.Command) (string, error) {
	return whoami(c.From(), s.cs.a.sk), nil
}

func (s commandSession) Tools(_ context.Context, c events.Command) (string, error) {
	return s.cs.toolsReport(s.pt.msg, strings.TrimSpace(c.Raw)), nil
}

func (s commandSession) Cmd(_ context.Context, c events.Command) (string, error) {
	return cmdReport(c.Raw), nil // commands_introspect.go
}

func (s commandSession) Endpoints(ctx context.Context, c events.Command) (string, error) {
	return s.cs.endpointsReport(ctx, c.Raw), nil
}

func (s commandSession) MCP(context.Context, events.Command) (string, error) {
	return s.cs.mcpReport(s.pt.msg), nil
}

func (s commandSession) Bindings(context.Context, events.Command) (string, error) {
	return s.cs.bindingsReport(), nil
}

func (s commandSession) Models(context.Context, events.Command) (string, error) {
	return s.cs.modelsReport(), nil
}

func (s commandSession) Health(context.Context, events.Command) (string, error) {
	return s.cs.healthReport(), nil
}

func (s commandSession) Help(context.Context, events.Command) (string, error) {
	return command.HelpText(), nil
}

func (s commandSession) Approve(_ context.Context, c events.Command) (string, error) {
	return s.cs.approve(c, c.From()), nil
}

func (s commandSession) Tasks(_ context.Context, c events.Command) (string, error) {
	return s.cs.tasksCommand(c, c.From()), nil // commands_tasks.go
}

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
	return registryReport(w.opts.Models)
}

// registryReport is /models without Options.ModelsReport: each provider of reg with the
// models it knows.
func registryReport(reg *llm.Registry) string {
	var b strings.Builder
	b.WriteString("Providers:")
	for _, alias := range reg.Aliases() {
		ms, _ := reg.Models(alias)
		ids := make([]string, 0, len(ms))
		for _, m := range ms {
			ids = append(ids, m.ID)
		}
		if len(ids) == 0 {
			ids = append(ids, "no models known yet")
		}
		fmt.Fprintf(&b, "\n- %s: %s", alias, strings.Join(ids, ", "))
	}
	return b.String()
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
