package discord_test

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
	"github.com/agentbus/agentbus/pkg/im/discord"
	"github.com/agentbus/agentbus/pkg/im/discord/discordtest"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

// TestCardOnTheWire (issue 39): a card part is one createMessage with an embed and a row of
// buttons (link style for the URL, custom_id for the value); a press (INTERACTION_CREATE on
// the gateway, carrying the message as Discord does) is acknowledged with a deferred update
// and ingested as a message from the presser; presses of ids that are no button of the
// message, or without the message, are acknowledged and dropped.
func TestCardOnTheWire(t *testing.T) {
	srv := natstest.New(t, natstest.WithMemoryStorage())
	_, js := srv.Connect(t)
	const token, botID = "tok", "900"
	fake := discordtest.New(t, token, botID, "bot")
	bot := config.DiscordBot{ID: "dc1", Token: token, APIBase: fake.URL()}
	s, err := discord.NewSender([]config.DiscordBot{bot}, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	card := events.Card{Title: "Deploy v1.4?", Text: "Staging is green.",
		Fields:  []events.CardField{{Name: "env", Value: "prod", Inline: true}},
		Buttons: []events.CardButton{{Label: "Deploy", Value: "deploy v1.4"}, {Label: "Changelog", URL: "https://example.com/changes"}}}
	out := events.Outbound{OutID: "t1-1", Turn: "t1", Part: 1, Platform: discord.Platform, Bot: "dc1",
		Scene: events.Scene{Type: "group", ID: "c1"}, Content: events.Segments{events.CardSeg(card)}, Final: true}
	if _, err := s.Send(ctx, out); err != nil {
		t.Fatal(err)
	}
	sent := fake.WaitCalls(1, 10*time.Second, func(c discordtest.Call) bool { return c.Route == "createMessage" })[0]
	embeds, _ := sent.Body["embeds"].([]any)
	wantEmbed := map[string]any{"type": "rich", "title": "Deploy v1.4?", "description": "Staging is green.",
		"fields": []any{map[string]any{"name": "env", "value": "prod", "inline": true}}}
	if len(embeds) != 1 || !reflect.DeepEqual(embeds[0], wantEmbed) {
		t.Fatalf("embeds %v, want [%v]", embeds, wantEmbed)
	}
	wantComponents := []any{map[string]any{"type": 1.0, "components": []any{
		map[string]any{"type": 2.0, "style": 1.0, "disabled": false, "label": "Deploy", "custom_id": "ab:deploy v1.4"},
		map[string]any{"type": 2.0, "style": 5.0, "disabled": false, "label": "Changelog", "url": "https://example.com/changes"},
	}}}
	if !reflect.DeepEqual(sent.Body["components"], wantComponents) {
		t.Fatalf("components %v, want %v", sent.Body["components"], wantComponents)
	}

	var mu sync.Mutex
	var got []*events.IMMessage
	sink := im.SinkFunc(func(_ context.Context, m *events.IMMessage) error {
		mu.Lock()
		got = append(got, m)
		mu.Unlock()
		return nil
	})
	in, err := discord.NewInbound(discord.InboundOptions{Bot: bot, Sink: sink, JS: js, Owner: "a", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = in.Run(rctx) }()
	defer func() { stop(); <-done }()
	fake.WaitSessions(1, 30*time.Second)

	cardMsg := map[string]any{"id": sent.Message, "channel_id": "c1", "type": 0, "content": "", "embeds": embeds,
		"components": sent.Body["components"], "author": map[string]any{"id": botID, "username": "bot", "bot": true}}
	press := func(id, customID string, msg map[string]any) map[string]any {
		ic := map[string]any{"id": id, "application_id": botID, "type": 3, "token": "itok-" + id, "version": 1,
			"guild_id": "g1", "channel_id": "c1",
			"member": map[string]any{"nick": "Ann", "user": map[string]any{"id": "u7", "username": "ann"}},
			"data":   map[string]any{"custom_id": customID, "component_type": 2}}
		if msg != nil {
			ic["message"] = msg
		}
		return ic
	}
	fake.DispatchEvent("INTERACTION_CREATE", press("i-forged", "ab:rm -rf /", cardMsg))
	fake.DispatchEvent("INTERACTION_CREATE", press("i-long", "ab:"+strings.Repeat("x", 120), cardMsg))
	fake.DispatchEvent("INTERACTION_CREATE", press("i-nomsg", "ab:deploy v1.4", nil))
	fake.DispatchEvent("INTERACTION_CREATE", press("i-ok", "ab:deploy v1.4", cardMsg))
	acks := fake.WaitCalls(4, 20*time.Second, func(c discordtest.Call) bool { return c.Route == "interactionCallback" })
	for _, a := range acks {
		if typ, _ := a.Body["type"].(float64); typ != 6 || a.Auth != "itok-"+a.Message {
			t.Fatalf("interaction %s answered %v with token %q, want a deferred update (6)", a.Message, a.Body, a.Auth)
		}
	}
	testwait.Eventually(t, 0, func() error {
		mu.Lock()
		defer mu.Unlock()
		return testwait.Want(len(got) >= 1, "the press was not ingested")
	})
	time.Sleep(200 * time.Millisecond) // a wrongly ingested forged press would show by now
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 {
		t.Fatalf("ingested %d presses, want 1: %+v", len(got), got)
	}
	m := got[0]
	if m.MessageID != "i-ok" || m.Sender.ID != "u7" || m.Sender.Name != "Ann" || m.Scene != (events.Scene{Type: "group", ID: "c1"}) || !m.MentionsBot {
		t.Fatalf("press message %+v", m)
	}
	if txt := m.Content.PlainText(); txt != "[pressed button: Deploy] deploy v1.4" {
		t.Fatalf("press text %q", txt)
	}
}
