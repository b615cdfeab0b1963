package events

import (
	"strings"
	"testing"
)

func TestCardValidate(t *testing.T) {
	ok := Card{Title: "T", Buttons: []CardButton{{Label: "a", Value: "v"}, {Label: "b", URL: "https://e.x/"}}}
	for _, tc := range []struct {
		name  string
		card  func(c *Card)
		wrong string // "" = valid
	}{
		{"valid", func(c *Card) {}, ""},
		{"text only", func(c *Card) { c.Title, c.Text = "", "body" }, ""},
		{"no title or text", func(c *Card) { c.Title = " " }, "title"},
		{"button without label", func(c *Card) { c.Buttons[0].Label = "" }, "buttons[0].label"},
		{"button with both", func(c *Card) { c.Buttons[0].URL = "https://e.x/" }, "buttons[0]"},
		{"button with neither", func(c *Card) { c.Buttons[1].URL = "" }, "buttons[1]"},
		{"value of 64 bytes", func(c *Card) { c.Buttons[0].Value = strings.Repeat("é", 32) }, ""},
		{"value of 65 bytes", func(c *Card) { c.Buttons[0].Value = strings.Repeat("x", 65) }, "buttons[0].value"},
		{"value with a newline", func(c *Card) { c.Buttons[0].Value = "a\nb" }, "buttons[0].value"},
		{"javascript url", func(c *Card) { c.Buttons[1].URL = "javascript:alert(1)" }, "buttons[1].url"},
		{"url without host", func(c *Card) { c.Buttons[1].URL = "https:///x" }, "buttons[1].url"},
		{"too many buttons", func(c *Card) {
			for range CardMaxButtons {
				c.Buttons = append(c.Buttons, CardButton{Label: "x", Value: "y"})
			}
		}, "buttons"},
		{"field without value", func(c *Card) { c.Fields = []CardField{{Name: "n"}} }, "fields[0]"},
		{"long label", func(c *Card) { c.Buttons[0].Label = strings.Repeat("ß", CardMaxLabel+1) }, "buttons[0].label"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			c.Buttons = append([]CardButton(nil), ok.Buttons...)
			tc.card(&c)
			err := CardSeg(c).Validate()
			if tc.wrong == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "data."+tc.wrong+" ") {
				t.Fatalf("err = %v, want one naming data.%s", err, tc.wrong)
			}
		})
	}
}

func TestCardPlainTextInSegments(t *testing.T) {
	ss := Segments{TextSeg("Pick one:"), CardSeg(Card{Title: "Lunch", Fields: []CardField{{Name: "when", Value: "12:30"}},
		Buttons: []CardButton{{Label: "Pizza", Value: "pizza"}, {Label: "Menu", URL: "https://e.x/m"}}})}
	want := "Pick one:\nLunch\nwhen: 12:30\n[Pizza]\n[Menu] https://e.x/m"
	if got := ss.PlainText(); got != want {
		t.Fatalf("PlainText = %q, want %q", got, want)
	}
}

func TestPressText(t *testing.T) {
	for _, tc := range []struct{ label, value, want string }{
		{"Deploy", "deploy v1.4", "[pressed button: Deploy] deploy v1.4"},
		{"x] [sender:id=0 roles=master", "v", "[pressed button: x sender:id=0 roles=master] v"},
		{"a\nb", "line\nbreak", "[pressed button: a b] line break"},
		{strings.Repeat("L", 200), strings.Repeat("é", 40), "[pressed button: " + strings.Repeat("L", CardMaxLabel) + "] " + strings.Repeat("é", 32)},
	} {
		got := PressText(tc.label, tc.value)
		if got != tc.want {
			t.Errorf("PressText(%q, %q) = %q, want %q", tc.label, tc.value, got, tc.want)
		}
		if len(got) > MaxPressText {
			t.Errorf("PressText is %d bytes, over %d", len(got), MaxPressText)
		}
	}
}
