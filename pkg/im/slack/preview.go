package slack

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	slackapi "github.com/slack-go/slack"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

// Streaming previews run on the shared previewer (im.RunPreviewer): one Slack message, in
// the thread the reply will go to, posted once there are a few words and then chat.update at
// most once per previewIntervalMs ("partial") or once per finished paragraph ("block").
//
// No typing indicator: Slack's Web API has none for bots. The only status an app can show
// is assistant.threads.setStatus, and only in the threads of an app's assistant container
// (events assistant_thread_started / message.im in the assistant pane), which this adapter
// does not run; the legacy RTM typing event is not available to Socket Mode or Events API
// apps. So the editor implements no im.Typer.

// PreviewSubject is where the previewer of bot takes hand-over requests.
func PreviewSubject(bot string) string { return im.PreviewSubject(Platform, bot) }

// PreviewerOptions configure RunPreviewer.
type PreviewerOptions struct {
	Bot   config.SlackBot
	NC    *nats.Conn
	JS    jetstream.JetStream
	Owner string
	HTTP  *http.Client
	Log   *slog.Logger
	TTL   time.Duration
}

// RunPreviewer runs the bot's previewer while this replica holds its lease, until ctx ends.
// It holds nothing for a bot with preview "off".
func RunPreviewer(ctx context.Context, o PreviewerOptions) error {
	interval := time.Second
	if ms := o.Bot.PreviewIntervalMs; ms > 0 {
		interval = time.Duration(ms) * time.Millisecond
	}
	return im.RunPreviewer(ctx, im.PreviewOptions{Platform: Platform, Bot: o.Bot.ID, Mode: previewMode(o.Bot),
		Interval: interval, Limit: DefaultChunkLimit, Editor: editor{newAPI(o.Bot, o.HTTP)},
		NC: o.NC, JS: o.JS, Owner: o.Owner, TTL: o.TTL, Log: o.Log})
}

// editor is the previewer's Slack side; message ids are MessageID's "<channel>/<ts>".
type editor struct{ api *slackapi.Client }

func (e editor) SendPreview(ctx context.Context, sk events.SessionKey, replyTo, text string) (string, error) {
	opts := []slackapi.MsgOption{slackapi.MsgOptionText(escaper.Replace(text), false), slackapi.MsgOptionDisableLinkUnfurl()}
	if th := threadFor(sk.Scope, replyTo); th != "" {
		opts = append(opts, slackapi.MsgOptionTS(th))
	}
	ch, ts, err := e.api.PostMessageContext(ctx, sk.Scene, opts...)
	if err != nil {
		return "", classify("chat.postMessage", err)
	}
	if ch == "" {
		ch = sk.Scene
	}
	return MessageID(ch, ts, ""), nil
}

func (e editor) EditPreview(ctx context.Context, sk events.SessionKey, id, text string) error {
	ts, _ := splitMessageID(id)
	if _, _, _, err := e.api.UpdateMessageContext(ctx, sk.Scene, ts, slackapi.MsgOptionText(escaper.Replace(text), false)); err != nil {
		return classify("chat.update", err)
	}
	return nil
}
