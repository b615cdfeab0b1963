package matrixtest

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/agentbus/agentbus/pkg/im/imtest"
	"github.com/agentbus/agentbus/pkg/im/matrix"
)

// Conformance is the Matrix adapter (client-server API, /sync) under the imtest suite. The
// fake cannot hand one event out twice, and an image's caption is the adapter's own matter,
// so Redelivery and MediaIn are tested with the adapter (against Dendrite) instead.
func Conformance() imtest.Adapter {
	return imtest.Adapter{
		Platform: matrix.Platform, Bot: "mx1", Master: "777",
		Features: imtest.Features{Groups: true, Commands: true, Threads: true,
			MediaOut: true, Masters: true, RetryAfter: true, UnknownBot: true},
		New: func(t *testing.T) imtest.Wire {
			return &wire{f: New(t, "@agentbus:"+ServerName, "syt_conformance"), rooms: map[string]bool{}}
		},
	}
}

type wire struct {
	f     *Fake
	mu    sync.Mutex
	rooms map[string]bool
}

func user(id string) string { return "@u" + id + ":" + ServerName }

func (w *wire) IM() string {
	return fmt.Sprintf(`  matrix:
    bots:
      - {id: mx1, homeserver: %q, userId: %q, accessToken: %q, preview: "off", masters: [%q]}
`, w.f.URL(), w.f.Bot, w.f.Token, user("777"))
}

func (w *wire) Attach(t *testing.T, p imtest.Pipeline) {
	w.f.WaitCalls(1, imtest.Wait, func(c Call) bool { return strings.HasSuffix(c.Path, "/sync") && c.Status == 200 })
}

// Scene: a direct room of the bot and the user, or a group room with a third member.
func (w *wire) Scene(m imtest.Msg) string {
	if m.Group {
		return "!g" + m.Scene + ":" + ServerName
	}
	return "!dm" + m.Scene + ":" + ServerName
}

func (w *wire) Send(t *testing.T, m imtest.Msg) string {
	room := w.Scene(m)
	w.mu.Lock()
	if !w.rooms[room] {
		w.rooms[room] = true
		w.f.Join(room, w.f.Bot, "Agentbus")
		if m.Group {
			w.f.Join(room, user("1"), "Onlooker")
		}
	}
	w.mu.Unlock()
	w.f.Join(room, user(m.User), "User "+m.User) // joining again changes nothing
	content := map[string]any{"msgtype": "m.text", "body": m.Text}
	if m.Mention {
		// A pill, as clients write a mention of a user.
		content["body"] = "Agentbus: " + m.Text
		content["format"] = "org.matrix.custom.html"
		content["formatted_body"] = `<a href="https://matrix.to/#/` + w.f.Bot + `">Agentbus</a>: ` + m.Text
	}
	return w.f.Message(room, user(m.User), content)
}

func (w *wire) Sent(scene string) []imtest.Out {
	var out []imtest.Out
	for _, b := range w.f.Sent(scene) {
		if _, edit := b["m.new_content"]; edit {
			continue
		}
		o := imtest.Out{}
		o.Text, _ = b["body"].(string)
		if rel, ok := b["m.relates_to"].(map[string]any); ok {
			if r, ok := rel["m.in_reply_to"].(map[string]any); ok {
				o.ReplyTo, _ = r["event_id"].(string)
			}
		}
		if b["msgtype"] == "m.image" {
			url, _ := b["url"].(string)
			o.Image = w.f.Media(url)
			o.Text = ""
		}
		out = append(out, o)
	}
	return out
}

func (w *wire) LimitNextSend() { w.f.FailNext("send", 1, 429, 1000) }

func (w *wire) Limited() int {
	n := 0
	for _, c := range w.f.Calls() {
		if c.Status == 429 {
			n++
		}
	}
	return n
}
