package matrix

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

// Streaming previews and typing. While a turn streams (agent.live.<sk>, core NATS), the
// previewer of a bot sends typing notifications (every typingEvery, for typingTimeout) and,
// unless preview is "off", shows the reply as it grows in one room message: sent once there
// are a few words, as a rich reply to the session's last inbound message, then replaced with
// m.replace edits at most once per previewIntervalMs ("partial") or once per finished
// paragraph ("block"). Preview text is plain (half a Markdown construct cannot break it).
//
// Exactly one egress replica runs a bot's previewer (im.Hold on "im-conn.matrix-preview.
// <bot>"). When egress delivers part 0 of the turn's reply, the sender asks the previewer on
// PreviewSubject(bot) to hand the turn over: the previewer stops editing it, waits for an
// edit in flight and answers with the preview's event id, which the sender replaces with the
// final, formatted text (one more m.replace). The reply's receipt carries the preview's event
// id: it is the message clients show.

// PreviewSubject is where the previewer of bot takes hand-over requests.
func PreviewSubject(bot string) string {
	return "im.preview." + Platform + "." + events.EncodeToken(bot)
}

type takeRequest struct {
	Turn string `json:"turn"`
}

type takeAnswer struct {
	EventID string `json:"eventId,omitempty"`
}

func previewMode(b config.MatrixBot) string {
	if b.Preview == "" {
		return "partial"
	}
	return b.Preview
}

// minPreview is how much text a preview needs before it is first shown.
const minPreview = 12

const (
	typingEvery   = 4 * time.Second
	typingTimeout = 6 * time.Second
)

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

// RunPreviewer runs the bot's previewer (typing, and previews unless preview is "off")
// while this replica holds its lease, until ctx ends; it returns ctx's error.
func RunPreviewer(ctx context.Context, o PreviewerOptions) error {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	log := o.Log.With("platform", Platform, "bot", o.Bot.ID)
	c, err := newClient(o.Bot, o.HTTP)
	if err != nil {
		return err
	}
	return im.Hold(ctx, im.HoldOptions{JS: o.JS, Key: im.ConnKey(Platform+"-preview", o.Bot.ID), Owner: o.Owner, TTL: o.TTL, Log: log},
		func(ctx context.Context) error {
			p := &previewer{o: o, c: c, log: log, turns: map[string]*turnPreview{}}
			return p.run(ctx)
		})
}

type previewer struct {
	o     PreviewerOptions
	c     *mautrix.Client
	log   *slog.Logger
	mu    sync.Mutex
	turns map[string]*turnPreview
	pause time.Time      // rate limited: no preview call before this
	wg    sync.WaitGroup // typing calls in flight; run waits for them
}

type turnPreview struct {
	mu       sync.Mutex
	sk       events.SessionKey
	room     id.RoomID
	message  int // the turn's message index being shown
	text     strings.Builder
	lastSeq  uint64
	evID     id.EventID
	shown    string
	edits    int
	lastEdit time.Time
	lastType time.Time
	taken    bool
	touched  time.Time
	pending  bool // an edit is scheduled
}

func (p *previewer) interval() time.Duration {
	if ms := p.o.Bot.PreviewIntervalMs; ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return 1500 * time.Millisecond
}

func (p *previewer) run(ctx context.Context) error {
	defer p.wg.Wait() // after the subscriptions are gone
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

func (p *previewer) turn(turnID string, sk events.SessionKey) *turnPreview {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.turns[turnID]
	if !ok {
		t = &turnPreview{sk: sk, room: id.RoomID(sk.Scene)}
		p.turns[turnID] = t
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
			p.wg.Go(func() { p.typing(ctx, t.room) })
		}
		if d.Kind != "text_delta" || previewMode(p.o.Bot) == "off" {
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
// paragraph ("block"), capped at the chunk limit.
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
	if limit := chunkLimit(p.o.Bot) - 2; utf8.RuneCountInString(s) > limit {
		s = string([]rune(s)[:limit])
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
	if wait > 0 { // rate limited: try again once the pause is over
		t.pending = true
		time.AfterFunc(wait, func() { p.flush(ctx, turnID, t) })
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	t.lastEdit = time.Now()
	c := &event.MessageEventContent{MsgType: event.MsgText, Body: s + " …", Mentions: &event.Mentions{}}
	if t.evID == "" {
		reply := p.lastInbound(cctx, t.sk)
		th := thread{root: threadOf(cctx, p.c, t.room, reply)}
		c.RelatesTo = th.rel(reply)
		resp, err := p.c.SendMessageEvent(cctx, t.room, event.EventMessage, c, mautrix.ReqSendEvent{TransactionID: txnID("preview", turnID, 0)})
		if err != nil {
			p.backoff(turnID, classify("send", err))
			return
		}
		t.evID = resp.EventID
	} else {
		c.SetEdit(t.evID)
		if _, err := p.c.SendMessageEvent(cctx, t.room, event.EventMessage, c, mautrix.ReqSendEvent{TransactionID: txnID("preview", turnID, t.edits+1)}); err != nil {
			p.backoff(turnID, classify("edit", err))
			return
		}
		t.edits++
	}
	t.shown = s
}

// backoff honours a 429: no preview call of any turn before retry_after_ms.
func (p *previewer) backoff(turnID string, err error) {
	p.log.Debug("matrix: preview not shown", "turn", turnID, "err", err)
	if e, ok := err.(*im.Error); ok && e.RetryAfter > 0 {
		p.mu.Lock()
		p.pause = time.Now().Add(e.RetryAfter)
		p.mu.Unlock()
	}
}

// lastInbound is the event id of the session's last inbound message (the one the turn most
// likely answers), which the preview replies to.
func (p *previewer) lastInbound(ctx context.Context, sk events.SessionKey) id.EventID {
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
	return id.EventID(ev.Data.MessageID)
}

func (p *previewer) typing(ctx context.Context, room id.RoomID) {
	p.mu.Lock()
	paused := time.Now().Before(p.pause)
	p.mu.Unlock()
	if paused {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := p.c.UserTyping(cctx, room, true, typingTimeout); err != nil {
		p.log.Debug("matrix: typing", "err", classify("typing", err))
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
	b, _ := json.Marshal(takeAnswer{EventID: t.evID.String()})
	t.mu.Unlock()
	_ = msg.Respond(b)
}
