package turn

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/memory"
	"github.com/agentbus/agentbus/pkg/models"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

// callModel answers like a real model for counting calls: it reports as usage what it was sent
// (system prompt, messages and tool schemas, about four bytes a token), answers a memory flush
// with NO_REPLY, a summary with a summary of about the length it was asked for, and a turn with
// a reply of replyBytes.
type callModel struct {
	replyBytes int

	mu                      sync.Mutex
	turns, summaries, flush int
}

func (m *callModel) stream(_ context.Context, model *llm.Model, c *llm.Context, _ *llm.StreamOptions) iter.Seq[llm.Event] {
	n := len(c.SystemPrompt)
	for i := range c.Messages {
		for _, b := range c.Messages[i].Content {
			n += len(b.Text) + len(b.Thinking)
		}
	}
	if b, err := json.Marshal(c.Tools); err == nil {
		n += len(b)
	}
	var text string
	m.mu.Lock()
	switch {
	case strings.HasPrefix(c.SystemPrompt, "You compact the history"):
		m.summaries++
		words := 300
		last := llm.TextContentOf(c.Messages[len(c.Messages)-1].Content)
		if _, after, ok := strings.Cut(last, "Keep the summary under about "); ok {
			fmt.Sscanf(after, "%d", &words) //nolint:errcheck // the default stays
		}
		text = "## Goal\nthe user keeps chatting; " + strings.Repeat("fact ", words)
	case len(c.Messages) > 0 && strings.HasPrefix(llm.TextContentOf(c.Messages[len(c.Messages)-1].Content), "[housekeeping"):
		m.flush++
		text = "NO_REPLY"
	default:
		m.turns++
		text = "reply " + strings.Repeat("x", max(m.replyBytes-6, 0))
	}
	m.mu.Unlock()
	return func(yield func(llm.Event) bool) {
		msg := llm.NewAssistant(model)
		msg.Content = []llm.Content{llm.Text(text)}
		msg.StopReason = llm.StopReasonStop
		msg.Usage = &llm.Usage{Input: n / 4, Output: len(text) / 4}
		yield(llm.Event{Type: llm.EventDone, Message: msg})
	}
}

// BenchmarkCallsPerMessage sends 1,000 messages of a trusted user (so the memory flush runs
// before every automatic compaction) through a real turn worker on an embedded NATS server,
// one session per case, and prints model calls per user message: turn calls, summaries and
// memory flushes. Issue 37: a compaction must pay for itself, not run on every turn.
//
//	go test -run - -bench CallsPerMessage -benchtime 1x ./pkg/turn/
func BenchmarkCallsPerMessage(b *testing.B) {
	cases := []struct {
		name             string
		window           int // 0 = ai.agent.contextTokens (128000)
		userBytes, reply int
	}{
		{"5k window, 1 KB messages", 5000, 1000, 400},
		{"8k window, 290-byte messages", 8000, 290, 300},
		{"default window, two-word messages", 0, 10, 40},
	}
	const messages = 1000
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				m := runCallsSession(b, c.window, c.userBytes, c.reply, messages)
				calls := m.turns + m.summaries + m.flush
				fmt.Printf("calls per message, %s: %d messages, %d turn calls, %d summaries, %d memory flushes: %.3f model calls per user message\n",
					c.name, messages, m.turns, m.summaries, m.flush, float64(calls)/messages)
				b.ReportMetric(float64(calls)/messages, "calls/msg")
			}
		})
	}
}

func runCallsSession(b *testing.B, window, userBytes, replyBytes, messages int) *callModel {
	ns := natstest.New(b, natstest.WithMemoryStorage())
	provider := "demo: {api: faux}"
	if window > 0 {
		provider = fmt.Sprintf("demo: {api: faux, contextWindow: %d}", window)
	}
	cfg, err := config.Parse([]byte(`
ai:
  providers:
    ` + provider + `
  agents:
    zhin: {provider: demo, model: demo-1}
`))
	if err != nil {
		b.Fatal(err)
	}
	reg, err := models.NewRegistry(cfg.AI.Providers)
	if err != nil {
		b.Fatal(err)
	}
	model := &callModel{replyBytes: replyBytes}
	o := modelOptions(cfg.AI, reg)
	o.ID, o.StreamFn, o.Memory, o.Log = "bench", model.stream, memory.New(b.TempDir(), memory.Limits{}), quietLog()
	w, err := New(context.Background(), ns.NC, ns.JS, o)
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer w.Stop(context.Background()) //nolint:errcheck
	k := events.SessionKey{Platform: "webhook", Bot: "b1", Scope: "private", Scene: "u1"}
	replies := make(chan struct{}, 4)
	sub, err := ns.NC.Subscribe(events.IMOutSubject(k), func(*nats.Msg) { replies <- struct{}{} })
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe() //nolint:errcheck
	text := strings.Repeat("a user message about things ", userBytes/28+1)[:userBytes]
	for i := range messages {
		m := events.IMMessage{Platform: k.Platform, Bot: k.Bot, MessageID: fmt.Sprintf("m%d", i), Scene: events.Scene{Type: k.Scope, ID: k.Scene},
			Sender: events.Sender{ID: k.Scene, Name: "U", Roles: []string{events.RoleTrusted}}, Content: events.Segments{events.TextSeg(text)},
			Time: time.Now().UnixMilli()}
		msg, err := events.NewMsg(events.AgentInSubject(k), events.New(events.UserMessage{Message: m, Text: text}, events.WithSession(k.String())))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := ns.JS.PublishMsg(context.Background(), msg); err != nil {
			b.Fatal(err)
		}
		select {
		case <-replies:
		case <-time.After(60 * time.Second):
			b.Fatalf("message %d: no answer", i)
		}
	}
	model.mu.Lock()
	defer model.mu.Unlock()
	return &callModel{turns: model.turns, summaries: model.summaries, flush: model.flush}
}
