package telegram

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"

	"github.com/agentbus/agentbus/pkg/im"
)

// Flood control per chat. Telegram answers 429 with parameters.retry_after when a chat gets
// messages too fast, and escalates the ban when the bot sends to that chat again before it is
// over. The wait is kept per bot and chat in one place shared by every client of the bot in the
// process (the sender's replies, its edits of a streaming preview, and the previewer), so that
// a 429 on any path holds every later send and edit to that chat, while other chats go on.
// The sender waits for its chat (within its ctx) and tries again once; the previewer, whose
// edits are cosmetic, skips a held chat instead of waiting. A 429 handled so is returned to
// egress as a transient error without a Retry-After, which would pause every chat of the
// platform.

// floodGates maps "<apiBase> <token>" to the bot's chatGates.
var floodGates sync.Map

// chatGates is when each chat of one bot may be sent to again. Safe for concurrent use.
type chatGates struct {
	mu    sync.Mutex
	until map[int64]time.Time
}

func gatesFor(apiBase, token string) *chatGates {
	g, _ := floodGates.LoadOrStore(apiBase+" "+token, &chatGates{until: map[int64]time.Time{}})
	return g.(*chatGates)
}

// remaining is how long chat is still held (0: not held).
func (g *chatGates) remaining(chat int64) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	u, ok := g.until[chat]
	if !ok {
		return 0
	}
	d := time.Until(u)
	if d <= 0 {
		delete(g.until, chat)
		return 0
	}
	return d
}

// hold holds chat for d from now (a later, longer hold wins). Expired holds are dropped as
// the map grows, so it holds only the chats under a ban.
func (g *chatGates) hold(chat int64, d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	until := time.Now().Add(d)
	if u, ok := g.until[chat]; !ok || until.After(u) {
		g.until[chat] = until
	}
	if len(g.until) > 1024 {
		now := time.Now()
		for c, u := range g.until {
			if !u.After(now) {
				delete(g.until, c)
			}
		}
	}
}

// floodWait returns Telegram's retry_after of a 429 (0 for any other error).
func floodWait(err error) time.Duration {
	var te *tgbotapi.Error
	if errors.As(err, &te) && te.Code == http.StatusTooManyRequests && te.RetryAfter > 0 {
		return time.Duration(te.RetryAfter) * time.Second
	}
	return 0
}

// inChat makes one API call to chat that honours the chat's flood control: it first waits
// out a hold (wait: within ctx; a hold longer than ctx allows is an error at once; !wait: a
// held chat is an error at once), and a 429 holds the chat for retry_after, after which a
// waiting call tries once more. It returns the call's error unclassified.
func (c *client) inChat(ctx context.Context, chat int64, wait bool, call func(*tgbotapi.BotAPI) error) error {
	for attempt := 0; ; attempt++ {
		if d := c.gates.remaining(chat); d > 0 {
			dl, limited := ctx.Deadline()
			if !wait || limited && time.Until(dl) < d {
				return &heldError{chat: chat, d: d}
			}
			if !im.Sleep(ctx, d) {
				return ctx.Err()
			}
		}
		err := call(c.api(ctx))
		d := floodWait(err)
		if d == 0 {
			return err
		}
		c.gates.hold(chat, d)
		if !wait || attempt > 0 {
			return err
		}
	}
}

// heldError: a call not made because its chat is under Telegram's flood control.
type heldError struct {
	chat int64
	d    time.Duration
}

func (e *heldError) Error() string {
	return fmt.Sprintf("chat %d is under Telegram's flood control for %s more", e.chat, e.d.Round(time.Millisecond))
}

// classifyChat is classify for calls made through inChat: a 429 (or a held chat) is transient
// without a Retry-After, since the chat's hold already makes the next call to it wait and
// egress would pause every chat of the platform for it.
func classifyChat(method string, err error) error {
	var held *heldError
	if errors.As(err, &held) {
		return &im.Error{Platform: Platform, Action: method, Code: http.StatusTooManyRequests, Msg: held.Error()}
	}
	err = classify(method, err)
	var e *im.Error
	if errors.As(err, &e) && e.Code == http.StatusTooManyRequests {
		e.RetryAfter = 0
	}
	return err
}
