package egress

import (
	"context"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/hooks"
)

// Egress runs message.sending before a part goes to its platform and message.sent after its
// receipt was recorded (pkg/hooks). Their ids are the session key and the out id, so a
// redelivered part repeats them. A part whose receipt exists is skipped before either runs.

func partEvent(ev *events.Event[events.Outbound], event string) *hooks.Event {
	out := ev.Data
	return &hooks.Event{
		Event: event, ID: hooks.ID(event, out.SessionKey().String(), out.OutID),
		Session: ev.Meta.Session, Turn: out.Turn,
		Data: map[string]any{
			"outId": out.OutID, "part": out.Part, "final": out.Final, "platform": out.Platform, "bot": out.Bot,
			"scene": map[string]any{"type": out.Scene.Type, "id": out.Scene.ID},
		},
	}
}

// sendingHook runs message.sending on ev: it reports false when a hook blocked the part (it is
// then acked without a send and without a receipt), and replaces the part's text segments
// with the text a hook gave.
func (e *egress) sendingHook(ctx context.Context, ev *events.Event[events.Outbound]) bool {
	if !e.o.Hooks.Has(hooks.MessageSending) {
		return true
	}
	he := partEvent(ev, hooks.MessageSending)
	text, out := e.o.Hooks.Text(ctx, he, ev.Data.Content.PlainText())
	if out.Blocked {
		loggerFrom(ctx).Info("egress: part blocked by hook", "out", ev.Data.OutID, "hook", out.By)
		return false
	}
	if out.Modified {
		ev.Data.Content = withText(ev.Data.Content, text)
	}
	return true
}

// withText replaces the text and mention segments of ss by one text segment (where the first
// was); media and other segments stay, but a card goes: its words were in the text the hook
// changed (Segments.PlainText), and sending it too would show them unchanged.
func withText(ss events.Segments, text string) events.Segments {
	out := make(events.Segments, 0, len(ss)+1)
	placed := false
	for _, s := range ss {
		if s.Type == events.SegText || s.Type == events.SegAt || s.Type == events.SegCard {
			if !placed {
				out = append(out, events.TextSeg(text))
				placed = true
			}
			continue
		}
		out = append(out, s)
	}
	if !placed && text != "" {
		out = append(events.Segments{events.TextSeg(text)}, out...)
	}
	return out
}

// sentHook notifies message.sent.
func (e *egress) sentHook(ev *events.Event[events.Outbound], platformMsgID string) {
	if !e.o.Hooks.Has(hooks.MessageSent) {
		return
	}
	he := partEvent(ev, hooks.MessageSent)
	he.Data["text"] = ev.Data.Content.PlainText()
	he.Data["platformMessageId"] = platformMsgID
	e.o.Hooks.Notify(he)
}
