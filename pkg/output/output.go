// Package output parses the assistant's reply text into output elements and renders them:
// the seed's parseOutput, OutputElement (TextElement, ImageElement, AudioElement,
// VideoElement, FileElement, CardElement), renderToPlainText and renderToSatori (issue 39).
//
// # The syntax the model writes
//
// Media are Markdown links, as pkg/chunk has always read them: ![alt](url) is an image;
// [audio](url), [voice](url), [video](url) and [file: report.pdf](url) are audio, voice,
// video and a file; any link into the media store (media://...) is media by its extension.
// A card is a fenced block whose info string is "card" and whose body is one JSON object:
//
//	```card
//	{"title": "Deploy v1.4?", "text": "Staging is green.",
//	 "fields": [{"name": "env", "value": "prod", "inline": true}],
//	 "buttons": [{"label": "Deploy", "value": "deploy v1.4"},
//	             {"label": "Changelog", "url": "https://example.com/changes"}]}
//	```
//
// JSON, not YAML: models write it reliably and it has one reading. A block that is not JSON
// stays text (the user sees what the model wrote); a card that breaks the bounds of
// events.Card.Validate (a callback value over 64 bytes, an URL that is not http(s), ...)
// becomes the card's plain text, so nothing is lost and nothing malformed is sent.
//
// # Rendering
//
// Element is turned into an outbound segment by Segment (a card into an events.SegCard
// segment); each IM adapter renders card segments natively where its platform can
// (Telegram inline keyboards, Discord embeds and buttons, Slack blocks, Matrix HTML) and as
// RenderPlainText elsewhere (OneBot/QQ). RenderSatori writes Satori XML for bridges that
// speak it. PromptFor is the system prompt's note about cards, given only to chats whose
// platform renders them.
package output

import (
	"encoding/json"
	"regexp"
	"strings"

	"github.com/agentbus/agentbus/pkg/chunk"
	"github.com/agentbus/agentbus/pkg/events"
)

// Element is one output element. The concrete types are TextElement, ImageElement,
// AudioElement, VideoElement, FileElement and CardElement.
type Element interface{ element() }

// TextElement is plain (Markdown) text.
type TextElement struct{ Text string }

// ImageElement is an image by URL (http(s), media://, or a platform file id).
type ImageElement struct{ URL, Alt string }

// AudioElement is audio; Kind is "audio", "voice" or "record" (the latter two are voice
// messages where the platform has them).
type AudioElement struct{ URL, Caption, Kind string }

// VideoElement is a video.
type VideoElement struct{ URL, Caption string }

// FileElement is a file attachment; Name is the file name shown.
type FileElement struct{ URL, Name string }

// CardElement is a card: title, text, fields and buttons.
type CardElement struct{ events.Card }

func (TextElement) element()  {}
func (ImageElement) element() {}
func (AudioElement) element() {}
func (VideoElement) element() {}
func (FileElement) element()  {}
func (CardElement) element()  {}

// maxCardJSON bounds a card block's body: a card within events' bounds is far smaller, and
// a bigger block is not decoded at all.
const maxCardJSON = 32 << 10

// cardFence matches a fenced card block: "```card" alone on its line, the JSON body, and a
// closing fence alone on its line.
var cardFence = regexp.MustCompile("(?ms)^[ \\t]*```card[ \\t]*\\r?\\n(.*?)\\r?\\n[ \\t]*```[ \\t]*$")

// Parse splits reply text into elements in order: card blocks, media links and the text
// around them (trimmed; blank text between elements is dropped). It never fails: what is
// not a valid element stays text.
func Parse(text string) []Element {
	var out []Element
	last := 0
	var blocks [][]int
	if strings.Contains(text, "```card") { // most replies have none, and the regexp costs
		blocks = cardFence.FindAllStringSubmatchIndex(text, -1)
	}
	for _, m := range blocks {
		el, ok := parseCard(text[m[2]:m[3]])
		if !ok {
			continue // not a card after all: the block stays in the text around it
		}
		out = append(out, parseMedia(text[last:m[0]])...)
		out = append(out, el)
		last = m[1]
	}
	return append(out, parseMedia(text[last:])...)
}

// parseCard decodes a card block's body: ok is false when it is not one JSON object (the
// block is then text); a card that is not valid is its plain text.
func parseCard(body string) (Element, bool) {
	if len(body) > maxCardJSON {
		return nil, false
	}
	var c events.Card
	dec := json.NewDecoder(strings.NewReader(body))
	if err := dec.Decode(&c); err != nil || dec.More() {
		return nil, false
	}
	c.Title, c.Text = strings.TrimSpace(c.Title), strings.TrimSpace(c.Text)
	if err := c.Validate(); err != nil {
		if t := c.PlainText(); t != "" {
			return TextElement{Text: t}, true
		}
		return nil, false
	}
	return CardElement{Card: c}, true
}

func parseMedia(text string) []Element {
	var out []Element
	for _, p := range chunk.SplitMedia(text) {
		switch p.Kind {
		case "":
			out = append(out, TextElement{Text: p.Text})
		case events.SegImage:
			out = append(out, ImageElement{URL: p.URL, Alt: p.Alt})
		case events.SegAudio, events.SegVoice, events.SegRecord:
			out = append(out, AudioElement{URL: p.URL, Caption: p.Alt, Kind: p.Kind})
		case events.SegVideo:
			out = append(out, VideoElement{URL: p.URL, Caption: p.Alt})
		default:
			out = append(out, FileElement{URL: p.URL, Name: p.Alt})
		}
	}
	return out
}

// Segment is the outbound segment of el: text, image (data.alt), audio/voice/record and
// video (data.caption), file (data.name) or card.
func Segment(el Element) events.Segment {
	media := func(typ, url, key, v string) events.Segment {
		s := events.Segment{Type: typ, Data: map[string]any{"url": url}}
		if v != "" {
			s.Data[key] = v
		}
		return s
	}
	switch e := el.(type) {
	case TextElement:
		return events.TextSeg(e.Text)
	case ImageElement:
		return media(events.SegImage, e.URL, "alt", e.Alt)
	case AudioElement:
		kind := e.Kind
		if kind == "" {
			kind = events.SegAudio
		}
		return media(kind, e.URL, "caption", e.Caption)
	case VideoElement:
		return media(events.SegVideo, e.URL, "caption", e.Caption)
	case FileElement:
		return media(events.SegFile, e.URL, "name", e.Name)
	case CardElement:
		return events.CardSeg(e.Card)
	}
	return events.TextSeg("")
}

// RenderPlainText renders elements as plain text for a platform that has neither media nor
// cards: text as it is, media as "[image: alt] url" (audio, video, file alike), a card as
// events.Card.PlainText; one element per paragraph.
func RenderPlainText(elems []Element) string {
	parts := make([]string, 0, len(elems))
	media := func(what, label, url string) string {
		if label != "" {
			what += ": " + label
		}
		return "[" + what + "] " + url
	}
	for _, el := range elems {
		var s string
		switch e := el.(type) {
		case TextElement:
			s = e.Text
		case ImageElement:
			s = media("image", e.Alt, e.URL)
		case AudioElement:
			s = media("audio", e.Caption, e.URL)
		case VideoElement:
			s = media("video", e.Caption, e.URL)
		case FileElement:
			s = media("file", e.Name, e.URL)
		case CardElement:
			s = e.PlainText()
		}
		if s = strings.TrimSpace(s); s != "" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, "\n\n")
}
