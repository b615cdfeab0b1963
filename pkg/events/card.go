package events

import (
	"net/url"
	"strings"
	"unicode/utf8"
)

// SegCard is a card: a title, a body, fields and buttons (issue 39). data.title, data.text,
// data.fields ([{name, value, inline}]), data.buttons ([{label, url} or {label, value}]).
// Added in wire version 1 as an optional segment type: a consumer that does not know it
// carries it along (unknown segment types are allowed), and Segments.PlainText renders it
// as text, so transcripts, hooks and the console see its words. Adapters render it
// natively where the platform can (pkg/output documents each) and as plain text elsewhere.
const SegCard = "card"

// Bounds of a card, the smallest each platform takes (Discord: 25 fields, 256-character
// titles and field names, 1024-character field values, 80-character button labels;
// Slack: 75-character button texts; Telegram: 64-byte callback data, 4096-character
// messages), so that a valid card renders everywhere without cutting.
const (
	CardMaxTitle      = 256  // characters
	CardMaxText       = 3000 // characters (a Slack section's text limit)
	CardMaxFields     = 25
	CardMaxFieldName  = 256  // characters
	CardMaxFieldValue = 1024 // characters
	CardMaxButtons    = 10
	CardMaxLabel      = 75  // characters
	CardMaxURL        = 512 // bytes
	// CardMaxValue bounds a callback button's value in bytes: Telegram's callback_data holds
	// 64 bytes, and the value travels in it as it is (no id mapping to keep in step across
	// replicas). A longer value is not a valid card (output.Parse falls back to text).
	CardMaxValue = 64
)

// Card is the structured form of a card segment.
type Card struct {
	Title   string       `json:"title,omitempty"`
	Text    string       `json:"text,omitempty"`
	Fields  []CardField  `json:"fields,omitempty"`
	Buttons []CardButton `json:"buttons,omitempty"`
}

// CardField is one name/value pair; Inline asks platforms that lay fields out in columns
// (Discord, Slack) to put it beside its neighbours.
type CardField struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Inline bool   `json:"inline,omitempty"`
}

// CardButton is a link (URL) or a callback button (Value): exactly one of the two is set.
// A press of a callback button comes back as an inbound message (PressText).
type CardButton struct {
	Label string `json:"label"`
	URL   string `json:"url,omitempty"`
	Value string `json:"value,omitempty"`
}

// CardSeg returns the card segment of c. Its data holds only JSON-shaped values (maps,
// slices of any, strings, booleans), the same shape a decoded segment has.
func CardSeg(c Card) Segment {
	d := map[string]any{}
	if c.Title != "" {
		d["title"] = c.Title
	}
	if c.Text != "" {
		d["text"] = c.Text
	}
	if len(c.Fields) > 0 {
		fs := make([]any, len(c.Fields))
		for i, f := range c.Fields {
			m := map[string]any{"name": f.Name, "value": f.Value}
			if f.Inline {
				m["inline"] = true
			}
			fs[i] = m
		}
		d["fields"] = fs
	}
	if len(c.Buttons) > 0 {
		bs := make([]any, len(c.Buttons))
		for i, b := range c.Buttons {
			m := map[string]any{"label": b.Label}
			if b.URL != "" {
				m["url"] = b.URL
			}
			if b.Value != "" {
				m["value"] = b.Value
			}
			bs[i] = m
		}
		d["buttons"] = bs
	}
	return Segment{Type: SegCard, Data: d}
}

// Card reads a card segment's data (ok false for other segment types). Fields of the wrong
// JSON type read as empty; Validate reports them.
func (s Segment) Card() (Card, bool) {
	if s.Type != SegCard {
		return Card{}, false
	}
	c := Card{Title: s.Str("title"), Text: s.Str("text")}
	str := func(m map[string]any, k string) string { v, _ := m[k].(string); return v }
	for _, f := range anySlice(s.Data["fields"]) {
		m, _ := f.(map[string]any)
		inline, _ := m["inline"].(bool)
		c.Fields = append(c.Fields, CardField{Name: str(m, "name"), Value: str(m, "value"), Inline: inline})
	}
	for _, b := range anySlice(s.Data["buttons"]) {
		m, _ := b.(map[string]any)
		c.Buttons = append(c.Buttons, CardButton{Label: str(m, "label"), URL: str(m, "url"), Value: str(m, "value")})
	}
	return c, true
}

func anySlice(v any) []any {
	switch v := v.(type) {
	case []any:
		return v
	case []map[string]any:
		out := make([]any, len(v))
		for i := range v {
			out[i] = v[i]
		}
		return out
	}
	return nil
}

func runes(s string) int { return utf8.RuneCountInString(s) }

// Validate checks c against the bounds above: a title or a text, fields with names and
// values, buttons with a label and exactly one of an http(s) URL or a value of at most
// CardMaxValue bytes without control characters.
func (c Card) Validate() error {
	switch {
	case strings.TrimSpace(c.Title) == "" && strings.TrimSpace(c.Text) == "":
		return badField("title", "a card needs a title or a text")
	case runes(c.Title) > CardMaxTitle:
		return badField("title", "longer than %d characters", CardMaxTitle)
	case runes(c.Text) > CardMaxText:
		return badField("text", "longer than %d characters", CardMaxText)
	case len(c.Fields) > CardMaxFields:
		return badField("fields", "more than %d", CardMaxFields)
	case len(c.Buttons) > CardMaxButtons:
		return badField("buttons", "more than %d", CardMaxButtons)
	}
	for i, f := range c.Fields {
		at := "fields[" + itoa(int64(i)) + "]"
		switch {
		case strings.TrimSpace(f.Name) == "" || strings.TrimSpace(f.Value) == "":
			return badField(at, "needs a name and a value")
		case runes(f.Name) > CardMaxFieldName:
			return badField(at+".name", "longer than %d characters", CardMaxFieldName)
		case runes(f.Value) > CardMaxFieldValue:
			return badField(at+".value", "longer than %d characters", CardMaxFieldValue)
		}
	}
	for i, b := range c.Buttons {
		at := "buttons[" + itoa(int64(i)) + "]"
		switch {
		case strings.TrimSpace(b.Label) == "":
			return badField(at+".label", "is required")
		case runes(b.Label) > CardMaxLabel:
			return badField(at+".label", "longer than %d characters", CardMaxLabel)
		case hasControl(b.Label):
			return badField(at+".label", "has control characters")
		case (b.URL == "") == (b.Value == ""):
			return badField(at, "needs exactly one of url and value")
		case b.URL != "" && !httpURL(b.URL):
			return badField(at+".url", "must be an http(s) URL of at most %d bytes", CardMaxURL)
		case len(b.Value) > CardMaxValue:
			return badField(at+".value", "longer than %d bytes", CardMaxValue)
		case b.Value != "" && (hasControl(b.Value) || !utf8.ValidString(b.Value)):
			return badField(at+".value", "has control characters or is not UTF-8")
		}
	}
	return nil
}

func hasControl(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0
}

func httpURL(s string) bool {
	if len(s) > CardMaxURL || hasControl(s) {
		return false
	}
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// PlainText renders the card as text: the title, the text, "name: value" per field, and per
// button "[label] url" or "[label]" (a platform without buttons cannot press it, so the value
// is not shown: the user answers in words).
func (c Card) PlainText() string {
	var b strings.Builder
	line := func(s string) {
		if s = strings.TrimSpace(s); s == "" {
			return
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(s)
	}
	line(c.Title)
	line(c.Text)
	for _, f := range c.Fields {
		line(f.Name + ": " + f.Value)
	}
	for _, bt := range c.Buttons {
		if bt.URL != "" {
			line("[" + bt.Label + "] " + bt.URL)
		} else {
			line("[" + bt.Label + "]")
		}
	}
	return b.String()
}

// Button returns the callback button of c whose value is value (ok false: no such button,
// which for an inbound press means a forged or stale one).
func (c Card) Button(value string) (CardButton, bool) {
	for _, b := range c.Buttons {
		if b.Value != "" && b.Value == value {
			return b, true
		}
	}
	return CardButton{}, false
}

// MaxPressText bounds the text of a button press (PressText): a label and a value within
// the card bounds fit.
const MaxPressText = 64 + 4*CardMaxLabel + CardMaxValue

// PressText is the text of the inbound message a button press becomes, the one form every
// adapter uses so the model learns one shape: "[pressed button: <label>] <value>". The
// label loses any "]" and line breaks (it cannot close the bracket or start a line of its
// own), and both are cut to the card bounds: a press is attacker-controlled input on
// platforms whose clients can send any callback data.
func PressText(label, value string) string {
	label = strings.Map(func(r rune) rune {
		switch {
		case r == ']' || r == '[':
			return -1
		case r < 0x20 || r == 0x7f:
			return ' '
		}
		return r
	}, label)
	label = cutRunes(strings.TrimSpace(label), CardMaxLabel)
	value = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, value)
	value = cutBytes(value, CardMaxValue)
	return "[pressed button: " + label + "] " + value
}

func cutRunes(s string, n int) string {
	i := 0
	for k := range s {
		if i == n {
			return s[:k]
		}
		i++
	}
	return s
}

// cutBytes cuts s to at most n bytes on a character boundary.
func cutBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
