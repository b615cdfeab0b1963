package slack

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	slackapi "github.com/slack-go/slack"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

// Streaming previews, as in the Telegram adapter. While a turn streams (agent.live.<sk>, core
// NATS), the previewer of a bot shows the reply as it grows in one Slack message, in the
// thread the reply will go to: posted once there are a few words, then chat.update at most
// once per previewIntervalMs ("partial") or once per finished paragraph ("block").
//
// Exactly one egress replica runs a bot's previewer (im.Hold on "im-conn.slack-preview.
// <bot>"). When egress delivers part 0 of the turn's reply, the sender asks the previewer on
// PreviewSubject(bot) to hand the turn over: the previewer stops editing it, waits for an
// edit in flight, and answers with the preview's message id, which the sender edits into the
// final text. The final message always arrives through IM_OUT, previews or not.

// PreviewSubject is where the previewer of bot takes hand-over requests.
func PreviewSubject(bot string) string {
	return "im.preview." + Platform + "." + events.EncodeToken(bot)
}

type takeRequest struct {
	Turn string `json:"turn"`
}

type takeAnswer struct {
	MessageID string `json:"messageId,omitempty"`
}

// minPreview is how much text a preview needs before it is first shown.
const minPreview = 12

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
	api := newAPI(o.Bot, o.HTTP)
	return im.Hold(ctx, im.HoldOptions{JS: o.JS, Key: im.ConnKey(Platform+"-preview", o.Bot.ID), Owner: o.Owner, TTL: o.TTL, Log: log},
		func(ctx context.Context) error {
			p := &previewer{o: o, api: api, log: log, turns: map[string]*turnPreview{}}
			return p.run(ctx)
		})
}

type previewer struct {
	o     PreviewerOptions
	api   *slackapi.Client
	log   *slog.Logger
	mu    sync.Mutex
	turns map[string]*turnPreview
	pause time.Time // rate limited: no preview call before this
}

type turnPreview struct {
	mu       sync.Mutex
	sk       events.SessionKey
	message  int
	text     strings.Builder
	lastSeq  uint64
	msgID    string
	shown    string
	lastEdit time.Time
	taken    bool
	touched  time.Time
	replyTo  string
	pending  bool
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
			wait := max(p.interval()-time.Since(t.lastEdit), 0)
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
		s = string([]rune(s)[:DefaultChunkLimit-2])
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
	if wait > 0 {
		t.pending = true
		time.AfterFunc(wait, func() { p.flush(ctx, turnID, t) })
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	t.lastEdit = time.Now()
	channel := t.sk.Scene
	text := escaper.Replace(s + " …")
	if t.msgID == "" {
		if t.replyTo == "" {
			t.replyTo = p.lastInbound(cctx, t.sk)
		}
		opts := []slackapi.MsgOption{slackapi.MsgOptionText(text, false), slackapi.MsgOptionDisableLinkUnfurl()}
		if th := threadFor(t.sk.Scope, t.replyTo); th != "" {
			opts = append(opts, slackapi.MsgOptionTS(th))
		}
		ch, ts, err := p.api.PostMessageContext(cctx, channel, opts...)
		if err != nil {
			p.backoff(turnID, classify("chat.postMessage", err))
			return
		}
		if ch == "" {
			ch = channel
		}
		t.msgID = MessageID(ch, ts, "")
	} else {
		ts, _ := splitMessageID(t.msgID)
		if _, _, _, err := p.api.UpdateMessageContext(cctx, channel, ts, slackapi.MsgOptionText(text, false)); err != nil {
			p.backoff(turnID, classify("chat.update", err))
			return
		}
	}
	t.shown = s
}

// backoff honours a 429: the next preview call of any turn waits retry_after.
func (p *previewer) backoff(turnID string, err error) {
	p.log.Debug("slack: preview not shown", "turn", turnID, "err", err)
	var e *im.Error
	if errors.As(err, &e) && e.RetryAfter > 0 {
		p.mu.Lock()
		p.pause = time.Now().Add(e.RetryAfter)
		p.mu.Unlock()
	}
}

// lastInbound is the message id of the session's last inbound message, for the preview's
// message_reference.
func (p *previewer) lastInbound(ctx context.Context, sk events.SessionKey) string {
	if p.o.JS == nil {
		return ""
	}
	s, err := p.o.JS.Stream(ctx, events.StreamIMIn)
	if err != nil {
		return ""
	}
	m, err := s.GetLastMsgForSubject(ctx, events.IMInSubject(sk))
	if err != nil {
		return ""
	}
	var ev events.Event[events.IMMessage]
	if json.Unmarshal(m.Data, &ev) != nil {
		return ""
	}
	return ev.Data.MessageID
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
