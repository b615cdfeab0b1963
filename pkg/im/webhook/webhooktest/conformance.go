// Package webhooktest is the webhook platform's side of the imtest suite: a sender POSTing
// signed messages to ingest's /webhook/{bot} and a real callback server receiving the signed
// replies.
package webhooktest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im/imtest"
	imwebhook "github.com/agentbus/agentbus/pkg/im/webhook"
	"github.com/agentbus/agentbus/pkg/webhook"
)

const (
	bot    = "wh1"
	secret = "conformance-secret"
)

// Conformance is the webhook platform under the imtest suite.
func Conformance() imtest.Adapter {
	return imtest.Adapter{
		Platform: imwebhook.Platform, Bot: bot, Master: "777",
		Features: imtest.Features{Groups: true, Commands: true, Threads: true,
			MediaIn: true, MediaOut: true, Redelivery: true, Masters: true, RetryAfter: true, UnknownBot: true},
		New: newWire,
	}
}

type wire struct {
	t    *testing.T
	cb   *httptest.Server
	url  string
	mu   sync.Mutex
	next int
	got  []webhook.Outbound
	// limit is how many next callbacks are answered 429 (Retry-After: 1); limited counts them.
	limit, limited int
	sent           map[string][]byte // message id -> body, for redelivery
}

func newWire(t *testing.T) imtest.Wire {
	w := &wire{t: t, sent: map[string][]byte{}}
	w.cb = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhook.Verify(secret, body, r.Header.Get(webhook.SignatureHeader)); err != nil {
			t.Errorf("callback signature: %v", err)
			rw.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.mu.Lock()
		if w.limit > 0 {
			w.limit--
			w.limited++
			w.mu.Unlock()
			rw.Header().Set("Retry-After", "1")
			rw.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.mu.Unlock()
		var o webhook.Outbound
		if err := json.Unmarshal(body, &o); err != nil {
			t.Errorf("callback body: %v", err)
		}
		w.mu.Lock()
		w.got = append(w.got, o)
		w.mu.Unlock()
		rw.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(w.cb.Close)
	return w
}

func (w *wire) IM() string {
	return fmt.Sprintf(`  webhook:
    listen: "127.0.0.1:0"
    bots:
      - {id: %s, secret: %s, callback: %q, masters: ["777"]}
`, bot, secret, w.cb.URL+"/hook")
}

func (w *wire) Attach(t *testing.T, p imtest.Pipeline) { w.url = p.WebhookURL + "/webhook/" + bot }

func (w *wire) Scene(m imtest.Msg) string { return m.Scene }

func (w *wire) Send(t *testing.T, m imtest.Msg) string {
	w.mu.Lock()
	body, again := w.sent[m.ID]
	id := m.ID
	if !again {
		w.next++
		id = fmt.Sprintf("wh-%d", w.next)
	}
	w.mu.Unlock()
	if !again {
		in := webhook.Inbound{ID: id, Scene: webhook.Scene{Type: events.ScopePrivate, ID: m.Scene},
			Sender: webhook.Sender{ID: m.User}, Time: time.Now().UnixMilli()}
		if m.Group {
			in.Scene.Type = events.ScopeGroup
		}
		if m.Mention {
			in.Content = append(in.Content, events.AtSeg(bot, ""), events.TextSeg(" "))
		}
		in.Content = append(in.Content, events.TextSeg(m.Text))
		if m.Image != nil {
			in.Content = append(in.Content, events.Segment{Type: events.SegImage, Data: map[string]any{
				"base64": base64.StdEncoding.EncodeToString(m.Image), "mimeType": "image/png"}})
		}
		var err error
		if body, err = json.Marshal(in); err != nil {
			t.Fatal(err)
		}
		w.mu.Lock()
		w.sent[id] = body
		w.mu.Unlock()
	}
	req, err := http.NewRequest(http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(webhook.SignatureHeader, webhook.Sign(secret, body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST %s: %d", w.url, resp.StatusCode)
	}
	return id
}

func (w *wire) Sent(scene string) []imtest.Out {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []imtest.Out
	for _, o := range w.got {
		if o.Scene.ID != scene {
			continue
		}
		r := imtest.Out{ReplyTo: o.ReplyTo}
		for _, s := range o.Content {
			switch s.Type {
			case events.SegText:
				r.Text += s.Str("text")
			case events.SegImage:
				r.Image, _ = base64.StdEncoding.DecodeString(s.Str("base64"))
			}
		}
		out = append(out, r)
	}
	return out
}

func (w *wire) LimitNextSend() {
	w.mu.Lock()
	w.limit++
	w.mu.Unlock()
}

func (w *wire) Limited() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.limited
}
