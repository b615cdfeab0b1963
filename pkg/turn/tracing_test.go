package turn

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/faux"
	"github.com/agentbus/agentbus/pkg/tracing"
)

// Which turns get a span: a trigger's span context makes the turn its child, whatever the
// event; a user's chat message without one starts a root in its envelope's trace; a wakeup
// nobody traced (here a background task's result) starts no span at all, but still runs.
func TestTurnSpans(t *testing.T) {
	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		spanID  = "00f067aa0ba902b7"
	)
	parent := "00-" + traceID + "-" + spanID + "-01"
	tests := []struct {
		name   string
		ev     func(k events.SessionKey) events.Any
		header string // Agentbus-Traceparent of the inbox event ("" none)
		want   string // "child", "root" or "none"
	}{
		{"wakeup without span context", subagentResult, "", "none"},
		{"wakeup with span context", subagentResult, parent, "child"},
		{"chat message with span context", userMessage, parent, "child"},
		{"chat message without span context", userMessage, "", "root"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil, faux.WithResponder(faux.Echo))
			exp := tracetest.NewInMemoryExporter()
			tp, err := tracing.NewWithExporter(context.Background(), "turn-worker", exp)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			o := h.options("w1")
			o.StreamFn, o.Tracer = tracing.WrapStream(h.faux.Stream), tp
			o.LeaseTTL, o.AckWait, o.IdleRelease = 2*time.Second, 2*time.Second, 5*time.Second
			w, err := New(context.Background(), h.ns.NC, h.ns.JS, o)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = w.Stop(context.Background()) })

			k := sk
			k.Scene = "u" + string(rune('a'+i))
			ev := tt.ev(k)
			msg, err := events.NewMsg(events.AgentInSubject(k), ev)
			if err != nil {
				t.Fatal(err)
			}
			if tt.header != "" {
				msg.Header.Set(events.HeaderSpanContext, tt.header)
			}
			if _, err := h.inbox.Publish(context.Background(), msg); err != nil {
				t.Fatal(err)
			}
			h.replies(k, 1) // the turn ran
			// The turn's span ends after its reply is published: wait for it, or (none) give
			// it 3 s to show up by mistake.
			var turn, chat int
			count := func() {
				turn, chat = 0, 0
				for _, s := range exp.GetSpans() {
					switch {
					case s.Name == "turn":
						turn++
						sc := s.SpanContext
						switch tt.want {
						case "child":
							if sc.TraceID().String() != traceID || s.Parent.SpanID().String() != spanID || !s.Parent.IsRemote() {
								t.Fatalf("turn span %v parent %v, want a child of %s", sc, s.Parent, tt.header)
							}
						case "root":
							if sc.TraceID().String() != ev.EventMeta().Trace || s.Parent.IsValid() {
								t.Fatalf("turn span %v parent %v, want a root in the envelope's trace %s", sc, s.Parent, ev.EventMeta().Trace)
							}
						}
					case strings.HasPrefix(s.Name, "chat "):
						chat++
					}
				}
			}
			if tt.want == "none" {
				time.Sleep(3 * time.Second) // a window to wait out: an untraced wakeup exports no span
				count()
			} else {
				testwait.Eventually(t, 0, func() error { count(); return testwait.Want(turn > 0, "no turn span exported") })
			}
			switch {
			case tt.want == "none" && (turn != 0 || chat != 0):
				t.Fatalf("%d turn and %d model spans for an untraced wakeup, want none", turn, chat)
			case tt.want != "none" && turn != 1:
				t.Fatalf("%d turn spans, want 1", turn)
			case tt.want != "none" && chat != 1:
				t.Fatalf("%d model spans under the turn, want 1", chat)
			}
		})
	}
}

func userMessage(k events.SessionKey) events.Any {
	m := events.IMMessage{Platform: k.Platform, Bot: k.Bot, MessageID: "m1", Scene: events.Scene{Type: k.Scope, ID: k.Scene},
		Sender: events.Sender{ID: "u1", Name: "Ann", Roles: []string{"user"}}, Content: events.Segments{events.TextSeg("hello")},
		Time: time.Now().UnixMilli()}
	return events.New(events.UserMessage{Message: m, Text: "hello"}, events.WithSession(k.String()), events.WithTrace(events.NewTraceID()))
}

func subagentResult(k events.SessionKey) events.Any {
	return events.New(events.SubagentResult{TaskID: "task1", Content: []llm.Content{llm.Text("the answer is 42")}},
		events.WithSession(k.String()), events.WithTrace(events.NewTraceID()))
}
