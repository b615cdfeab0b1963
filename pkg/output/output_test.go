package output

import (
	"encoding/xml"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/events"
)

var deployCard = events.Card{
	Title: "Deploy v1.4?", Text: "Staging is green.",
	Fields: []events.CardField{{Name: "env", Value: "prod", Inline: true}},
	Buttons: []events.CardButton{{Label: "Deploy", Value: "deploy v1.4"},
		{Label: "Changelog", URL: "https://example.com/changes"}},
}

const deployBlock = "```card\n" +
	`{"title": "Deploy v1.4?", "text": "Staging is green.",
 "fields": [{"name": "env", "value": "prod", "inline": true}],
 "buttons": [{"label": "Deploy", "value": "deploy v1.4"}, {"label": "Changelog", "url": "https://example.com/changes"}]}` +
	"\n```"

func TestParse(t *testing.T) {
	long := strings.Repeat("x", events.CardMaxValue+1)
	for _, tc := range []struct {
		name string
		in   string
		want []Element
	}{
		{"plain text", "hello there", []Element{TextElement{"hello there"}}},
		{"media of every kind", "see ![a cat](https://e.x/c.png) and [voice](media://v.amr)\n[video: clip](https://e.x/v.mp4) [file: r.pdf](https://e.x/r.pdf) [audio](https://e.x/a.mp3)",
			[]Element{TextElement{"see"}, ImageElement{URL: "https://e.x/c.png", Alt: "a cat"}, TextElement{"and"},
				AudioElement{URL: "media://v.amr", Kind: "voice"}, VideoElement{URL: "https://e.x/v.mp4", Caption: "clip"},
				FileElement{URL: "https://e.x/r.pdf", Name: "r.pdf"}, AudioElement{URL: "https://e.x/a.mp3", Kind: "audio"}}},
		{"ordinary link stays text", "read [the docs](https://e.x/d)", []Element{TextElement{"read [the docs](https://e.x/d)"}}},
		{"card between text", "Ready.\n" + deployBlock + "\nPress one.",
			[]Element{TextElement{"Ready."}, CardElement{deployCard}, TextElement{"Press one."}}},
		{"two cards", deployBlock + "\n" + "```card\n{\"title\":\"B\"}\n```",
			[]Element{CardElement{deployCard}, CardElement{events.Card{Title: "B"}}}},
		{"not JSON stays text", "```card\ntitle: x\n```", []Element{TextElement{"```card\ntitle: x\n```"}}},
		{"trailing data stays text", "```card\n{\"title\":\"a\"} {}\n```", []Element{TextElement{"```card\n{\"title\":\"a\"} {}\n```"}}},
		{"other fences stay text", "```json\n{\"title\":\"a\"}\n```", []Element{TextElement{"```json\n{\"title\":\"a\"}\n```"}}},
		{"value over 64 bytes falls back to plain text", "```card\n{\"title\":\"Pick\",\"buttons\":[{\"label\":\"A\",\"value\":\"" + long + "\"}]}\n```",
			[]Element{TextElement{"Pick\n[A]"}}},
		{"javascript url falls back", "```card\n{\"title\":\"T\",\"buttons\":[{\"label\":\"x\",\"url\":\"javascript:alert(1)\"}]}\n```",
			[]Element{TextElement{"T\n[x] javascript:alert(1)"}}},
		{"empty card stays text", "```card\n{}\n```", []Element{TextElement{"```card\n{}\n```"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Parse(tc.in)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Parse(%q)\n got %#v\nwant %#v", tc.in, got, tc.want)
			}
		})
	}
}

func TestSegmentRoundTrip(t *testing.T) {
	for _, el := range Parse("x ![a](https://e.x/a.png) [voice](https://e.x/v.ogg) [file: n.txt](https://e.x/n.txt)\n" + deployBlock) {
		seg := Segment(el)
		if err := seg.Validate(); err != nil {
			t.Fatalf("%#v: %v", el, err)
		}
		if ce, ok := el.(CardElement); ok {
			// Through the wire codec and back: the card survives.
			ev := events.New(events.Outbound{OutID: "t-0", Platform: "telegram", Bot: "b", Scene: events.Scene{Type: "private", ID: "1"}, Content: events.Segments{seg}})
			b, err := events.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			var back events.Event[events.Outbound]
			if err := events.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			c, ok := back.Data.Content[0].Card()
			if !ok || !reflect.DeepEqual(c, ce.Card) {
				t.Fatalf("card after the codec: %#v", c)
			}
		}
	}
}

func TestRenderPlainText(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"hi", "hi"},
		{"look ![cat](https://e.x/c.png)", "look\n\n[image: cat] https://e.x/c.png"},
		{"[file: r.pdf](https://e.x/r.pdf)", "[file: r.pdf] https://e.x/r.pdf"},
		{deployBlock, "Deploy v1.4?\nStaging is green.\nenv: prod\n[Deploy]\n[Changelog] https://example.com/changes"},
	} {
		if got := RenderPlainText(Parse(tc.in)); got != tc.want {
			t.Errorf("RenderPlainText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestRenderSatori(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []Element
		want string
	}{
		{"text", []Element{TextElement{"a < b & c"}}, "a &lt; b &amp; c"},
		{"image", []Element{ImageElement{URL: "https://e.x/a.png?x=1&y=2", Alt: `say "hi"`}}, `<img src="https://e.x/a.png?x=1&amp;y=2" alt="say &quot;hi&quot;"/>`},
		{"media without captions", []Element{AudioElement{URL: "u1"}, VideoElement{URL: "u2"}, FileElement{URL: "u3", Name: "n"}},
			`<audio src="u1"/><video src="u2"/><file src="u3" title="n"/>`},
		{"card", []Element{CardElement{deployCard}},
			`<p><b>Deploy v1.4?</b></p><p>Staging is green.</p><p>env: prod</p><button type="action" id="deploy v1.4">Deploy</button><button type="link" href="https://example.com/changes">Changelog</button>`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := RenderSatori(tc.in); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestRenderSatoriHostile feeds text built to break out of text and attributes and checks
// that the output is well-formed XML whose text and attributes read back as given (less
// the characters XML cannot carry).
func TestRenderSatoriHostile(t *testing.T) {
	hostile := []string{
		`</p><script>alert(1)</script>`,
		`" onerror="alert(1)`,
		`' x='y`,
		`]]><![CDATA[`,
		"&amp; &#x3c; <!-- -->",
		"bell\x07 nul\x00 esc\x1b",
		"bad utf8 \xff\xfe end",
		"\uFFFE\uFFFF",
	}
	clean := func(s string) string {
		return strings.Map(func(r rune) rune {
			if (r < 0x20 && r != '\t' && r != '\n' && r != '\r') || r == 0xFFFE || r == 0xFFFF {
				return -1
			}
			return r
		}, strings.ToValidUTF8(s, ""))
	}
	for _, h := range hostile {
		c := events.Card{Title: h, Text: h, Fields: []events.CardField{{Name: h, Value: h}},
			Buttons: []events.CardButton{{Label: h, Value: h}, {Label: h, URL: "https://e.x/?q=" + h}}}
		out := RenderSatori([]Element{TextElement{h}, ImageElement{URL: h, Alt: h}, CardElement{c}})
		dec := xml.NewDecoder(strings.NewReader("<root>" + out + "</root>"))
		var texts, attrs []string
		for {
			tok, err := dec.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%q: not well-formed: %v\n%s", h, err, out)
			}
			switch tok := tok.(type) {
			case xml.CharData:
				texts = append(texts, string(tok))
			case xml.StartElement:
				switch tok.Name.Local {
				case "root", "p", "b", "img", "button":
				default:
					t.Fatalf("%q: unexpected element <%s> in %s", h, tok.Name.Local, out)
				}
				for _, a := range tok.Attr {
					attrs = append(attrs, a.Value)
				}
			}
		}
		all := strings.Join(texts, "|")
		if want := clean(h); !strings.Contains(all, want) {
			t.Errorf("%q: text %q does not read back as %q", h, all, want)
		}
		if want := clean(h); !contains(attrs, want) {
			t.Errorf("%q: attributes %q do not hold %q", h, attrs, want)
		}
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func TestPromptFor(t *testing.T) {
	for _, p := range []string{"telegram", "discord", "slack", "matrix", "webhook"} {
		if PromptFor(p) == "" {
			t.Errorf("%s renders cards but gets no prompt", p)
		}
	}
	for _, p := range []string{"onebot", "console", "qq", ""} {
		if PromptFor(p) != "" {
			t.Errorf("%s does not render cards but is told about them", p)
		}
	}
	// The example in the prompt is itself a card Parse accepts.
	els := Parse(CardPrompt)
	found := false
	for _, el := range els {
		if _, ok := el.(CardElement); ok {
			found = true
		}
	}
	if !found {
		t.Fatalf("the prompt's example is no card: %#v", els)
	}
}

// TestDocsExample: the card example of docs/events.md is a card Parse accepts, with the
// fields and buttons the text around it describes.
func TestDocsExample(t *testing.T) {
	b, err := os.ReadFile("../../docs/events.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "````text\n")
	if start < 0 {
		t.Fatal("docs/events.md has no ````text block with the card example")
	}
	body := doc[start+len("````text\n"):]
	body = body[:strings.Index(body, "\n````")]
	els := Parse(body)
	if len(els) != 1 {
		t.Fatalf("the example parses to %#v, want one card", els)
	}
	if c, ok := els[0].(CardElement); !ok || !reflect.DeepEqual(c.Card, deployCard) {
		t.Fatalf("the example parses to %#v, want %#v", els[0], deployCard)
	}
}
