package matrix

import (
	"html"
	"strings"

	"maunium.net/go/mautrix/event"

	"github.com/agentbus/agentbus/pkg/events"
)

// Cards (issue 39). Matrix has no buttons that a bot can read presses of in plain m.text, so
// a card is one m.text message: formatted_body (org.matrix.custom.html) with the title in
// <strong>, the text, a list of "name: value" fields, and the buttons as links (URL buttons)
// or as "[label]" in <code> (value buttons: the user answers in words); body is the card's
// plain text. Every piece of text is HTML-escaped, so model text cannot add markup, and the
// message mentions nobody (an empty m.mentions).

// cardHTML is the formatted_body of a card.
func cardHTML(c events.Card) string {
	var b strings.Builder
	if c.Title != "" {
		b.WriteString("<p><strong>" + html.EscapeString(c.Title) + "</strong></p>")
	}
	if c.Text != "" {
		b.WriteString("<p>" + strings.ReplaceAll(html.EscapeString(c.Text), "\n", "<br>") + "</p>")
	}
	if len(c.Fields) > 0 {
		b.WriteString("<ul>")
		for _, f := range c.Fields {
			b.WriteString("<li><strong>" + html.EscapeString(f.Name) + ":</strong> " + html.EscapeString(f.Value) + "</li>")
		}
		b.WriteString("</ul>")
	}
	if len(c.Buttons) > 0 {
		b.WriteString("<p>")
		for i, bt := range c.Buttons {
			if i > 0 {
				b.WriteString(" · ")
			}
			if bt.URL != "" {
				b.WriteString(`<a href="` + html.EscapeString(bt.URL) + `">` + html.EscapeString(bt.Label) + "</a>")
			} else {
				b.WriteString("<code>[" + html.EscapeString(bt.Label) + "]</code>")
			}
		}
		b.WriteString("</p>")
	}
	return b.String()
}

// cardContent is the message content of a card segment; one that does not validate is its
// plain text.
func cardContent(seg events.Segment) *event.MessageEventContent {
	c, _ := seg.Card()
	content := &event.MessageEventContent{MsgType: event.MsgText, Body: c.PlainText(), Mentions: &event.Mentions{}}
	if c.Validate() == nil {
		content.Format, content.FormattedBody = event.FormatHTML, cardHTML(c)
	}
	return content
}
