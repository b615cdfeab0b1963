package loop

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"strings"
	"sync"
	"testing"

	"github.com/agentbus/agentbus/pkg/llm"
)

// script is a tiny scripted provider at the protocol edge: each LLM call takes the next reply
// and streams it with the event sequence of pkg/llm's contract. It records what every call saw.
type script struct {
	mu      sync.Mutex
	replies []reply
	seen    []llm.Context
}

type reply struct {
	thinking string
	text     string
	calls    []llm.Content
	stop     llm.StopReason // default: toolUse with calls, stop without
	errMsg   string         // ends with an error event instead of done
	usage    llm.Usage
	hold     chan struct{} // after the first text delta: wait for this or ctx
}

func (s *script) stream(ctx context.Context, model *llm.Model, c *llm.Context, _ *llm.StreamOptions) iter.Seq[llm.Event] {
	s.mu.Lock()
	seen := *c
	seen.Messages = append([]llm.Message(nil), c.Messages...)
	s.seen = append(s.seen, seen)
	var r reply
	if len(s.replies) > 0 {
		r = s.replies[0]
		s.replies = s.replies[1:]
	} else {
		r = reply{text: "(script exhausted)"}
	}
	s.mu.Unlock()
	return func(yield func(llm.Event) bool) {
		p := llm.NewAssistant(model)
		*p.Usage = r.usage
		if !yield(llm.Event{Type: llm.EventStart, Partial: p}) {
			return
		}
		if r.thinking != "" {
			p.Content = append(p.Content, llm.Content{Type: llm.ContentThinking})
			i := len(p.Content) - 1
			yield(llm.Event{Type: llm.EventThinkingStart, ContentIndex: i, Partial: p})
			p.Content[i].Thinking = r.thinking
			yield(llm.Event{Type: llm.EventThinkingDelta, ContentIndex: i, Delta: r.thinking, Partial: p})
			yield(llm.Event{Type: llm.EventThinkingEnd, ContentIndex: i, Content: r.thinking, Partial: p})
		}
		if r.text != "" {
			p.Content = append(p.Content, llm.Content{Type: llm.ContentText})
			i := len(p.Content) - 1
			yield(llm.Event{Type: llm.EventTextStart, ContentIndex: i, Partial: p})
			half := len(r.text) / 2
			for n, d := range []string{r.text[:half], r.text[half:]} {
				p.Content[i].Text += d
				yield(llm.Event{Type: llm.EventTextDelta, ContentIndex: i, Delta: d, Partial: p})
				if n == 0 && r.hold != nil {
					select {
					case <-r.hold:
					case <-ctx.Done():
						yield(llm.ErrorEvent(model, p, llm.StopReasonAborted, ctx.Err()))
						return
					}
				}
			}
			yield(llm.Event{Type: llm.EventTextEnd, ContentIndex: i, Content: r.text, Partial: p})
		}
		for _, c := range r.calls {
			p.Content = append(p.Content, llm.Content{Type: llm.ContentToolCall, ID: c.ID, Name: c.Name, Arguments: map[string]any{}})
			i := len(p.Content) - 1
			yield(llm.Event{Type: llm.EventToolCallStart, ContentIndex: i, Partial: p})
			raw, _ := json.Marshal(c.Arguments)
			p.Content[i].Arguments = c.Arguments
			yield(llm.Event{Type: llm.EventToolCallDelta, ContentIndex: i, Delta: string(raw), Partial: p})
			tc := p.Content[i]
			yield(llm.Event{Type: llm.EventToolCallEnd, ContentIndex: i, ToolCall: &tc, Partial: p})
		}
		if r.errMsg != "" {
			yield(llm.ErrorEvent(model, p, llm.StopReasonError, errors.New(r.errMsg)))
			return
		}
		stop := r.stop
		if stop == "" {
			stop = llm.StopReasonStop
			if len(r.calls) > 0 {
				stop = llm.StopReasonToolUse
			}
		}
		final := p.Clone()
		final.StopReason = stop
		yield(llm.Event{Type: llm.EventDone, Reason: stop, Message: &final})
	}
}

func (s *script) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

func (s *script) context(i int) llm.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[i]
}

var testModel = &llm.Model{ID: "test-model", API: "test", Provider: "test"}

// recorder collects events; it is safe for the Agent's listeners too.
type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) add(ev Event) {
	r.mu.Lock()
	if ev.Message != nil && (ev.Type == EventMessageStart || ev.Type == EventMessageUpdate) {
		c := ev.Message.Clone() // partials are live; keep what they were
		ev.Message = &c
	}
	r.events = append(r.events, ev)
	r.mu.Unlock()
}

func (r *recorder) all() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// trace renders the events compactly: repeated message_update events collapse into one, and
// message events name the role.
func (r *recorder) trace() string {
	var b []string
	for _, ev := range r.all() {
		s := string(ev.Type)
		switch ev.Type {
		case EventMessageStart, EventMessageEnd:
			s += "(" + ev.Message.Role + ")"
		case EventMessageUpdate:
			if len(b) > 0 && b[len(b)-1] == "message_update*" {
				continue
			}
			s = "message_update*"
		case EventToolExecutionStart, EventToolExecutionEnd, EventToolExecutionUpdate:
			s += "(" + ev.ToolCallID + ")"
		}
		b = append(b, s)
	}
	return strings.Join(b, " ")
}

func (r *recorder) ofType(t EventType) []Event {
	var out []Event
	for _, ev := range r.all() {
		if ev.Type == t {
			out = append(out, ev)
		}
	}
	return out
}

func userMsg(text string) llm.Message { return llm.UserText(text, 1) }

func call(id, name string, args map[string]any) llm.Content { return llm.ToolCall(id, name, args) }

var echoSchema = json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)

// echoTool returns its "text" argument.
func echoTool() AgentTool {
	return AgentTool{
		Tool: llm.Tool{Name: "echo", Description: "echo text", Parameters: echoSchema},
		Execute: func(_ context.Context, _ string, args map[string]any, _ func(ToolResult)) (ToolResult, error) {
			s, _ := args["text"].(string)
			return TextResult(s), nil
		},
	}
}

func toolTool(name string, fn ExecuteFunc) AgentTool {
	return AgentTool{Tool: llm.Tool{Name: name, Description: name, Parameters: json.RawMessage(`{"type":"object"}`)}, Execute: fn}
}

func newConfig(s *script) *Config {
	return &Config{Model: testModel, StreamFn: s.stream}
}

func mustRun(t *testing.T, ctx context.Context, prompts []llm.Message, ac *AgentContext, cfg *Config, rec *recorder) []llm.Message {
	t.Helper()
	out, err := Run(ctx, prompts, ac, cfg, rec.add)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return out
}

func roles(msgs []llm.Message) string {
	var b []string
	for _, m := range msgs {
		b = append(b, m.Role)
	}
	return strings.Join(b, ",")
}

func resultText(m llm.Message) string { return m.TextContent() }
