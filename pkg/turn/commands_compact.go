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
	"github.com/agentbus/agentbus/pkg/store"
)

// compactionCommand answers /compact [instructions].
//
// /compact runs on the actor's goroutine: the session's later inbox events wait for it (turns
// already running go on and commit after the summary, their messages come after its anchor).
// It is for masters and trusted senders (seed); ingest refuses others already, this check
// holds for commands published by other means.
//
// The error is set only when the actor is going away (lease lost, worker stopping): then
// nothing is answered and the command stays at the cursor for the next owner.
func (cs commands) compactionCommand(c events.Command, from events.Sender, pt *pendingTurn) (string, error) {
	a := cs.a
	reply := cs.compactionReply(c, from, pt)
	if err := a.ctx.Err(); err != nil {
		return "", err
	}
	return reply, nil
}

func (cs commands) compactionReply(c events.Command, from events.Sender, pt *pendingTurn) string {
	a := cs.a
	sess, err := a.w.sessions.Current(a.ctx, a.sk)
	if err != nil {
		return "⚠️ " + err.Error()
	}
	sid, err := sess.ID()
	if err != nil {
		return "⚠️ " + err.Error()
	}
	model, err := a.w.pickModel(pt.msg, nil, sess.ModelOverride)
	if err != nil {
		return "⚠️ " + err.Error()
	}
	if !from.HasRole(events.RoleMaster) && !from.HasRole(events.RoleTrusted) {
		return "/compact is for the bot's masters and trusted users only."
	}
	ctx, cancel := context.WithTimeout(a.ctx, a.w.opts.TurnTimeout)
	defer cancel()
	out, err := a.cx.compactContext(ctx, sid, model, a.w.compactionSettings(model), c.Raw, "command", nil, nil)
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

// compactionNote is what /context and /status add about compaction: the automatic threshold and
// how often the conversation was compacted (the latest summary's count, time, coverage, model).
func (cs commands) compactionNote(l store.Loaded, model *llm.Model) string {
	w := cs.a.w
	s := w.compactionSettings(model)
	var b strings.Builder
	switch {
	case !s.Enabled:
		b.WriteString("Compaction is off.")
	case l.Summary == nil:
		b.WriteString("Compactions: 0.")
	default:
		fmt.Fprintf(&b, "Compactions: %d (the latest at %s, %s summarized so far, by %s).", l.Summary.Count,
			l.Summary.Time.UTC().Format(time.RFC3339), count(l.Summary.Covered, "message"), l.Summary.Model)
	}
	if s.Enabled && s.Auto && s.Threshold() > 0 {
		fmt.Fprintf(&b, " Automatic compaction above ≈%d tokens of a %d-token window.", s.Threshold(), s.ContextWindow)
	}
	return b.String()
}
