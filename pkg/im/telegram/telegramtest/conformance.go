package telegramtest

import (
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/agentbus/agentbus/pkg/im/imtest"
)

const confToken = "123456:CONFORMANCE"

// What the adapter's package says (platform, chunkLimit,
// telegram.MessageID): this package cannot import it, the adapter's own tests import this one.
const (
	platform   = "telegram"
	chunkLimit = 4096
)

func messageID(chat int64, msg int) string {
	return strconv.FormatInt(chat, 10) + "_" + strconv.Itoa(msg)
}

// Conformance is the Telegram adapter (long polling) under the imtest suite.
func Conformance() imtest.Adapter {
	return imtest.Adapter{
		Platform: platform, Bot: "tg1", Master: "777", Secrets: []string{confToken},
		Features: imtest.Features{Groups: true, Commands: true, Threads: true, ChunkLimit: chunkLimit,
			MediaIn: true, MediaOut: true, Redelivery: true, Masters: true, RetryAfter: true, UnknownBot: true},
		New: func(t *testing.T) imtest.Wire {
			return &wire{f: New(t, confToken, 9100, "agentbus_conf_bot"), ids: map[string]int{}}
		},
	}
}

type wire struct {
	f    *Fake
	mu   sync.Mutex
	next int
	ids  map[string]int // suite message id -> Telegram message id (redelivery)
}

func (w *wire) IM() string {
	return fmt.Sprintf(`  telegram:
    bots:
      - {id: tg1, token: %q, apiBase: %q, preview: "off", masters: ["777"]}
`, w.f.Token, w.f.URL())
}

func (w *wire) Attach(t *testing.T, p imtest.Pipeline) {
	w.f.WaitCalls(1, imtest.Wait, func(c Call) bool { return c.Method == "getUpdates" })
}

// chat is the Telegram chat of a suite scene: a user's private chat, or a supergroup.
func chat(m imtest.Msg) (int64, string) {
	n, _ := strconv.ParseInt(m.Scene, 10, 64)
	if m.Group {
		return -1000000 - n, "supergroup"
	}
	return n, "private"
}

func (w *wire) Scene(m imtest.Msg) string {
	c, _ := chat(m)
	return strconv.FormatInt(c, 10)
}

func (w *wire) Send(t *testing.T, m imtest.Msg) string {
	c, typ := chat(m)
	user, _ := strconv.ParseInt(m.User, 10, 64)
	w.mu.Lock()
	id, again := w.ids[m.ID]
	if !again {
		w.next++
		id = w.next
	}
	w.mu.Unlock()
	msg := w.f.Message(id, c, typ, user, m.Text)
	if m.Mention {
		msg = Mention(msg, w.f.Name)
	}
	if m.Image != nil {
		fid := w.f.AddFile(fmt.Sprintf("photos/file_%d.png", id), m.Image)
		delete(msg, "text")
		msg["caption"] = m.Text
		msg["photo"] = []any{map[string]any{"file_id": fid, "file_unique_id": "u" + strconv.Itoa(id), "width": 4, "height": 4}}
	}
	w.f.AddMessage(msg)
	mid := messageID(c, id)
	w.mu.Lock()
	w.ids[mid] = id
	w.mu.Unlock()
	return mid
}

func (w *wire) Sent(scene string) []imtest.Out {
	var out []imtest.Out
	for _, c := range w.f.Calls() {
		if c.Status != 200 || c.Params.Get("chat_id") != scene || (c.Method != "sendMessage" && c.Method != "sendPhoto") {
			continue
		}
		o := imtest.Out{Text: c.Params.Get("text") + c.Params.Get("caption"), Image: c.Files["photo"]}
		if r := c.Params.Get("reply_to_message_id"); r != "" {
			n, _ := strconv.Atoi(r)
			c, _ := strconv.ParseInt(scene, 10, 64)
			o.ReplyTo = messageID(c, n)
		}
		out = append(out, o)
	}
	return out
}

func (w *wire) LimitNextSend() { w.f.FailNext("sendMessage", 1, 429) }

func (w *wire) Limited() int {
	n := 0
	for _, c := range w.f.Calls() {
		if c.Status == 429 {
			n++
		}
	}
	return n
}
