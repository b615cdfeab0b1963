package onebot_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im/onebot"
	"github.com/agentbus/agentbus/pkg/im/onebot/onebottest"
)

// TestCardOnTheWire (issue 39): OneBot/QQ has no buttons a bot can send, so a card part is
// one send_msg whose message is one text segment with the card's plain text: title, text,
// "name: value" per field, "[label] url" / "[label]" per button.
func TestCardOnTheWire(t *testing.T) {
	fake := onebottest.New(t, "tok", 10001)
	bot := config.OneBotBot{ID: "qq1", SelfID: "10001", Mode: onebot.ModeHTTP, APIBase: fake.HTTPURL(), AccessToken: "tok"}
	s, err := onebot.NewSender([]config.OneBotBot{bot}, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	card := events.Card{Title: "Lunch?", Text: "Pick one.", Fields: []events.CardField{{Name: "when", Value: "12:30"}},
		Buttons: []events.CardButton{{Label: "Pizza", Value: "pizza"}, {Label: "Menu", URL: "https://example.com/menu"}}}
	out := events.Outbound{OutID: "t1-1", Turn: "t1", Part: 1, Platform: onebot.Platform, Bot: "qq1",
		Scene: events.Scene{Type: "group", ID: "777"}, Content: events.Segments{events.CardSeg(card)}, Final: true}
	if _, err := s.Send(context.Background(), out); err != nil {
		t.Fatal(err)
	}
	c := fake.WaitCalls(1, 10*time.Second, func(c onebottest.Call) bool { return c.Action == "send_msg" })[0]
	segs := c.Segments()
	if len(segs) != 1 || segs[0]["type"] != "text" {
		t.Fatalf("message %v, want one text segment", segs)
	}
	if got, want := c.Text(), "Lunch?\nPick one.\nwhen: 12:30\n[Pizza]\n[Menu] https://example.com/menu"; got != want {
		t.Fatalf("card text %q, want %q", got, want)
	}
}
