package turn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/compaction"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
)

// compactionCommand answers /compact [instructions] and /context.
//
// /compact runs on the actor's goroutine: the session's later inbox events wait for it (turns
// already running go on and commit after the summary, their messages come after its anchor).
// It is for masters and trusted senders (seed); ingest refuses others already, this check
// holds for commands published by other means.
//
// The error is set only when the actor is going away (lease lost, worker stopping): then
// nothing is answered and the command stays at the cursor for the next owner.
func (a *actor) compactionCommand(c events.Command, from events.Sender, pt *pendingTurn) (string, error) {
	reply := a.compactionReply(c, from, pt)
	if err := a.ctx.Err(); err != nil {
		return "", err
	}
	return reply, nil
}

func (a *actor) compactionReply(c events.Command, from events.Sender, pt *pendingTurn) string {
	sess, err := a.w.sessions.Current(a.ctx, a.sk)
	if err != nil {
		return "⚠️ " + err.Error()
	}
	sid, err := sess.ID()
	if err != nil {
		return "⚠️ " + err.Error()
	}
	model, err := a.w.pickModel(pt.msg, nil)
	if err != nil {
		return "⚠️ " + err.Error()
	}
	if c.Name == "context" {
		return a.contextReport(sid, model)
	}
	if !from.HasRole(events.RoleMaster) && !from.HasRole(events.RoleTrusted) {
		return "/compact is for the bot's masters and trusted users only."
	}
	ctx, cancel := context.WithTimeout(a.ctx, time.Duration(a.w.opts.AI.Agent.TimeoutMs)*time.Millisecond)
	defer cancel()
	out, err := a.compactContext(ctx, sid, model, a.w.compactionSettings(model), c.Raw, "command", nil)
	switch {
	case errors.Is(err, compaction.ErrNothingToCompact):
		return "Nothing to compact yet: the conversation is within what is kept verbatim."
	case err != nil:
		return "⚠️ Compaction failed, the conversation is unchanged: " + err.Error()
	}
	restored := ""
	if out.restored > 0 {
		restored = fmt.Sprintf(" (%s the summary had dropped were put back)", count(out.restored, "identifier"))
	}
	return fmt.Sprintf("Compacted: %s summarized, %s kept verbatim; context ~%d → ~%d tokens%s. Compactions in this conversation: %d.",
		count(out.covered, "message"), count(out.kept, "message"), out.before, out.after, restored, out.count)
}

// contextReport is /context: how full the context is and how often it was compacted.
func (a *actor) contextReport(sid events.SessionID, model *llm.Model) string {
	loaded, err := a.loadContext(a.ctx, sid)
	if err != nil {
		return "⚠️ " + err.Error()
	}
	s := a.w.compactionSettings(model)
	tokens := contextTokens(loaded, "", nil)
	var b strings.Builder
	fmt.Fprintf(&b, "Context of %s: %s", sid, count(len(loaded.Messages), "message"))
	if s.ContextWindow > 0 {
		fmt.Fprintf(&b, ", ~%d of %d tokens (%d%%) for %s/%s", tokens, s.ContextWindow, tokens*100/s.ContextWindow, model.Provider, model.ID)
	} else {
		fmt.Fprintf(&b, ", ~%d tokens", tokens)
	}
	switch {
	case !s.Enabled:
		b.WriteString(". Compaction is off.")
	case loaded.Summary == nil:
		b.WriteString(". Compactions: 0.")
	default:
		fmt.Fprintf(&b, ". Compactions: %d (the latest at %s, %s summarized so far, by %s).", loaded.Summary.Count,
			loaded.Summary.Time.UTC().Format(time.RFC3339), count(loaded.Summary.Covered, "message"), loaded.Summary.Model)
	}
	if s.Enabled && s.Auto && s.Threshold() > 0 {
		fmt.Fprintf(&b, " Automatic compaction above ~%d tokens.", s.Threshold())
	}
	return b.String()
}
