// Package consoletest is the console platform's side of the imtest suite: a client speaking
// the console's core NATS protocol, as `agentbus chat` does.
package consoletest

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im/console"
	"github.com/agentbus/agentbus/pkg/im/imtest"
)

// Conformance is the console under the imtest suite. The console has private scenes only,
// carries text (media stays a reference), and every user is a master; it has one bot, so no
// outbound names an unknown one.
func Conformance() imtest.Adapter {
	return imtest.Adapter{
		Platform: console.Platform, Bot: console.Bot,
		Features: imtest.Features{Threads: true, Redelivery: true, EveryoneMaster: true},
		New:      func(t *testing.T) imtest.Wire { return &wire{} },
	}
}

type wire struct {
	nc   *nats.Conn
	mu   sync.Mutex
	next int
	got  []events.Outbound
}

// IM: the console needs no configuration.
func (w *wire) IM() string { return "" }

func (w *wire) Attach(t *testing.T, p imtest.Pipeline) {
	w.nc = p.NC
	sub, err := p.NC.Subscribe(console.Prefix+"."+events.EncodeToken(console.Bot)+".>", func(m *nats.Msg) {
		var ev events.Event[events.Outbound]
		if err := events.UnmarshalMsg(m, &ev); err != nil {
			t.Errorf("console reply: %v", err)
			return
		}
		w.mu.Lock()
		w.got = append(w.got, ev.Data)
		w.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := p.NC.Flush(); err != nil {
		t.Fatal(err)
	}
}

func (w *wire) Scene(m imtest.Msg) string { return m.Scene }

func (w *wire) Send(t *testing.T, m imtest.Msg) string {
	id := m.ID
	if id == "" {
		w.mu.Lock()
		w.next++
		id = fmt.Sprintf("line-%d", w.next)
		w.mu.Unlock()
	}
	b, _ := json.Marshal(console.Line{ID: id, User: m.User, Text: m.Text})
	reply, err := w.nc.Request(console.InSubject, b, 10*time.Second)
	if err != nil {
		t.Fatalf("console line: %v", err)
	}
	var ack console.Ack
	if err := json.Unmarshal(reply.Data, &ack); err != nil || !ack.Accepted {
		t.Fatalf("console line not accepted: %s (%v)", reply.Data, err)
	}
	return id
}

func (w *wire) Sent(scene string) []imtest.Out {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []imtest.Out
	for _, o := range w.got {
		if o.Scene.ID == scene {
			out = append(out, imtest.Out{Text: o.Content.PlainText(), ReplyTo: o.ReplyTo})
		}
	}
	return out
}
