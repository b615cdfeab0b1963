package slacktest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/agentbus/agentbus/pkg/im/imtest"
	"github.com/agentbus/agentbus/pkg/im/slack"
)

// Conformance is the Slack adapter (Socket Mode) under the imtest suite. A DM is answered in
// the channel, not in a thread, so Threads is off here; threading in channels is tested with
// the adapter.
func Conformance() imtest.Adapter {
	return imtest.Adapter{
		Platform: slack.Platform, Bot: "sl1", Master: "777", Secrets: []string{"xoxb-conformance"},
		Features: imtest.Features{Groups: true, Commands: true, ChunkLimit: slack.DefaultChunkLimit,
			MediaIn: true, MediaOut: true, Redelivery: true, Masters: true, RetryAfter: true, UnknownBot: true},
		New: func(t *testing.T) imtest.Wire {
			return &wire{f: New(t, "xoxb-conformance", "xapp-conformance", "UCONF01", "BCONF"), sent: map[string]map[string]any{}, imgs: map[string]string{}}
		},
	}
}

type wire struct {
	f    *Fake
	mu   sync.Mutex
	next int
	sent map[string]map[string]any
	imgs map[string]string // message id -> the file's url_private
}

// ImageURL is imtest.MediaSource: Slack keeps the file's url_private as the segment's
// sourceUrl (it needs the bot token to fetch, which is not in the URL).
func (w *wire) ImageURL(id string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.imgs[id]
}

func (w *wire) IM() string {
	return fmt.Sprintf(`  slack:
    bots:
      - {id: sl1, botToken: %q, appToken: %q, apiBase: %q, preview: "off", masters: ["777"]}
`, w.f.BotToken, w.f.AppToken, w.f.URL())
}

func (w *wire) Attach(t *testing.T, p imtest.Pipeline) { w.f.WaitSockets(1, imtest.Wait) }

func (w *wire) Scene(m imtest.Msg) string {
	if m.Group {
		return "C" + m.Scene
	}
	return "D" + m.Scene
}

func (w *wire) Send(t *testing.T, m imtest.Msg) string {
	w.mu.Lock()
	if ev, ok := w.sent[m.ID]; ok {
		w.mu.Unlock()
		w.f.Push(ev)
		return m.ID
	}
	w.next++
	ts := fmt.Sprintf("1700001%03d.000100", w.next)
	w.mu.Unlock()
	kind, text := "im", m.Text
	if m.Group {
		kind = "channel"
	}
	if m.Mention {
		text = "<@" + w.f.UserID + "> " + text
	}
	payload := w.f.Message(w.Scene(m), kind, m.User, ts, text)
	var u string
	if m.Image != nil {
		u = w.f.AddFile("T1-F"+ts+"/pic.png", m.Image)
		ev := Event(payload)
		ev["subtype"] = "file_share"
		ev["files"] = []any{map[string]any{"id": "F" + ts, "name": "pic.png", "mimetype": "image/png", "url_private": u, "url_private_download": u}}
	}
	id := w.Scene(m) + "/" + ts
	w.mu.Lock()
	w.sent[id] = payload
	if u != "" {
		w.imgs[id] = u
	}
	w.mu.Unlock()
	w.f.Push(payload)
	return id
}

func (w *wire) Sent(scene string) []imtest.Out {
	var out []imtest.Out
	for _, c := range w.f.Calls() {
		switch {
		case c.Status != 200:
		case c.Method == "chat.postMessage" && c.Params.Get("channel") == scene:
			o := imtest.Out{Text: c.Params.Get("text")}
			if th := c.Params.Get("thread_ts"); th != "" {
				o.ReplyTo = scene + "/" + th
			}
			out = append(out, o)
		case c.Method == "files.completeUploadExternal" && c.Params.Get("channel_id") == scene:
			o := imtest.Out{Text: c.Params.Get("initial_comment")}
			for _, b := range c.Files {
				o.Image = b
			}
			out = append(out, o)
		}
	}
	return out
}

func (w *wire) LimitNextSend() { w.f.FailNext("chat.postMessage", 1, 429) }

func (w *wire) Limited() int {
	n := 0
	for _, c := range w.f.Calls() {
		if c.Status == 429 {
			n++
		}
	}
	return n
}
