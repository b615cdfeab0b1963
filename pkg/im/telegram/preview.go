package telegram

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

// Streaming previews and typing run on the shared previewer (im.RunPreviewer): one Telegram
// message sent once there are a few words, then edited with editMessageText at most once per
// previewIntervalMs ("partial") or once per finished paragraph ("block"); sendChatAction
// typing every 4 s while a turn runs, previews on or off. Preview text is sent without a
// parse mode (half a Markdown construct cannot break it); the final message is formatted.

// typingEvery is how often typing is re-sent (Telegram shows it for 5 s).
const typingEvery = 4 * time.Second

// PreviewSubject is where the previewer of bot takes hand-over requests.
func PreviewSubject(bot string) string { return im.PreviewSubject(Platform, bot) }

func previewMode(b config.TelegramBot) string {
	if b.Preview == "" {
		return im.PreviewPartial
	}
	return b.Preview
}

// PreviewerOptions configure RunPreviewer.
type PreviewerOptions struct {
	Bot   config.TelegramBot
	NC    *nats.Conn
	JS    jetstream.JetStream
	Owner string
	HTTP  *http.Client
	Log   *slog.Logger
	TTL   time.Duration
}

// RunPreviewer runs the bot's previewer and typing indicator while this replica holds its
// lease, until ctx ends.
func RunPreviewer(ctx context.Context, o PreviewerOptions) error {
	interval := time.Second
	if ms := o.Bot.PreviewIntervalMs; ms > 0 {
		interval = time.Duration(ms) * time.Millisecond
	}
	return im.RunPreviewer(ctx, im.PreviewOptions{Platform: Platform, Bot: o.Bot.ID, Mode: previewMode(o.Bot),
		Interval: interval, Limit: DefaultChunkLimit, TypingEvery: typingEvery, Editor: editor{newClient(o.Bot, o.HTTP)},
		NC: o.NC, JS: o.JS, Owner: o.Owner, TTL: o.TTL, Log: o.Log})
}

// editor is the previewer's Telegram side; message ids are MessageID's "<chat>_<message>".
type editor struct{ c *client }

func (e editor) SendPreview(ctx context.Context, sk events.SessionKey, replyTo, text string) (string, error) {
	chat, err := strconv.ParseInt(sk.Scene, 10, 64)
	if err != nil {
		return "", im.Permanentf(Platform, "sendMessage", "chat id %q is not a number", sk.Scene)
	}
	m := tgbotapi.NewMessage(chat, text)
	if r, ok := splitMessageID(replyTo); ok && replyTo != "" {
		m.ReplyToMessageID, m.AllowSendingWithoutReply = r, true
	}
	m.DisableWebPagePreview = true
	var sent tgbotapi.Message
	err = e.c.inChat(ctx, chat, false, func(api *tgbotapi.BotAPI) (err error) { sent, err = api.Send(m); return err })
	if err != nil {
		return "", classifyChat("sendMessage", err)
	}
	return MessageID(chat, sent.MessageID), nil
}

func (e editor) EditPreview(ctx context.Context, sk events.SessionKey, id, text string) error {
	chat, err := strconv.ParseInt(sk.Scene, 10, 64)
	msg, ok := splitMessageID(id)
	if err != nil || !ok {
		return im.Permanentf(Platform, "editMessageText", "preview id %q in chat %q", id, sk.Scene)
	}
	ed := tgbotapi.NewEditMessageText(chat, msg, text)
	ed.DisableWebPagePreview = true
	if err := e.c.inChat(ctx, chat, false, func(api *tgbotapi.BotAPI) error { _, err := api.Request(ed); return err }); err != nil {
		return classifyChat("editMessageText", err)
	}
	return nil
}

func (e editor) Typing(ctx context.Context, sk events.SessionKey) error {
	chat, err := strconv.ParseInt(sk.Scene, 10, 64)
	if err != nil {
		return im.Permanentf(Platform, "sendChatAction", "chat id %q is not a number", sk.Scene)
	}
	err = e.c.inChat(ctx, chat, false, func(api *tgbotapi.BotAPI) error {
		_, err := api.Request(tgbotapi.NewChatAction(chat, tgbotapi.ChatTyping))
		return err
	})
	if err != nil {
		return classifyChat("sendChatAction", err)
	}
	return nil
}
