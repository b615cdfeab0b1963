package turn

import (
	"context"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/internal/cputime"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/models"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

// sizedModel answers every call with a ~300-byte reply and reports as prompt usage what it was
// sent (bytes/4), as a real model would; it records the bytes of each call, and tells summary
// calls (the compaction prompt) apart.
type sizedModel struct {
	mu        sync.Mutex
	calls     int
	summaries int
	maxBytes  int
	bytes     []int // per normal call
}

func (m *sizedModel) stream(_ context.Context, model *llm.Model, c *llm.Context, _ *llm.StreamOptions) iter.Seq[llm.Event] {
	n := len(c.SystemPrompt)
	for i := range c.Messages {
		for _, b := range c.Messages[i].Content {
			n += len(b.Text) + len(b.Thinking)
		}
	}
	summary := strings.HasPrefix(c.SystemPrompt, "You compact the history")
	m.mu.Lock()
	m.calls++
	if summary {
		m.summaries++
	} else {
		m.bytes = append(m.bytes, n)
		m.maxBytes = max(m.maxBytes, n)
	}
	m.mu.Unlock()
	text := "reply " + strings.Repeat("words of an answer ", 15)
	if summary {
		text = "## Goal\nthe users keep chatting; " + strings.Repeat("facts ", 100)
	}
	return func(yield func(llm.Event) bool) {
		msg := llm.NewAssistant(model)
		msg.Content = []llm.Content{llm.Text(text)}
		msg.StopReason = llm.StopReasonStop
		msg.Usage = &llm.Usage{Input: n / 4, Output: len(text) / 4}
		yield(llm.Event{Type: llm.EventDone, Message: msg})
	}
}

func (m *sizedModel) summaryCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.summaries
}

// BenchmarkLongSessions runs 10 sessions of 1,000 turns each (2,000 context messages a
// session) against an 8k-token window, round by round (one turn of every session per round),
// and prints the CPU per turn of the first and the last 100 rounds (rounds with a compaction
// excluded and reported on their own) and the context bytes sent per model call.
//
//	go test -run - -bench LongSessions -benchtime 1x ./pkg/turn/
func BenchmarkLongSessions(b *testing.B) {
	const sessions, rounds, window = 10, 1000, 8000
	for range b.N {
		ns := natstest.New(b, natstest.WithMemoryStorage())
		cfg, err := config.Parse([]byte(fmt.Sprintf(`
ai:
  providers:
    demo: {api: faux, contextWindow: %d}
  agents:
    zhin: {provider: demo, model: demo-1}
`, window)))
		if err != nil {
			b.Fatal(err)
		}
		reg, err := models.NewRegistry(cfg.AI.Providers)
		if err != nil {
			b.Fatal(err)
		}
		model := &sizedModel{}
		o := modelOptions(cfg.AI, reg)
		o.ID, o.StreamFn, o.Log = "bench", model.stream, quietLog()
		w, err := New(context.Background(), ns.NC, ns.JS, o)
		if err != nil {
			b.Fatal(err)
		}
		if err := w.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		keys := make([]events.SessionKey, sessions)
		replies := make([]chan struct{}, sessions)
		for i := range keys {
			keys[i] = events.SessionKey{Platform: "webhook", Bot: "b1", Scope: "private", Scene: fmt.Sprintf("u%d", i)}
			ch := make(chan struct{}, 4)
			replies[i] = ch
			sub, err := ns.NC.Subscribe(events.IMOutSubject(keys[i]), func(*nats.Msg) { ch <- struct{}{} })
			if err != nil {
				b.Fatal(err)
			}
			defer sub.Unsubscribe() //nolint:errcheck
		}
		userText := strings.Repeat("a user message about things ", 10) // ~280 bytes
		type round struct {
			cpu       time.Duration
			compacted bool
		}
		out := make([]round, rounds)
		var sent atomic.Int64
		b.ResetTimer()
		for r := range rounds {
			before, sums := cputime.Process(), model.summaryCount()
			for i, k := range keys {
				sent.Add(1)
				publishUser(b, ns, k, fmt.Sprintf("m%d-%d", i, r), fmt.Sprintf("%d: %s", r, userText))
			}
			for i := range keys {
				select {
				case <-replies[i]:
				case <-time.After(60 * time.Second):
					b.Fatalf("round %d: session %d did not answer", r, i)
				}
			}
			out[r] = round{cpu: cputime.Process() - before, compacted: model.summaryCount() > sums}
		}
		b.StopTimer()
		_ = w.Stop(context.Background())
		// Mean and median CPU per turn of the rounds without a compaction in [from, to): the
		// median is robust against a GC cycle or a neighbour's burst landing in one round.
		avg := func(from, to int) (time.Duration, time.Duration, int) {
			var sum time.Duration
			var xs []time.Duration
			for _, r := range out[from:to] {
				if !r.compacted {
					sum += r.cpu
					xs = append(xs, r.cpu)
				}
			}
			if len(xs) == 0 {
				return 0, 0, 0
			}
			slices.Sort(xs)
			return sum / time.Duration(len(xs)*sessions), xs[len(xs)/2] / sessions, len(xs)
		}
		first, firstMed, nf := avg(0, 100)
		last, lastMed, nl := avg(rounds-100, rounds)
		var compCPU time.Duration
		compRounds := 0
		for _, r := range out {
			if r.compacted {
				compCPU += r.cpu
				compRounds++
			}
		}
		model.mu.Lock()
		firstBytes, lastBytes := maxOf(model.bytes[:100*sessions]), maxOf(model.bytes[len(model.bytes)-100*sessions:])
		fmt.Printf("long sessions: %d sessions x %d turns, window %d tokens, %d model calls, %d summary calls\n",
			sessions, rounds, window, model.calls, model.summaries)
		fmt.Printf("  cpu per turn, rounds 1-100:   mean %v, median %v (%d rounds without a compaction)\n", first, firstMed, nf)
		fmt.Printf("  cpu per turn, rounds %d-%d: mean %v, median %v (%d rounds without a compaction); last/first mean %.2f, median %.2f\n",
			rounds-99, rounds, last, lastMed, nl, float64(last)/float64(first), float64(lastMed)/float64(firstMed))
		if compRounds > 0 {
			fmt.Printf("  rounds with a compaction: %d, cpu per turn in them %v\n", compRounds, compCPU/time.Duration(compRounds*sessions))
		}
		fmt.Printf("  context bytes per model call: max %d in rounds 1-100, max %d in the last 100, max %d overall (window ~%d bytes)\n",
			firstBytes, lastBytes, model.maxBytes, window*4)
		model.mu.Unlock()
		b.ReportMetric(float64(last)/float64(first), "cpu-last/first")
		b.ReportMetric(float64(lastMed)/float64(firstMed), "cpu-median-last/first")
		b.ReportMetric(float64(model.maxBytes), "max-ctx-bytes")
	}
}

func maxOf(xs []int) int {
	m := 0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

func publishUser(b *testing.B, ns *natstest.Server, k events.SessionKey, id, text string) {
	m := events.IMMessage{Platform: k.Platform, Bot: k.Bot, MessageID: id, Scene: events.Scene{Type: k.Scope, ID: k.Scene},
		Sender: events.Sender{ID: k.Scene, Name: "U", Roles: []string{"user"}}, Content: events.Segments{events.TextSeg(text)},
		Time: time.Now().UnixMilli()}
	msg, err := events.NewMsg(events.AgentInSubject(k), events.New(events.UserMessage{Message: m, Text: text}, events.WithSession(k.String())))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := ns.JS.PublishMsg(context.Background(), msg); err != nil {
		b.Fatal(err)
	}
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
