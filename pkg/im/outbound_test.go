package im

import (
	"reflect"
	"testing"

	"github.com/agentbus/agentbus/pkg/events"
)

// TestPlanCardAsText: with RenderText (platforms without native cards) a card is its plain
// text in the chunk's text message, on lines of its own.
func TestPlanCardAsText(t *testing.T) {
	card := events.CardSeg(events.Card{Title: "Lunch?", Buttons: []events.CardButton{{Label: "Pizza", Value: "pizza"}}})
	for _, tc := range []struct {
		name    string
		content events.Segments
		want    []Planned
	}{
		{"card alone", events.Segments{card}, []Planned{{Text: "Lunch?\n[Pizza]"}}},
		{"text then card", events.Segments{events.TextSeg("Choose:"), card}, []Planned{{Text: "Choose:\nLunch?\n[Pizza]"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Plan(Chunks(tc.content, 0), RenderText, nil); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Plan = %#v, want %#v", got, tc.want)
			}
		})
	}
}
