package onebottest

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/agentbus/agentbus/pkg/im/imtest"
	"github.com/agentbus/agentbus/pkg/im/onebot"
)

const confSelf = 10101

// Conformance is the OneBot v11 adapter (forward WebSocket) under the imtest suite.
func Conformance() imtest.Adapter {
	return imtest.Adapter{
		Platform: onebot.Platform, Bot: "qq1", Master: "777", Secrets: []string{"conformance-token"},
		Features: imtest.Features{Groups: true, Commands: true, Threads: true, ChunkLimit: 1000,
			MediaIn: true, MediaOut: true, Redelivery: true, Masters: true, UnknownBot: true},
		New: func(t *testing.T) imtest.Wire {
			return &wire{f: New(t, "conformance-token", confSelf), sent: map[string]map[string]any{}, imgs: map[string]string{}}
		},
	}
}

type wire struct {
	f    *Fake
	mu   sync.Mutex
	next int64
	sent map[string]map[string]any // message id -> event, for redelivery
	imgs map[string]string         // message id -> the URL its image is served at
}

// ImageURL is imtest.MediaSource: OneBot keeps the image's URL as the segment's sourceUrl.
func (w *wire) ImageURL(id string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.imgs[id]
}

func (w *wire) IM() string {
	return fmt.Sprintf(`  onebot:
    bots:
      - {id: qq1, selfId: "%d", mode: ws, apiBase: %q, accessToken: conformance-token, masters: ["777"], chunkLimit: 1000}
`, confSelf, w.f.WSURL())
}

func (w *wire) Attach(t *testing.T, p imtest.Pipeline) { w.f.WaitConn(imtest.Wait) }

func (w *wire) Scene(m imtest.Msg) string { return m.Scene }

func (w *wire) Send(t *testing.T, m imtest.Msg) string {
	w.mu.Lock()
	if ev, ok := w.sent[m.ID]; ok {
		w.mu.Unlock()
		w.f.Push(ev)
		return m.ID
	}
	w.next++
	id := 5000 + w.next
	w.mu.Unlock()
	var segs []map[string]any
	if m.Mention {
		segs = append(segs, At(confSelf), Text(" "))
	}
	segs = append(segs, Text(m.Text))
	var url string
	if m.Image != nil {
		name := fmt.Sprintf("img%d.png", id)
		url = w.f.AddImage(name, m.Image)
		segs = append(segs, Image(name, url))
	}
	scene, _ := strconv.ParseInt(m.Scene, 10, 64)
	user, _ := strconv.ParseInt(m.User, 10, 64)
	ev := w.f.PrivateMessage(id, user, segs)
	if m.Group {
		ev = w.f.GroupMessage(id, scene, user, "member", segs)
	}
	sid := strconv.FormatInt(id, 10)
	w.mu.Lock()
	w.sent[sid] = ev
	if url != "" {
		w.imgs[sid] = url
	}
	w.mu.Unlock()
	w.f.Push(ev)
	return sid
}

func (w *wire) Sent(scene string) []imtest.Out {
	var out []imtest.Out
	for _, c := range w.f.Calls() {
		if c.Action != "send_msg" || (fmt.Sprint(c.Params["user_id"]) != scene && fmt.Sprint(c.Params["group_id"]) != scene) {
			continue
		}
		if _, failed := c.Params["failedWith"]; failed {
			continue
		}
		o := imtest.Out{Text: c.Text()}
		for _, s := range c.Segments() {
			d, _ := s["data"].(map[string]any)
			switch s["type"] {
			case "reply":
				o.ReplyTo = fmt.Sprint(d["id"])
			case "image":
				file, _ := d["file"].(string)
				o.Image, _ = base64.StdEncoding.DecodeString(strings.TrimPrefix(file, "base64://"))
			}
		}
		out = append(out, o)
	}
	return out
}
