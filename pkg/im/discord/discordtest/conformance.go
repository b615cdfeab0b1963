package discordtest

import (
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/agentbus/agentbus/pkg/im/discord"
	"github.com/agentbus/agentbus/pkg/im/imtest"
)

// Conformance is the Discord adapter (gateway + REST) under the imtest suite.
func Conformance() imtest.Adapter {
	return imtest.Adapter{
		Platform: discord.Platform, Bot: "dc1", Master: "777", Secrets: []string{"CONFORMANCE.discord.token"},
		Features: imtest.Features{Groups: true, Commands: true, Threads: true, ChunkLimit: discord.DefaultChunkLimit,
			MediaIn: true, MediaOut: true, Redelivery: true, Masters: true, RetryAfter: true, UnknownBot: true},
		New: func(t *testing.T) imtest.Wire {
			return &wire{f: New(t, "CONFORMANCE.discord.token", "1100000000000000101", "agentbus-conf"), sent: map[string]map[string]any{}}
		},
	}
}

type wire struct {
	f    *Fake
	mu   sync.Mutex
	next int
	sent map[string]map[string]any
}

func (w *wire) IM() string {
	return fmt.Sprintf(`  discord:
    bots:
      - {id: dc1, token: %q, apiBase: %q, preview: "off", masters: ["777"]}
`, w.f.Token, w.f.URL())
}

func (w *wire) Attach(t *testing.T, p imtest.Pipeline) { w.f.WaitSessions(1, imtest.Wait) }

// Scene: a DM channel per user, a guild channel per group.
func (w *wire) Scene(m imtest.Msg) string {
	if m.Group {
		return "6" + m.Scene
	}
	return "5" + m.Scene
}

func (w *wire) Send(t *testing.T, m imtest.Msg) string {
	w.mu.Lock()
	if ev, ok := w.sent[m.ID]; ok {
		w.mu.Unlock()
		w.f.Dispatch(ev)
		return m.ID
	}
	w.next++
	id := strconv.Itoa(4000 + w.next)
	w.mu.Unlock()
	guild := ""
	if m.Group {
		guild = "900"
	}
	ev := w.f.Message(id, w.Scene(m), guild, m.User, m.Text)
	if m.Mention {
		ev = w.f.Mention(ev)
	}
	if m.Image != nil {
		u := w.f.AddFile(w.Scene(m)+"/"+id+"/pic.png", m.Image)
		ev["attachments"] = []any{map[string]any{"id": "a" + id, "filename": "pic.png", "content_type": "image/png", "size": len(m.Image), "url": u, "proxy_url": u}}
	}
	w.mu.Lock()
	w.sent[id] = ev
	w.mu.Unlock()
	w.f.Dispatch(ev)
	return id
}

func (w *wire) Sent(scene string) []imtest.Out {
	var out []imtest.Out
	for _, c := range w.f.Calls() {
		if c.Status != 200 || c.Route != "createMessage" || c.Channel != scene {
			continue
		}
		o := imtest.Out{Text: c.Content(), ReplyTo: c.ReplyTo()}
		for _, b := range c.Files {
			o.Image = b
		}
		out = append(out, o)
	}
	return out
}

func (w *wire) LimitNextSend() { w.f.FailNext("createMessage", 1, 429) }

func (w *wire) Limited() int {
	n := 0
	for _, c := range w.f.Calls() {
		if c.Status == 429 {
			n++
		}
	}
	return n
}
