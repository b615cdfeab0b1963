package telegram

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
	"github.com/agentbus/agentbus/pkg/im/telegram/telegramtest"
)

// TestFloodControlPerChat (issue 37): after a 429 with retry_after on a send to a chat, every
// later send and edit to that chat waits at least retry_after, whichever path makes it (the
// reply sender, the streaming previewer), while other chats are not held; egress is not asked
// to pause the whole platform. The fake bans a chat as Telegram does and counts every call that
// reaches it during the ban.
func TestFloodControlPerChat(t *testing.T) {
	const token = "123:flood"
	fake := telegramtest.New(t, token, 9, "floodbot")
	bot := config.TelegramBot{ID: "tg1", Token: token, APIBase: fake.URL()}
	s, err := NewSender([]config.TelegramBot{bot}, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ed := editor{newClient(bot, nil)} // the previewer's client: its own, like in another goroutine of egress
	out := func(chat, text string) events.Outbound {
		return events.Outbound{OutID: "o-" + chat + "-" + text, Platform: Platform, Bot: "tg1",
			Scene: events.Scene{Type: "private", ID: chat}, Content: events.Segments{events.TextSeg(text)}, Final: true}
	}
	send := func(o events.Outbound) <-chan error {
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := s.Send(ctx, o)
			done <- err
		}()
		return done
	}
	callsTo := func(chat string) []telegramtest.Call {
		var got []telegramtest.Call
		for _, c := range fake.Calls() {
			if c.Params.Get("chat_id") == chat {
				got = append(got, c)
			}
		}
		return got
	}

	// The reply path gets the 429: it waits and sends again; meanwhile the previewer's edit to
	// that chat is not made, and a reply to another chat goes out at once.
	const ra = 3
	fake.FailNext("sendMessage", ra, 429)
	first := send(out("41", "one"))
	banned := fake.WaitCalls(1, 30*time.Second, func(c telegramtest.Call) bool { return c.Status == 429 })[0]
	// The previewer's edit comes once the sender has read the 429 (one made while the answer
	// is still on its way reaches Telegram: nothing can know of the ban yet).
	testwait.Eventually(t, 0, func() error {
		return testwait.Want(ed.c.gates.remaining(41) != 0, "the 429 never held the chat")
	})
	err = ed.EditPreview(context.Background(), events.SessionKey{Platform: Platform, Bot: "tg1", Scope: "private", Scene: "41"}, "41_7", "preview …")
	var e *im.Error
	if !errors.As(err, &e) || e.RetryAfter != 0 || im.IsPermanent(err) {
		t.Fatalf("preview edit of a banned chat: %v, want a transient error without a Retry-After", err)
	}
	if err := <-send(out("42", "other")); err != nil {
		t.Fatalf("send to another chat: %v", err)
	}
	other := callsTo("42")
	if err := <-first; err != nil {
		t.Fatalf("send after the 429: %v", err)
	}
	got := callsTo("41")
	if len(got) != 2 || got[1].Status != 200 {
		t.Fatalf("calls to the banned chat: %+v, want the 429 and one send after the ban", got)
	}
	if wait := got[1].Time.Sub(banned.Time); wait < ra*time.Second {
		t.Errorf("the next send to the chat went out %v after the 429, want at least retry_after %ds", wait, ra)
	}
	if len(other) != 1 || !other[0].Time.Before(got[1].Time) {
		t.Errorf("the other chat's send (%+v) waited for the banned chat's ban", other)
	}
	t.Logf("banned chat: next send %v after the 429; other chat sent %v after it",
		got[1].Time.Sub(banned.Time).Round(time.Millisecond), other[0].Time.Sub(banned.Time).Round(time.Millisecond))

	// The previewer gets the 429: the reply to that chat waits for the ban too.
	fake.FailNext("sendMessage", 2, 429)
	sk := events.SessionKey{Platform: Platform, Bot: "tg1", Scope: "private", Scene: "43"}
	if _, err := ed.SendPreview(context.Background(), sk, "", "preview …"); err == nil {
		t.Fatal("the preview send was not refused")
	} else if errors.As(err, &e) && e.RetryAfter != 0 {
		t.Fatalf("preview 429 asks egress to pause the platform: %v", err)
	}
	if err := <-send(out("43", "reply")); err != nil {
		t.Fatalf("reply after the preview's 429: %v", err)
	}
	got = callsTo("43")
	if len(got) != 2 || got[1].Time.Sub(got[0].Time) < 2*time.Second {
		t.Errorf("calls to the chat: %+v, want the reply at least 2 s after the preview's 429", got)
	}
	if n := fake.FloodViolations(); n != 0 {
		t.Errorf("%d calls reached a chat during its flood-control ban", n)
	}
}
