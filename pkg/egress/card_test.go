package egress

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
	"github.com/agentbus/agentbus/pkg/webhook"
)

// A card part reaches a webhook platform structurally (issue 39): the callback body's content
// holds the card segment with its title, fields and buttons, which the receiver renders.
func TestCardToWebhook(t *testing.T) {
	srv := natstest.New(t)
	cb := newCallback(t, nil)
	start(t, fastOptions(srv, testConfig(cb), t))
	card := events.Card{Title: "Deploy v1.4?", Fields: []events.CardField{{Name: "env", Value: "prod", Inline: true}},
		Buttons: []events.CardButton{{Label: "Deploy", Value: "deploy v1.4"}, {Label: "Changelog", URL: "https://example.com/changes"}}}
	out := outbound("o-card")
	out.Content = events.Segments{events.CardSeg(card)}
	publish(t, srv.JS, out, "o-card")
	select {
	case <-cb.seen:
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery")
	}
	var body struct {
		Content []struct {
			Type string      `json:"type"`
			Data events.Card `json:"data"`
		} `json:"content"`
	}
	if err := json.Unmarshal(cb.get(0).body, &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Content) != 1 || body.Content[0].Type != events.SegCard || !reflect.DeepEqual(body.Content[0].Data, card) {
		t.Fatalf("callback content %s", cb.get(0).body)
	}
	var w webhook.Outbound // the documented body type decodes it too
	if err := json.Unmarshal(cb.get(0).body, &w); err != nil {
		t.Fatal(err)
	}
	if c, ok := w.Content[0].Card(); !ok || !reflect.DeepEqual(c, card) {
		t.Fatalf("webhook.Outbound card %+v", c)
	}
}

// A hook that changes a card part's text replaces the card: its words were in the text the
// hook saw, and the card would show them unchanged.
func TestWithTextDropsCard(t *testing.T) {
	ss := events.Segments{events.CardSeg(events.Card{Title: "secret plan"})}
	got := withText(ss, "[redacted]")
	if want := (events.Segments{events.TextSeg("[redacted]")}); !reflect.DeepEqual(got, want) {
		t.Fatalf("withText = %v, want %v", got, want)
	}
}
