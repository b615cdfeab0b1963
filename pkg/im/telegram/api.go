// Package telegram is the Telegram Bot API adapter, on go-telegram-bot-api/v5.
//
// Inbound (ingest role): long polling with getUpdates under the single-connection lease
// (pkg/im.Hold; Telegram answers 409 Conflict to a second poller) or webhook updates POSTed
// to /telegram/<bot> (any replica). The update offset is confirmed only after a batch was
// ingested, so updates of a holder that dies are fetched again by the next holder and
// deduplicated on IM_IN by their message id: none is lost or doubled. Photos, voice notes,
// videos and documents are downloaded through getFile from the configured API base into
// the media object store.
//
// Outbound (egress role): sendMessage in HTML parse mode built from the reply's Markdown
// with every character of the text escaped (so user text can never break the parse), cut
// at 4,096 characters, threaded with reply_to_message_id; images as sendPhoto (uploaded from
// the media store or passed by URL). Flood control is kept per chat (flood.go): after a 429
// with retry_after, every send and edit to that chat, from the sender or the previewer, waits
// that long, and other chats are not held.
// Streaming previews edit one message with editMessageText and typing is sendChatAction
// (see Previewer).
package telegram

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/im"
)

// Platform is the platform name in session keys.
const Platform = "telegram"

// DefaultAPIBase is Telegram's Bot API server.
const DefaultAPIBase = "https://api.telegram.org"

// DefaultChunkLimit is Telegram's message length limit.
const DefaultChunkLimit = 4096

// Modes (config im.telegram.bots[].mode).
const (
	ModePolling = "polling"
	ModeWebhook = "webhook"
)

// Validate checks one bot's configuration.
func Validate(b config.TelegramBot) error {
	switch {
	case b.ID == "":
		return errors.New("telegram: a bot has no id")
	case strings.ContainsAny(b.ID, ":/ "):
		return fmt.Errorf("telegram: bot id %q must not contain ':', '/' or spaces", b.ID)
	case b.Token == "":
		return fmt.Errorf("telegram: bot %s has no token", b.ID)
	}
	switch b.Mode {
	case "", ModePolling, ModeWebhook:
	default:
		return fmt.Errorf("telegram: bot %s: mode %q must be polling or webhook", b.ID, b.Mode)
	}
	switch b.Preview {
	case "", "off", "partial", "block":
	default:
		return fmt.Errorf("telegram: bot %s: preview %q must be off, partial or block", b.ID, b.Preview)
	}
	return nil
}

func apiBase(b config.TelegramBot) string {
	if b.APIBase == "" {
		return DefaultAPIBase
	}
	return strings.TrimSuffix(b.APIBase, "/")
}

// client is one bot's Bot API client. The library's calls take no context, so every call
// goes through a copy of the BotAPI whose HTTP client binds the call's context to the request
// (a long poll is cut the moment its lease is lost or the process stops).
type client struct {
	bot   config.TelegramBot
	base  *tgbotapi.BotAPI
	http  *http.Client
	gates *chatGates // the bot's flood control per chat, shared in the process (flood.go)
}

func newClient(b config.TelegramBot, hc *http.Client) *client {
	if hc == nil {
		hc = &http.Client{Timeout: 90 * time.Second}
	}
	// Built by hand rather than with NewBotAPIWithClient, which calls getMe at once: a
	// process must start even when Telegram is unreachable for a moment.
	api := &tgbotapi.BotAPI{Token: b.Token, Client: hc, Buffer: 100}
	api.SetAPIEndpoint(apiBase(b) + "/bot%s/%s")
	return &client{bot: b, base: api, http: hc, gates: gatesFor(apiBase(b), b.Token)}
}

type ctxClient struct {
	ctx context.Context
	hc  *http.Client
}

func (c ctxClient) Do(req *http.Request) (*http.Response, error) {
	return c.hc.Do(req.WithContext(c.ctx))
}

func (c *client) api(ctx context.Context) *tgbotapi.BotAPI {
	a := *c.base
	a.Client = ctxClient{ctx: ctx, hc: c.http}
	return &a
}

// fileURL is where a file from getFile is downloaded: <apiBase>/file/bot<token>/<path>.
func (c *client) fileURL(path string) string {
	return apiBase(c.bot) + "/file/bot" + c.bot.Token + "/" + path
}

// classify turns a library or transport error into an *im.Error egress understands:
// 429 (flood control) and 5xx are transient with retry_after, 400/401/403/404 permanent.
func classify(method string, err error) error {
	if err == nil {
		return nil
	}
	var te *tgbotapi.Error
	if errors.As(err, &te) {
		e := &im.Error{Platform: Platform, Action: method, Code: te.Code, Msg: te.Message,
			RetryAfter: time.Duration(te.RetryAfter) * time.Second}
		switch {
		case te.Code == http.StatusTooManyRequests, te.Code >= 500, te.Code == http.StatusConflict:
		case te.Code >= 400:
			e.Perm = true
		}
		return e
	}
	return fmt.Errorf("telegram %s: %w", method, redactErr(err))
}

// redactErr keeps the bot token (part of every request URL) out of error texts and logs.
type tokenless struct{ msg string }

func (t tokenless) Error() string { return t.msg }

func redactErr(err error) error {
	msg := err.Error()
	if i := strings.Index(msg, "/bot"); i >= 0 {
		j := strings.IndexByte(msg[i+4:], '/')
		if j > 0 {
			msg = msg[:i+4] + "<token>" + msg[i+4+j:]
		}
	}
	return tokenless{msg}
}

// chatID parses a scene id (Telegram chat ids are integers).
func chatID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, im.Permanent(fmt.Errorf("telegram: chat id %q is not a number", s))
	}
	return id, nil
}

// MessageID is the bus message id of Telegram message id msg in chat: "<chat>_<msg>"
// (Telegram's message ids are unique per chat only, the bus's per bot).
func MessageID(chat int64, msg int) string {
	return strconv.FormatInt(chat, 10) + "_" + strconv.Itoa(msg)
}

// splitMessageID reverses MessageID; a bare number is a message id of the outbound's chat.
func splitMessageID(id string) (msg int, ok bool) {
	if i := strings.LastIndexByte(id, '_'); i >= 0 {
		id = id[i+1:]
	}
	n, err := strconv.Atoi(id)
	return n, err == nil
}
