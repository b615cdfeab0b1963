package telegram

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf16"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

// pollTimeout is getUpdates' long-poll timeout in seconds.
const pollTimeout = 25

// InboundOptions configure an Inbound.
type InboundOptions struct {
	Bot   config.TelegramBot
	Sink  im.Sink
	Media *im.Media // nil: attachments stay as Telegram file ids
	// JS holds the polling lease and receives dead letters.
	JS    jetstream.JetStream
	Owner string
	TTL   time.Duration
	// HTTP is the API client (nil: a 90 s client; long polls last pollTimeout seconds).
	HTTP *http.Client
	Log  *slog.Logger
}

// Inbound is the ingest half of one Telegram bot.
type Inbound struct {
	o    InboundOptions
	c    *client
	log  *slog.Logger
	self atomic.Pointer[tgbotapi.User]
}

// NewInbound validates the bot's configuration.
func NewInbound(o InboundOptions) (*Inbound, error) {
	if err := Validate(o.Bot); err != nil {
		return nil, err
	}
	if o.Sink == nil {
		return nil, errors.New("telegram: InboundOptions.Sink is required")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Inbound{o: o, c: newClient(o.Bot, o.HTTP), log: o.Log.With("platform", Platform, "bot", o.Bot.ID)}, nil
}

// IsWebhook reports whether the bot gets its updates by webhook.
func IsWebhook(b config.TelegramBot) bool { return b.Mode == ModeWebhook }

// Run runs the bot's inbound side until ctx ends: in polling mode getUpdates under the
// single-connection lease; in webhook mode it registers WebhookURL (when set) and waits.
func (in *Inbound) Run(ctx context.Context) error {
	if IsWebhook(in.o.Bot) {
		if u := in.o.Bot.WebhookURL; u != "" {
			p := tgbotapi.Params{"url": u, "allowed_updates": `["message","channel_post","callback_query"]`}
			p.AddNonEmpty("secret_token", in.o.Bot.WebhookSecret)
			if _, err := in.c.api(ctx).MakeRequest("setWebhook", p); err != nil {
				in.log.Error("telegram: setWebhook", "err", classify("setWebhook", err))
			}
		}
		<-ctx.Done()
		return ctx.Err()
	}
	return im.Hold(ctx, im.HoldOptions{JS: in.o.JS, Key: im.ConnKey(Platform, in.o.Bot.ID), Owner: in.o.Owner, TTL: in.o.TTL, Log: in.log}, in.poll)
}

func (in *Inbound) me(ctx context.Context) (*tgbotapi.User, error) {
	if u := in.self.Load(); u != nil {
		return u, nil
	}
	u, err := in.c.api(ctx).GetMe()
	if err != nil {
		return nil, classify("getMe", err)
	}
	in.self.Store(&u)
	return &u, nil
}

// poll long-polls getUpdates until ctx ends or a call fails. The offset is advanced only past
// updates that were ingested (or dead-lettered), and getUpdates confirms an offset only on
// the next call, so a batch this replica did not finish is fetched again by whoever polls next.
func (in *Inbound) poll(ctx context.Context) error {
	// getMe on every connection, not the cached answer: it is what tells that the server
	// answers and takes the token before a long poll that may stay silent for a while.
	u, err := in.c.api(ctx).GetMe()
	if err != nil {
		return classify("getMe", err)
	}
	in.self.Store(&u)
	im.Connected(ctx, in.log)
	offset := 0
	for ctx.Err() == nil {
		cfg := tgbotapi.UpdateConfig{Offset: offset, Timeout: pollTimeout, AllowedUpdates: []string{"message", "channel_post", "callback_query"}}
		updates, err := in.c.api(ctx).GetUpdates(cfg)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			err = classify("getUpdates", err)
			var e *im.Error
			if errors.As(err, &e) && e.RetryAfter > 0 {
				if !im.Sleep(ctx, e.RetryAfter) {
					return ctx.Err()
				}
				continue
			}
			return err
		}
		for _, u := range updates {
			if err := in.update(ctx, &u, nil); err != nil && !errors.Is(err, events.ErrInvalid) {
				return err // not ingested: the next poll (here or elsewhere) gets it again
			}
			offset = u.UpdateID + 1
		}
	}
	return ctx.Err()
}

// Routes registers POST /telegram/{bot} for the webhook-mode bots.
func Routes(mux *http.ServeMux, bots map[string]*Inbound) {
	mux.HandleFunc("POST /telegram/{bot}", func(w http.ResponseWriter, r *http.Request) {
		in, ok := bots[r.PathValue("bot")]
		if !ok || !IsWebhook(in.o.Bot) {
			http.Error(w, "unknown bot", http.StatusNotFound)
			return
		}
		in.serveWebhook(w, r)
	})
}

const maxUpdate = 1 << 20

func (in *Inbound) serveWebhook(w http.ResponseWriter, r *http.Request) {
	// Fail closed: without a configured secret (which config validation requires) nothing is
	// taken, since anyone who reaches the listener could otherwise post any user's message.
	s := in.o.Bot.WebhookSecret
	if s == "" || subtle.ConstantTimeCompare([]byte(r.Header.Get("X-Telegram-Bot-Api-Secret-Token")), []byte(s)) != 1 {
		in.log.Warn("telegram: webhook with a wrong secret token", "remote", r.RemoteAddr)
		http.Error(w, "wrong secret token", http.StatusUnauthorized)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxUpdate+1))
	if err != nil || len(body) > maxUpdate {
		http.Error(w, "body unreadable or over 1 MiB", http.StatusRequestEntityTooLarge)
		return
	}
	var u tgbotapi.Update
	if err := json.Unmarshal(body, &u); err != nil {
		_ = in.deadLetter(r.Context(), fmt.Errorf("update is not JSON: %w", err), body)
		w.WriteHeader(http.StatusOK) // Telegram would only send it again
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	if err := in.update(ctx, &u, body); err != nil && !errors.Is(err, events.ErrInvalid) {
		in.log.Error("telegram: update not ingested", "update", u.UpdateID, "err", err)
		http.Error(w, "not accepted, retry later", http.StatusServiceUnavailable) // Telegram retries
		return
	}
	w.WriteHeader(http.StatusOK)
}

// update ingests one update (new messages and channel posts, presses of card buttons; edits
// and other kinds are skipped).
func (in *Inbound) update(ctx context.Context, u *tgbotapi.Update, raw []byte) error {
	if u.CallbackQuery != nil {
		return in.pressButton(ctx, u.CallbackQuery)
	}
	msg := u.Message
	if msg == nil {
		msg = u.ChannelPost
	}
	if msg == nil {
		return nil
	}
	m, err := in.normalize(ctx, msg)
	if err == nil {
		err = m.Validate()
	}
	if err != nil {
		if raw == nil {
			raw, _ = json.Marshal(u)
		}
		return in.deadLetter(ctx, err, raw)
	}
	last := im.Ingest(ctx, in.o.Sink, m, 4, 500*time.Millisecond)
	if errors.Is(last, events.ErrInvalid) {
		if raw == nil {
			raw, _ = json.Marshal(u)
		}
		return in.deadLetter(ctx, last, raw)
	}
	return last
}

func (in *Inbound) deadLetter(ctx context.Context, cause error, raw []byte) error {
	in.log.Warn("telegram: update rejected", "err", cause)
	if in.o.JS != nil {
		if err := im.DeadLetter(ctx, in.o.JS, Platform+"/"+in.o.Bot.ID, events.DLQInvalid, cause, raw); err != nil {
			in.log.Error("telegram: dead letter", "err", err)
		}
	}
	if errors.Is(cause, events.ErrInvalid) {
		return cause
	}
	return fmt.Errorf("%w: %v", events.ErrInvalid, cause)
}

// normalize maps a Telegram message to the bus's IMMessage.
func (in *Inbound) normalize(ctx context.Context, msg *tgbotapi.Message) (*events.IMMessage, error) {
	if msg.Chat == nil {
		return nil, errors.New("message has no chat")
	}
	m := &events.IMMessage{Platform: Platform, Bot: in.o.Bot.ID, MessageID: MessageID(msg.Chat.ID, msg.MessageID),
		Time: int64(msg.Date) * 1000}
	scene, err := sceneOf(msg.Chat)
	if err != nil {
		return nil, err
	}
	m.Scene = scene
	if msg.From != nil {
		name := strings.TrimSpace(msg.From.FirstName + " " + msg.From.LastName)
		if name == "" {
			name = msg.From.UserName
		}
		m.Sender = events.Sender{ID: strconv.FormatInt(msg.From.ID, 10), Name: name}
	} else if msg.SenderChat != nil {
		m.Sender = events.Sender{ID: strconv.FormatInt(msg.SenderChat.ID, 10), Name: msg.SenderChat.Title}
	}
	self, _ := in.me(ctx) // nil when getMe failed: mentions by username are then not recognised
	if r := msg.ReplyToMessage; r != nil {
		m.Content = append(m.Content, events.ReplySeg(MessageID(msg.Chat.ID, r.MessageID)))
		if self != nil && r.From != nil && r.From.ID == self.ID {
			m.MentionsBot = true // a reply to the bot addresses it
		}
	}
	text, entities := msg.Text, msg.Entities
	if text == "" {
		text, entities = msg.Caption, msg.CaptionEntities
	}
	segs, mention := textSegments(text, entities, self)
	m.MentionsBot = m.MentionsBot || mention
	m.Content = append(m.Content, segs...)
	i := 0
	attach := func(typ, fileID, name string) {
		i++
		seg := events.Segment{Type: typ, Data: map[string]any{"file": fileID}}
		if name != "" {
			seg.Data["name"] = name
		}
		m.Content = append(m.Content, in.fetch(ctx, seg, fileID, im.MediaName(Platform, in.o.Bot.ID, m.MessageID, i)))
	}
	if n := len(msg.Photo); n > 0 {
		attach(events.SegImage, msg.Photo[n-1].FileID, "") // the largest size comes last
	}
	if msg.Voice != nil {
		attach(events.SegRecord, msg.Voice.FileID, "")
	}
	if msg.Audio != nil {
		attach(events.SegAudio, msg.Audio.FileID, msg.Audio.FileName)
	}
	if msg.Video != nil {
		attach(events.SegVideo, msg.Video.FileID, msg.Video.FileName)
	}
	if msg.Document != nil {
		attach(events.SegFile, msg.Document.FileID, msg.Document.FileName)
	}
	if msg.Sticker != nil {
		m.Content = append(m.Content, events.Segment{Type: events.SegSticker, Data: map[string]any{"id": msg.Sticker.FileID, "text": msg.Sticker.Emoji}})
	}
	return m, nil
}

// fetch stores a file in the media store through getFile (a file that cannot be fetched
// stays a file-id reference with data.error).
func (in *Inbound) fetch(ctx context.Context, seg events.Segment, fileID, name string) events.Segment {
	if in.o.Media == nil {
		return seg
	}
	f, err := in.c.api(ctx).GetFile(tgbotapi.FileConfig{FileID: fileID})
	if err != nil {
		seg.Data["error"] = classify("getFile", err).Error()
		return seg
	}
	out := in.o.Media.StoreSegment(ctx, seg, in.c.fileURL(f.FilePath), name)
	delete(out.Data, "sourceUrl") // it holds the bot token
	if e, ok := out.Data["error"].(string); ok {
		out.Data["error"] = strings.ReplaceAll(e, in.o.Bot.Token, "<token>")
		if u, ok := out.Data["url"].(string); ok && strings.Contains(u, in.o.Bot.Token) {
			delete(out.Data, "url")
		}
	}
	return out
}

// textSegments splits text at mention entities: @username / text_mention become at
// segments, the bot's own marked self (events.SelfAtSeg), which sets mention; a command
// addressed to the bot ("/reset@mybot") loses its suffix and sets mention. Entity offsets are
// UTF-16 code units.
func textSegments(text string, entities []tgbotapi.MessageEntity, self *tgbotapi.User) (events.Segments, bool) {
	if text == "" {
		return nil, false
	}
	u := utf16.Encode([]rune(text))
	var out events.Segments
	mention := false
	pos := 0
	for _, e := range entities {
		if e.Type != "mention" && e.Type != "text_mention" && e.Type != "bot_command" {
			continue
		}
		if e.Offset < pos || e.Offset+e.Length > len(u) {
			continue
		}
		span := string(utf16.Decode(u[e.Offset : e.Offset+e.Length]))
		if e.Type == "bot_command" {
			// "/reset@mybot" (how Telegram writes a command in a group) addresses this bot: it
			// becomes "/reset" and a mention. "/reset@otherbot" is left as it is: not ours.
			cmd, to, ok := strings.Cut(span, "@")
			if !ok || self == nil || !strings.EqualFold(to, self.UserName) {
				continue
			}
			if e.Offset > pos {
				out = append(out, events.TextSeg(string(utf16.Decode(u[pos:e.Offset]))))
			}
			out = append(out, events.TextSeg(cmd))
			mention = true
			pos = e.Offset + e.Length
			continue
		}
		if e.Offset > pos {
			out = append(out, events.TextSeg(string(utf16.Decode(u[pos:e.Offset]))))
		}
		switch {
		case e.Type == "text_mention" && e.User != nil:
			if self != nil && e.User.ID == self.ID {
				out = append(out, events.SelfAtSeg(strconv.FormatInt(e.User.ID, 10), span))
				mention = true
			} else {
				out = append(out, events.AtSeg(strconv.FormatInt(e.User.ID, 10), span))
			}
		default:
			uname := strings.TrimPrefix(span, "@")
			if self != nil && strings.EqualFold(uname, self.UserName) {
				out = append(out, events.SelfAtSeg(strconv.FormatInt(self.ID, 10), span))
				mention = true
			} else {
				out = append(out, events.AtSeg(uname, span))
			}
		}
		pos = e.Offset + e.Length
	}
	if pos < len(u) {
		out = append(out, events.TextSeg(string(utf16.Decode(u[pos:]))))
	}
	return out, mention
}
