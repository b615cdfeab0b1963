package turn

import (
	"context"
	"strconv"
	"strings"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/hooks"
	"github.com/agentbus/agentbus/pkg/identity"
	"github.com/agentbus/agentbus/pkg/llm"
)

// The turn worker runs message.received, agent.bootstrap, context.transform, session.new and
// session.compact (pkg/hooks). message.received runs where the session's actor takes a user
// message from its inbox, in inbox order, and again (same id: the inbox event's id) when a
// takeover rebuilds a queued turn's input from the inbox, so a message's text is what the
// hooks said wherever the turn runs. A turn's recorded input (turn_started) already holds the
// changed text, so a turn resumed from its log does not ask again.

func hookSender(s events.Sender) *hooks.Sender {
	return &hooks.Sender{ID: s.ID, Name: s.Name, Roles: s.Roles}
}

// receivedHook runs message.received for a user message: it returns the text the turn takes
// (e.Data.Text, or the hooks' text) and the outcome. Without hooks it costs nothing.
func (hk hookCalls) receivedHook(e *events.Event[events.UserMessage]) (string, hooks.Outcome) {
	a := hk.a
	if !a.w.opts.Hooks.Has(hooks.MessageReceived) {
		return e.Data.Text, hooks.Outcome{}
	}
	m := &e.Data.Message
	raw := e.Data.Text
	if raw == "" {
		clean := *m
		clean.Content = identity.SanitizeSegments(m.Content)
		raw = identity.StripBotMention(strings.TrimSpace(identity.StripSpoofedSender(clean.Content.PlainText())), &clean)
	}
	ev := &hooks.Event{
		Event: hooks.MessageReceived, ID: hooks.ID(hooks.MessageReceived, a.sk.String(), e.ID),
		Session: e.Session, Sender: hookSender(m.Sender),
		Data: map[string]any{
			"messageId": m.MessageID, "platform": m.Platform, "bot": m.Bot,
			"scene": map[string]any{"type": m.Scene.Type, "id": m.Scene.ID}, "mentionsBot": m.MentionsBot,
		},
	}
	if ev.Session == "" {
		ev.Session = a.sk.String()
	}
	text, out := a.w.opts.Hooks.Text(a.ctx, ev, raw)
	if !out.Modified {
		return e.Data.Text, out
	}
	if strings.TrimSpace(text) == "" {
		text = " " // an emptied message stays empty (userInput reads "" as "use the content")
	}
	return text, out
}

// blockMessage consumes a user message a hook blocked: the reply the hook gave (if any) goes
// out under the id of the turn the message would have started, and the cursor passes it.
// Nothing of it reaches the model or the context.
func (hk hookCalls) blockMessage(e *events.Event[events.UserMessage], seq uint64, out hooks.Outcome) error {
	a := hk.a
	a.log.Info("message blocked by hook", "hook", out.By, "seq", seq, "err", out.Err)
	if out.Reply != "" {
		a.out.replyText(&pendingTurn{seq: seq, msg: e.Data.Message, trace: e.Trace, parent: a.parent}, turnID(seq), out.Reply)
	}
	return a.advance(seq, nil)
}

// bootstrapHook runs agent.bootstrap on the turn's system prompt (once per session epoch and
// process; pkg/hooks keeps the answer).
func (t *turnRun) bootstrapHook(ctx context.Context, system string) (string, error) {
	r := t.a.w.opts.Hooks
	if !r.Has(hooks.AgentBootstrap) {
		return system, nil
	}
	ev := &hooks.Event{ID: hooks.ID(hooks.AgentBootstrap, t.sidStr), Session: t.sidStr, Turn: t.id, Sender: hookSender(t.msg.Sender)}
	return r.Bootstrap(ctx, ev, system)
}

// transformHook chains context.transform after next (the built-in L1 compaction, or nil),
// in the shape of loop.Config.TransformContext.
// The event id names the session, the turn and the number of messages the step sends, so the
// same step of a resumed turn repeats it.
func (t *turnRun) transformHook(next func(context.Context, []llm.Message) ([]llm.Message, error)) func(context.Context, []llm.Message) ([]llm.Message, error) {
	r := t.a.w.opts.Hooks
	if !r.Has(hooks.ContextTransform) {
		return next
	}
	return func(ctx context.Context, msgs []llm.Message) ([]llm.Message, error) {
		n := len(msgs)
		if next != nil {
			var err error
			if msgs, err = next(ctx, msgs); err != nil {
				return nil, err
			}
		}
		ev := &hooks.Event{ID: hooks.ID(hooks.ContextTransform, t.sidStr, t.id, strconv.Itoa(n)), Session: t.sidStr, Turn: t.id, Sender: hookSender(t.msg.Sender)}
		return r.Transform(ctx, ev, msgs)
	}
}

// sessionNewHook notifies session.new for the epoch s starts.
func (hk hookCalls) sessionNewHook(sid string, epoch uint64) {
	a := hk.a
	r := a.w.opts.Hooks
	if !r.Has(hooks.SessionNew) {
		return
	}
	r.Notify(&hooks.Event{Event: hooks.SessionNew, ID: hooks.ID(hooks.SessionNew, sid), Session: sid,
		Data: map[string]any{"sessionKey": a.sk.String(), "epoch": epoch}})
}

// sessionCompactHook notifies session.compact for a committed summary (msgID is the summary's
// deterministic commit id).
func (hk hookCalls) sessionCompactHook(sid, msgID, summary, reason string, covered, kept int) {
	a := hk.a
	r := a.w.opts.Hooks
	if !r.Has(hooks.SessionCompact) {
		return
	}
	r.Notify(&hooks.Event{Event: hooks.SessionCompact, ID: hooks.ID(hooks.SessionCompact, msgID), Session: sid,
		Data: map[string]any{"summary": summary, "reason": reason, "summarized": covered, "kept": kept}})
}

// hookCalls runs a session's ai.hooks events (message received, session new, compaction) for
// its actor.
type hookCalls struct{ a *actor }
