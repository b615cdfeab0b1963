package telegram

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

// Streaming previews. While a turn streams (agent.live.<sk>, core NATS), the previewer of a
// bot shows the reply as it grows in one Telegram message: sent once there are a few words,
// then edited with editMessageText at most once per previewIntervalMs ("partial") or once per
// finished paragraph ("block"), and sendChatAction typing every 4 s while deltas arrive.
// Preview text is sent without a parse mode (half a Markdown construct cannot break it).
//
// Exactly one egress replica runs a bot's previewer (im.Hold on "im-conn.telegram-preview.
// <bot>"), so a turn's deltas, whichever replica delivers its reply, are shown once. When
// egress delivers part 0 of the turn's reply, the sender asks the previewer on
// PreviewSubject(bot) to hand the turn over: the previewer stops editing it for good, waits
// for an edit in flight, and answers with the preview's message id, which the sender then
// edits into the final, formatted text. No preview lost in flight is harmful: the final
// message always arrives through IM_OUT.

// PreviewSubject is where the previewer of bot takes hand-over requests.
func PreviewSubject(bot string) string {
	return "im.preview." + Platform + "." + events.EncodeToken(bot)
}

type takeRequest struct {
	Turn string `json:"turn"`
}

type takeAnswer struct {
	MessageID int `json:"messageId,omitempty"`
}

func previewMode(b config.TelegramBot) string {
	if b.Preview == "" {
		return "partial"
	}
	return b.Preview
}

// minPreview is how much text a preview needs before it is first shown.
const minPreview = 12

// typingEvery is how often typing is re-sent (Telegram shows it for 5 s).
const typingEvery = 4 * time.Second

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

// RunPreviewer runs the bot's previewer while this replica holds its lease, until ctx ends.
// It does nothing for a bot with preview "off".
func RunPreviewer(ctx context.Context, o PreviewerOptions) error {
	if previewMode(o.Bot) == "off" {
		<-ctx.Done()
		return ctx.Err()
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	log := o.Log.With("platform", Platform, "bot", o.Bot.ID)
	c := newClient(o.Bot, o.HTTP)
	return im.Hold(ctx, im.HoldOptions{JS: o.JS, Key: im.ConnKey(Platform+"-preview", o.Bot.ID), Owner: o.Owner, TTL: o.TTL, Log: log},
		func(ctx context.Context) error {
			p := &previewer{o: o, c: c, log: log, turns: map[string]*turnPreview{}}
			return p.run(ctx)
		})
}

type previewer struct {
	o     PreviewerOptions
	c     *client
	log   *slog.Logger
	mu    sync.Mutex
	turns map[string]*turnPreview
	pause time.Time // flood control: no preview call before this
}

type turnPreview struct {
	mu       sync.Mutex
	sk       events.SessionKey
	chat     int64
	message  int // the turn's message index being shown
	text     strings.Builder
	lastSeq  uint64
	msgID    int
	shown    string
	lastEdit time.Time
	lastType time.Time
	taken    bool
	touched  time.Time
	replyTo  int
	pending  bool // an edit is scheduled
}

func (p *previewer) interval() time.Duration {
	if ms := p.o.Bot.PreviewIntervalMs; ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return time.Second
}

func (p *previewer) run(ctx context.Context) error {
	live, err := p.o.NC.Subscribe(events.PrefixAgentLive+".>", p.onDelta(ctx))
	if err != nil {
		return err
	}
	defer func() { _ = live.Unsubscribe() }()
	take, err := p.o.NC.Subscribe(PreviewSubject(p.o.Bot.ID), p.onTake)
	if err != nil {
		return err
	}
	defer func() { _ = take.Unsubscribe() }()
	gc := time.NewTicker(time.Minute)
	defer gc.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-gc.C:
			p.mu.Lock()
			for id, t := range p.turns {
				t.mu.Lock()
				old := time.Since(t.touched) > 15*time.Minute
				t.mu.Unlock()
				if old {
					delete(p.turns, id)
				}
			}
			p.mu.Unlock()
		}
	}
}

func (p *previewer) turn(id string, sk events.SessionKey) *turnPreview {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.turns[id]
	if !ok {
		t = &turnPreview{sk: sk}
		t.chat, _ = strconv.ParseInt(sk.Scene, 10, 64)
		p.turns[id] = t
	}
	t.touched = time.Now()
	return t
}

func (p *previewer) onDelta(ctx context.Context) nats.MsgHandler {
	return func(msg *nats.Msg) {
		sk, err := events.ParseAgentLiveSubject(msg.Subject)
		if err != nil || sk.Platform != Platform || sk.Bot != p.o.Bot.ID {
			return
		}
		turnID := msg.Header.Get(events.HeaderTurn)
		if turnID == "" {
			return
		}
		var ev events.Event[events.LiveDelta]
		if json.Unmarshal(msg.Data, &ev) != nil {
			return
		}
		d := ev.Data
		t := p.turn(turnID, sk)
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.taken || d.Seq <= t.lastSeq {
			return
		}
		t.lastSeq = d.Seq
		if time.Since(t.lastType) >= typingEvery {
			t.lastType = time.Now()
			go p.typing(ctx, t.chat)
		}
		if d.Kind != "text_delta" {
			return
		}
		if d.Message != t.message {
			t.message = d.Message
			t.text.Reset() // a new assistant message after tool calls: show that one
		}
		t.text.WriteString(d.Delta)
		if !t.pending {
			t.pending = true
			wait := p.interval() - time.Since(t.lastEdit)
			if wait < 0 {
				wait = 0
			}
			time.AfterFunc(wait, func() { p.flush(ctx, turnID, t) })
		}
	}
}

// visible is what the preview shows now: everything ("partial") or up to the last finished
// paragraph ("block"), capped at the message limit.
func (p *previewer) visible(t *turnPreview) string {
	s := t.text.String()
	if previewMode(p.o.Bot) == "block" {
		i := strings.LastIndex(s, "\n\n")
		if i < 0 {
			return ""
		}
		s = s[:i]
	}
	s = strings.TrimSpace(s)
	if utf8.RuneCountInString(s) > DefaultChunkLimit-2 {
		r := []rune(s)
		s = string(r[:DefaultChunkLimit-2])
	}
	return s
}

// flush shows the turn's text now (with t.mu held for the call, so a hand-over waits for it).
func (p *previewer) flush(ctx context.Context, turnID string, t *turnPreview) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pending = false
	if t.taken || ctx.Err() != nil {
		return
	}
	s := p.visible(t)
	if utf8.RuneCountInString(s) < minPreview || s == t.shown {
		return
	}
	p.mu.Lock()
	wait := time.Until(p.pause)
	p.mu.Unlock()
	if wait > 0 { // flood control: try again once it is over
		t.pending = true
		time.AfterFunc(wait, func() { p.flush(ctx, turnID, t) })
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	api := p.c.api(cctx)
	t.lastEdit = time.Now()
	if t.msgID == 0 {
		if t.replyTo == 0 {
			t.replyTo = p.lastInbound(cctx, t.sk)
		}
		m := tgbotapi.NewMessage(t.chat, s+" …")
		m.ReplyToMessageID, m.AllowSendingWithoutReply = t.replyTo, t.replyTo != 0
		m.DisableWebPagePreview = true
		sent, err := api.Send(m)
		if err != nil {
			p.log.Debug("telegram: preview not sent", "turn", turnID, "err", classify("sendMessage", err))
			p.backoff(err)
			return
		}
		t.msgID = sent.MessageID
	} else {
		e := tgbotapi.NewEditMessageText(t.chat, t.msgID, s+" …")
		e.DisableWebPagePreview = true
		if _, err := api.Request(e); err != nil {
			p.log.Debug("telegram: preview not edited", "turn", turnID, "err", classify("editMessageText", err))
			p.backoff(err)
			return
		}
	}
	t.shown = s
}

// backoff honours flood control: the next edit of any turn waits retry_after.
func (p *previewer) backoff(err error) {
	var te *tgbotapi.Error
	if errors.As(err, &te) && te.RetryAfter > 0 {
		p.log.Info("telegram: preview throttled by flood control", "retryAfter", te.RetryAfter)
		p.mu.Lock()
		p.pause = time.Now().Add(time.Duration(te.RetryAfter) * time.Second)
		p.mu.Unlock()
	}
}

// lastInbound is the Telegram message id of the session's last inbound message (the one the
// turn most likely answers), for the preview's reply_to.
func (p *previewer) lastInbound(ctx context.Context, sk events.SessionKey) int {
	if p.o.JS == nil {
		return 0
	}
	s, err := p.o.JS.Stream(ctx, events.StreamIMIn)
	if err != nil {
		return 0
	}
	m, err := s.GetLastMsgForSubject(ctx, events.IMInSubject(sk))
	if err != nil {
		return 0
	}
	var ev events.Event[events.IMMessage]
	if json.Unmarshal(m.Data, &ev) != nil {
		return 0
	}
	id, _ := splitMessageID(ev.Data.MessageID)
	return id
}

func (p *previewer) typing(ctx context.Context, chat int64) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := p.c.api(cctx).Request(tgbotapi.NewChatAction(chat, tgbotapi.ChatTyping)); err != nil {
		p.log.Debug("telegram: typing", "err", classify("sendChatAction", err))
	}
}

// onTake hands a turn's preview over to the sender of its final message.
func (p *previewer) onTake(msg *nats.Msg) {
	var req takeRequest
	if json.Unmarshal(msg.Data, &req) != nil || req.Turn == "" {
		_ = msg.Respond([]byte(`{}`))
		return
	}
	p.mu.Lock()
	t, ok := p.turns[req.Turn]
	if !ok {
		// No delta seen (yet): remember the turn as taken so late deltas make no preview.
		t = &turnPreview{taken: true, touched: time.Now()}
		p.turns[req.Turn] = t
	}
	p.mu.Unlock()
	t.mu.Lock() // waits for an edit in flight
	t.taken = true
	b, _ := json.Marshal(takeAnswer{MessageID: t.msgID})
	t.mu.Unlock()
	_ = msg.Respond(b)
}
