package im

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
)

// Streaming previews and typing, shared by the adapters whose platform can edit a message.
//
// While a turn streams (agent.live.<sk>, core NATS), the previewer of a bot shows the reply as
// it grows in one platform message: sent once there are a few words (MinPreview runes), then
// edited at most once per Interval ("partial") or once per finished paragraph ("block"),
// with " …" appended. While the turn runs (from its first live delta until its reply is
// handed over, or nothing streamed for TypingIdle) the typing indicator is re-sent every
// TypingEvery on platforms that have one, previews on or off.
//
// Exactly one egress replica runs a bot's previewer (Hold on "im-conn.<platform>-preview.
// <bot>"), so a turn's deltas are shown once whichever replica delivers its reply. When egress
// delivers part 0 of the turn's reply, the sender calls TakePreview: the previewer stops
// editing that turn for good (and stops typing), waits for an edit in flight, and answers with
// the preview's message id, which the sender then edits into the final text (SendPart). A
// preview lost on the way is harmless: the final message always arrives through IM_OUT.

// Preview modes (config im.<platform>.bots[].preview).
const (
	PreviewOff     = "off"
	PreviewPartial = "partial"
	PreviewBlock   = "block"
)

// MinPreview is how much text a preview needs before it is first shown.
const MinPreview = 12

// TypingIdle ends the typing indicator of a turn that streamed nothing for this long (a turn
// that failed, or one whose reply went out through another path).
const TypingIdle = time.Minute

// PreviewEditor is what a platform gives the previewer: posting and editing one message.
// Errors should be *Error values (so a RetryAfter pauses every preview of the bot). Calls for
// one turn come one at a time; calls for different turns may be concurrent. ctx bounds the
// call.
type PreviewEditor interface {
	// SendPreview posts text as a new message in sk's scene, threaded to replyTo (the bus
	// message id of the session's last inbound message, "" when unknown), and returns the
	// message's id in the form the platform's sender accepts back in EditPreview.
	SendPreview(ctx context.Context, sk events.SessionKey, replyTo, text string) (string, error)
	// EditPreview replaces the text of the preview message id.
	EditPreview(ctx context.Context, sk events.SessionKey, id, text string) error
}

// Typer is the optional capability of a PreviewEditor whose platform has a typing indicator.
type Typer interface {
	// Typing shows the indicator in sk's scene (for a few seconds: the previewer repeats it).
	Typing(ctx context.Context, sk events.SessionKey) error
}

// PreviewOptions configure RunPreviewer.
type PreviewOptions struct {
	Platform string
	Bot      string
	// Mode is off, partial or block ("" = partial). With off, only typing runs.
	Mode string
	// Interval is the least time between two edits of a preview (default 1 s).
	Interval time.Duration
	// Limit caps the preview text in runes (the platform's message limit; 0 = none).
	Limit int
	// TypingEvery is how often typing is re-sent while a turn runs (0 = no typing, also when
	// Editor is no Typer).
	TypingEvery time.Duration
	Editor      PreviewEditor
	NC          *nats.Conn
	// JS holds the previewer lease and reads the chat's last inbound message (LastInbound)
	// for the turn's reply target.
	JS    jetstream.JetStream
	Owner string
	TTL   time.Duration
	Log   *slog.Logger
}

// PreviewSubject is where the previewer of bot on platform takes hand-over requests:
// im.preview.<platform>.<bot>.
func PreviewSubject(platform, bot string) string {
	return "im.preview." + events.EncodeToken(platform) + "." + events.EncodeToken(bot)
}

type takeRequest struct {
	Turn string `json:"turn"`
}

type takeAnswer struct {
	MessageID string `json:"messageId,omitempty"`
}

// TakePreview asks the previewer of bot for turn's preview message and makes it stop editing
// it and stop typing; "" when there is none (no previewer running, nothing shown yet). It
// waits at most 5 s (within ctx).
func TakePreview(ctx context.Context, nc *nats.Conn, platform, bot, turn string) string {
	if nc == nil || turn == "" {
		return ""
	}
	b, _ := json.Marshal(takeRequest{Turn: turn})
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	msg, err := nc.RequestWithContext(rctx, PreviewSubject(platform, bot), b)
	if err != nil {
		return ""
	}
	var ans takeAnswer
	if json.Unmarshal(msg.Data, &ans) != nil {
		return ""
	}
	return ans.MessageID
}

// RunPreviewer runs the bot's previewer while this replica holds its lease, until ctx ends;
// it returns ctx's error. With mode off and no typing it holds nothing and waits. ctx bounds
// everything it started: when RunPreviewer returns, its goroutines have ended.
func RunPreviewer(ctx context.Context, o PreviewOptions) error {
	if o.Editor == nil || o.NC == nil || o.Platform == "" || o.Bot == "" {
		return errors.New("im: RunPreviewer needs Platform, Bot, Editor and NC")
	}
	if o.Mode == "" {
		o.Mode = PreviewPartial
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if _, ok := o.Editor.(Typer); !ok {
		o.TypingEvery = 0
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Mode == PreviewOff && o.TypingEvery == 0 {
		<-ctx.Done()
		return ctx.Err()
	}
	log := o.Log.With("platform", o.Platform, "bot", o.Bot)
	return Hold(ctx, HoldOptions{JS: o.JS, Key: ConnKey(o.Platform+"-preview", o.Bot), Owner: o.Owner, TTL: o.TTL, Log: log},
		func(ctx context.Context) error {
			p := &previewer{o: o, log: log, turns: map[string]*turnPreview{}}
			return p.run(ctx)
		})
}

type previewer struct {
	o      PreviewOptions
	log    *slog.Logger
	wmu    sync.Mutex // guards wg.Add against the final Wait
	wg     sync.WaitGroup
	closed bool
	// mu guards turns and pause. Lock order: a turn's mu before mu, never the other way.
	mu    sync.Mutex
	turns map[string]*turnPreview
	pause time.Time // rate limited: no preview call before this
}

type turnPreview struct {
	mu       sync.Mutex
	sk       events.SessionKey
	message  int // the turn's message index being shown
	text     strings.Builder
	lastSeq  uint64
	msgID    string
	shown    string
	lastEdit time.Time
	lastLive time.Time
	typing   bool // a typing loop runs
	taken    bool
	touched  time.Time
	replyTo  string
	pending  bool // an edit is scheduled
}

func (p *previewer) run(ctx context.Context) error {
	defer func() {
		p.wmu.Lock()
		p.closed = true
		p.wmu.Unlock()
		p.wg.Wait()
	}()
	live, err := p.o.NC.Subscribe(events.PrefixAgentLive+".>", p.onDelta(ctx))
	if err != nil {
		return fmt.Errorf("im: preview: %w", err)
	}
	defer func() { _ = live.Unsubscribe() }()
	take, err := p.o.NC.Subscribe(PreviewSubject(p.o.Platform, p.o.Bot), p.onTake)
	if err != nil {
		return fmt.Errorf("im: preview: %w", err)
	}
	defer func() { _ = take.Unsubscribe() }()
	gc := time.NewTicker(time.Minute)
	defer gc.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-gc.C:
			p.gc(15 * time.Minute)
		}
	}
}

// gc forgets turns not touched for age (turn locks are taken without mu held).
func (p *previewer) gc(age time.Duration) {
	p.mu.Lock()
	all := make(map[string]*turnPreview, len(p.turns))
	for id, t := range p.turns {
		all[id] = t
	}
	p.mu.Unlock()
	for id, t := range all {
		t.mu.Lock()
		old := time.Since(t.touched) > age
		t.mu.Unlock()
		if old {
			p.mu.Lock()
			if p.turns[id] == t {
				delete(p.turns, id)
			}
			p.mu.Unlock()
		}
	}
}

// spawn runs f in a goroutine the previewer waits for; after the previewer stopped, nothing.
func (p *previewer) spawn(f func()) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.closed {
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		f()
	}()
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

// later runs f after d in a goroutine the previewer waits for (unless ctx ended first).
func (p *previewer) later(ctx context.Context, d time.Duration, f func()) {
	p.spawn(func() {
		if Sleep(ctx, d) {
			f()
		}
	})
}

func (p *previewer) onDelta(ctx context.Context) nats.MsgHandler {
	return func(msg *nats.Msg) {
		sk, err := events.ParseAgentLiveSubject(msg.Subject)
		if err != nil || sk.Platform != p.o.Platform || sk.Bot != p.o.Bot || ctx.Err() != nil {
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
		t.lastLive = time.Now()
		if p.o.TypingEvery > 0 && !t.typing {
			t.typing = true
			p.spawn(func() { p.typingLoop(ctx, t) })
		}
		if d.Kind != "text_delta" || p.o.Mode == PreviewOff {
			return
		}
		if d.Message != t.message {
			t.message = d.Message
			t.text.Reset() // a new assistant message after tool calls: show that one
		}
		t.text.WriteString(d.Delta)
		if !t.pending {
			t.pending = true
			p.later(ctx, max(p.o.Interval-time.Since(t.lastEdit), 0), func() { p.flush(ctx, turnID, t) })
		}
	}
}

// typingLoop shows typing in t's scene every TypingEvery until the turn is taken, streamed
// nothing for TypingIdle, or ctx ends.
func (p *previewer) typingLoop(ctx context.Context, t *turnPreview) {
	typer := p.o.Editor.(Typer)
	for {
		t.mu.Lock()
		stop := t.taken || time.Since(t.lastLive) > TypingIdle
		if stop {
			t.typing = false
		}
		sk := t.sk
		t.mu.Unlock()
		if stop {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := typer.Typing(cctx, sk); err != nil {
			p.log.Debug("im: typing", "err", err)
		}
		cancel()
		if !Sleep(ctx, p.o.TypingEvery) {
			return
		}
	}
}

// Visible is what a preview of text shows in mode: everything ("partial") or up to the last
// finished paragraph ("block"), trimmed, capped at limit-2 runes (room for " …"; limit <= 0:
// no cap).
func Visible(text, mode string, limit int) string {
	if mode == PreviewBlock {
		i := strings.LastIndex(text, "\n\n")
		if i < 0 {
			return ""
		}
		text = text[:i]
	}
	text = strings.TrimSpace(text)
	if limit > 2 && utf8.RuneCountInString(text) > limit-2 {
		text = string([]rune(text)[:limit-2])
	}
	return text
}

// flush shows the turn's text now (with t.mu held for the call, so a hand-over waits for it).
func (p *previewer) flush(ctx context.Context, turnID string, t *turnPreview) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pending = false
	if t.taken || ctx.Err() != nil {
		return
	}
	s := Visible(t.text.String(), p.o.Mode, p.o.Limit)
	if utf8.RuneCountInString(s) < MinPreview || s == t.shown {
		return
	}
	p.mu.Lock()
	wait := time.Until(p.pause)
	p.mu.Unlock()
	if wait > 0 { // rate limited: try again once the pause is over
		t.pending = true
		p.later(ctx, wait, func() { p.flush(ctx, turnID, t) })
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	t.lastEdit = time.Now()
	text := s + " …"
	if t.msgID == "" {
		if t.replyTo == "" {
			t.replyTo = p.lastInbound(cctx, t.sk)
		}
		id, err := p.o.Editor.SendPreview(cctx, t.sk, t.replyTo, text)
		if err != nil {
			p.backoff(turnID, err)
			return
		}
		t.msgID = id
	} else if err := p.o.Editor.EditPreview(cctx, t.sk, t.msgID, text); err != nil {
		p.backoff(turnID, err)
		return
	}
	t.shown = s
}

// backoff honours a 429: the next preview call of any turn waits RetryAfter.
func (p *previewer) backoff(turnID string, err error) {
	p.log.Debug("im: preview not shown", "turn", turnID, "err", err)
	var e *Error
	if errors.As(err, &e) && e.RetryAfter > 0 {
		p.log.Info("im: previews paused by the platform's rate limit", "retryAfter", e.RetryAfter)
		p.mu.Lock()
		p.pause = time.Now().Add(e.RetryAfter)
		p.mu.Unlock()
	}
}

// lastInbound is the bus message id of the session's last inbound message (the one the turn
// most likely answers), for the preview's threading (LastInbound: IM_IN or the session inbox).
func (p *previewer) lastInbound(ctx context.Context, sk events.SessionKey) string {
	if p.o.JS == nil {
		return ""
	}
	m, _ := LastInbound(ctx, p.o.JS, sk)
	return m.MessageID
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
