package telegram

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
	"github.com/agentbus/agentbus/pkg/im/telegram/telegramtest"
)

var testCard = events.Card{Title: "Deploy <v1.4>?", Text: "Staging is **green**.",
	Fields:  []events.CardField{{Name: "env", Value: "prod & eu"}},
	Buttons: []events.CardButton{{Label: "Deploy", Value: "deploy v1.4"}, {Label: "Changelog", URL: "https://example.com/changes"}}}

// TestCardOnTheWire (issue 39): a card part goes out as one sendMessage with an HTML text and
// an inline keyboard; pressing its value button (a callback_query carrying that keyboard, as
// Telegram sends it) comes back as an inbound message from the presser, and is answered;
// forged, oversized and message-less presses are answered and not ingested.
func TestCardOnTheWire(t *testing.T) {
	const token = "123:cards"
	fake := telegramtest.New(t, token, 9, "cardbot")
	bot := config.TelegramBot{ID: "tg1", Token: token, APIBase: fake.URL()}
	s, err := NewSender([]config.TelegramBot{bot}, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out := events.Outbound{OutID: "t1-1", Turn: "t1", Part: 1, Platform: Platform, Bot: "tg1",
		Scene: events.Scene{Type: "group", ID: "-100"}, Content: events.Segments{events.CardSeg(testCard)}, Final: true}
	if _, err := s.Send(ctx, out); err != nil {
		t.Fatal(err)
	}
	sent := fake.WaitCalls(1, 10*time.Second, func(c telegramtest.Call) bool { return c.Method == "sendMessage" })[0]
	if got, want := sent.Params.Get("text"), "<b>Deploy &lt;v1.4&gt;?</b>\nStaging is <b>green</b>.\n<b>env:</b> prod &amp; eu"; got != want {
		t.Fatalf("card text %q, want %q", got, want)
	}
	if sent.Params.Get("parse_mode") != "HTML" {
		t.Fatalf("parse_mode %q", sent.Params.Get("parse_mode"))
	}
	var markup map[string]any
	if err := json.Unmarshal([]byte(sent.Params.Get("reply_markup")), &markup); err != nil {
		t.Fatalf("reply_markup %q: %v", sent.Params.Get("reply_markup"), err)
	}
	want := []any{
		[]any{map[string]any{"text": "Deploy", "callback_data": "deploy v1.4"}},
		[]any{map[string]any{"text": "Changelog", "url": "https://example.com/changes"}},
	}
	if !reflect.DeepEqual(markup["inline_keyboard"], want) {
		t.Fatalf("inline_keyboard %v, want %v", markup["inline_keyboard"], want)
	}

	// Presses come back through getUpdates.
	var mu sync.Mutex
	var got []*events.IMMessage
	sink := im.SinkFunc(func(_ context.Context, m *events.IMMessage) error {
		mu.Lock()
		got = append(got, m)
		mu.Unlock()
		return nil
	})
	in, err := NewInbound(InboundOptions{Bot: bot, Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	cardMsg := fake.Message(501, -100, "supergroup", 9, sent.Params.Get("text"))
	cardMsg["reply_markup"] = markup
	fake.AddCallbackQuery("cq-forged", 77, "rm -rf /", cardMsg)
	fake.AddCallbackQuery("cq-long", 77, strings.Repeat("x", 65), cardMsg)
	fake.AddCallbackQuery("cq-gone", 77, "deploy v1.4", nil)
	fake.AddCallbackQuery("cq-ok", 77, "deploy v1.4", cardMsg)
	polled := make(chan error, 1)
	pctx, stop := context.WithCancel(ctx)
	go func() { polled <- in.poll(pctx) }()
	answers := fake.WaitCalls(4, 20*time.Second, func(c telegramtest.Call) bool { return c.Method == "answerCallbackQuery" })
	stop()
	<-polled
	var answered []string
	for _, a := range answers {
		answered = append(answered, a.Params.Get("callback_query_id"))
	}
	if w := []string{"cq-forged", "cq-long", "cq-gone", "cq-ok"}; !reflect.DeepEqual(answered, w) {
		t.Fatalf("answered %v, want %v", answered, w)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 {
		t.Fatalf("ingested %d presses, want 1 (the real one): %+v", len(got), got)
	}
	m := got[0]
	if m.MessageID != "press:cq-ok" || m.Sender.ID != "77" || m.Scene != (events.Scene{Type: "group", ID: "-100", Name: "chat"}) || !m.MentionsBot {
		t.Fatalf("press message %+v", m)
	}
	if txt := m.Content.PlainText(); txt != "[pressed button: Deploy] deploy v1.4" {
		t.Fatalf("press text %q", txt)
	}
}
