package output

import (
	"strings"
	"unicode/utf8"
)

// RenderSatori renders elements as Satori message XML: text escaped, <img src alt/>,
// <audio src title/>, <video src title/>, <file src title/>, and a card as paragraphs (the
// title bold, the text, "name: value" per field) followed by its buttons (<button
// type="link" href> for URL buttons, <button type="action" id> with the value as the id for
// callback buttons). Satori has no card element of its own; buttons are its standard one.
//
// Every piece of text and every attribute is escaped (& < > " '), and characters XML 1.0
// cannot carry (control characters other than tab and line breaks, U+FFFE, U+FFFF, invalid
// UTF-8) are dropped, so text from the model or a user can never open an element.
func RenderSatori(elems []Element) string {
	var b strings.Builder
	for _, el := range elems {
		switch e := el.(type) {
		case TextElement:
			escapeXML(&b, e.Text)
		case ImageElement:
			empty(&b, "img", "src", e.URL, "alt", e.Alt)
		case AudioElement:
			empty(&b, "audio", "src", e.URL, "title", e.Caption)
		case VideoElement:
			empty(&b, "video", "src", e.URL, "title", e.Caption)
		case FileElement:
			empty(&b, "file", "src", e.URL, "title", e.Name)
		case CardElement:
			satoriCard(&b, e)
		}
	}
	return b.String()
}

func satoriCard(b *strings.Builder, c CardElement) {
	para := func(bold bool, s string) {
		if s == "" {
			return
		}
		b.WriteString("<p>")
		if bold {
			b.WriteString("<b>")
		}
		escapeXML(b, s)
		if bold {
			b.WriteString("</b>")
		}
		b.WriteString("</p>")
	}
	para(true, c.Title)
	para(false, c.Text)
	for _, f := range c.Fields {
		para(false, f.Name+": "+f.Value)
	}
	for _, bt := range c.Buttons {
		if bt.URL != "" {
			open(b, "button", "type", "link", "href", bt.URL)
		} else {
			open(b, "button", "type", "action", "id", bt.Value)
		}
		escapeXML(b, bt.Label)
		b.WriteString("</button>")
	}
}

// empty writes <name k="v" .../>, leaving out attributes whose value is empty.
func empty(b *strings.Builder, name string, kv ...string) {
	attrs(b, name, kv)
	b.WriteString("/>")
}

func open(b *strings.Builder, name string, kv ...string) {
	attrs(b, name, kv)
	b.WriteByte('>')
}

func attrs(b *strings.Builder, name string, kv []string) {
	b.WriteByte('<')
	b.WriteString(name)
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			continue
		}
		b.WriteByte(' ')
		b.WriteString(kv[i])
		b.WriteString(`="`)
		escapeXML(b, kv[i+1])
		b.WriteByte('"')
	}
}

// escapeXML writes s escaped for XML text and attribute values alike.
func escapeXML(b *strings.Builder, s string) {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		switch {
		case r == utf8.RuneError && n == 1: // invalid UTF-8
		case r == '&':
			b.WriteString("&amp;")
		case r == '<':
			b.WriteString("&lt;")
		case r == '>':
			b.WriteString("&gt;")
		case r == '"':
			b.WriteString("&quot;")
		case r == '\'':
			b.WriteString("&#39;")
		case r < 0x20 && r != '\t' && r != '\n' && r != '\r', r == 0xFFFE, r == 0xFFFF:
		default:
			b.WriteRune(r)
		}
	}
}
