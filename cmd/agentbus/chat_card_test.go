package main

import (
	"testing"

	"github.com/agentbus/agentbus/pkg/events"
)

// The console chat shows a card as its plain text (it has no buttons; the user answers in
// words), not as "[card]".
func TestRenderSegmentsCard(t *testing.T) {
	card := events.CardSeg(events.Card{Title: "Lunch?", Fields: []events.CardField{{Name: "when", Value: "12:30"}},
		Buttons: []events.CardButton{{Label: "Pizza", Value: "pizza"}}})
	if got, want := renderSegments(events.Segments{card}), "Lunch?\nwhen: 12:30\n[Pizza]"; got != want {
		t.Fatalf("renderSegments = %q, want %q", got, want)
	}
}
