package turn

import (
	"fmt"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/execpolicy"
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
		reply = "Commands: /reset (new conversation), /models, /health, /cancel, /steer <text> and /followup <text> (masters), /approve … (masters, private chat)."
	case "approve":
		reply = a.approve(c, from)
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
	var b strings.Builder
	b.WriteString("Providers and models:\n")
	for _, alias := range w.opts.Models.Aliases() {
		p, _ := w.opts.Models.Provider(alias)
		fmt.Fprintf(&b, "- %s (%s)", alias, p.API)
		if ms, err := w.opts.Models.Models(alias); err == nil && len(ms) > 0 {
			ids := make([]string, 0, len(ms))
			for _, m := range ms {
				ids = append(ids, m.ID)
			}
			fmt.Fprintf(&b, ": %s", strings.Join(ids, ", "))
		}
		b.WriteByte('\n')
	}
	b.WriteString("Bindings:\n")
	for _, name := range sortedKeys(w.opts.AI.Agents) {
		ag := w.opts.AI.Agents[name]
		fmt.Fprintf(&b, "- %s → %s/%s", name, ag.Provider, ag.Model)
		if len(ag.Match.HasMedia) > 0 {
			fmt.Fprintf(&b, " (media: %s, priority %d)", strings.Join(ag.Match.HasMedia, ","), ag.Priority)
		}
		b.WriteByte('\n')
	}
	if len(w.opts.AI.Agents) == 0 {
		if m, err := w.defaultModel(); err == nil {
			fmt.Fprintf(&b, "- default → %s/%s\n", m.Provider, m.ID)
		}
	}
	return strings.TrimSpace(b.String())
}

func (w *Worker) healthReport() string {
	w.mu.Lock()
	actors := len(w.actors)
	w.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "ok — worker %s, %d active sessions here, %d tools served", w.opts.ID, actors, w.tools.count())
	if w.opts.Health != nil {
		for _, l := range w.opts.Health.HealthLines() {
			b.WriteString("\n")
			b.WriteString(l)
		}
	}
	return b.String()
}
