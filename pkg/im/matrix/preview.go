package matrix

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

// Streaming previews and typing run on the shared previewer (im.RunPreviewer): one room
// message, sent once there are a few words as a rich reply to the session's last inbound
// message (in its thread when it is in one), then replaced with m.replace edits at most once
// per previewIntervalMs ("partial") or once per finished paragraph ("block"); typing
// notifications every typingEvery (each lasting typingTimeout) while a turn runs, previews on
// or off. Preview text is plain (half a Markdown construct cannot break it); the final reply
// is one more m.replace edit with the HTML body. The reply's receipt carries the preview's
// event id: it is the message clients show.

const (
	typingEvery   = 4 * time.Second
	typingTimeout = 6 * time.Second
	// defaultPreviewInterval: every edit is an event in the room, so edits are rarer than on
	// platforms that change a message in place.
	defaultPreviewInterval = 1500 * time.Millisecond
)

// PreviewSubject is where the previewer of bot takes hand-over requests.
func PreviewSubject(bot string) string { return im.PreviewSubject(Platform, bot) }

func previewMode(b config.MatrixBot) string {
	if b.Preview == "" {
		return im.PreviewPartial
	}
	return b.Preview
}

// PreviewerOptions configure RunPreviewer.
type PreviewerOptions struct {
	Bot   config.MatrixBot
	NC    *nats.Conn
	JS    jetstream.JetStream
	Owner string
	HTTP  *http.Client
	Log   *slog.Logger
	TTL   time.Duration
}

// RunPreviewer runs the bot's previewer and typing notifications while this replica holds
// its lease, until ctx ends; it returns ctx's error.
func RunPreviewer(ctx context.Context, o PreviewerOptions) error {
	c, err := newClient(o.Bot, o.HTTP)
	if err != nil {
		return err
	}
	interval := defaultPreviewInterval
	if ms := o.Bot.PreviewIntervalMs; ms > 0 {
		interval = time.Duration(ms) * time.Millisecond
	}
	return im.RunPreviewer(ctx, im.PreviewOptions{Platform: Platform, Bot: o.Bot.ID, Mode: previewMode(o.Bot),
		Interval: interval, Limit: chunkLimit(o.Bot), TypingEvery: typingEvery, Editor: editor{c},
		NC: o.NC, JS: o.JS, Owner: o.Owner, TTL: o.TTL, Log: o.Log})
}

// editor is the previewer's Matrix side; preview ids are event ids.
type editor struct{ c *mautrix.Client }

func (e editor) SendPreview(ctx context.Context, sk events.SessionKey, replyTo, text string) (string, error) {
	room := id.RoomID(sk.Scene)
	c := &event.MessageEventContent{MsgType: event.MsgText, Body: text, Mentions: &event.Mentions{}}
	if strings.HasPrefix(replyTo, "$") {
		th := thread{root: threadOf(ctx, e.c, room, id.EventID(replyTo))}
		c.RelatesTo = th.rel(id.EventID(replyTo))
	}
	resp, err := e.c.SendMessageEvent(ctx, room, event.EventMessage, c)
	if err != nil {
		return "", classify("send", err)
	}
	return resp.EventID.String(), nil
}

func (e editor) EditPreview(ctx context.Context, sk events.SessionKey, evID, text string) error {
	c := &event.MessageEventContent{MsgType: event.MsgText, Body: text, Mentions: &event.Mentions{}}
	c.SetEdit(id.EventID(evID))
	if _, err := e.c.SendMessageEvent(ctx, id.RoomID(sk.Scene), event.EventMessage, c); err != nil {
		return classify("edit", err)
	}
	return nil
}

func (e editor) Typing(ctx context.Context, sk events.SessionKey) error {
	if _, err := e.c.UserTyping(ctx, id.RoomID(sk.Scene), true, typingTimeout); err != nil {
		return classify("typing", err)
	}
	return nil
}
