package loop

import (
	"context"
	"encoding/json"
	"iter"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/faux"
)

// script drives the loop with the faux provider (pkg/llm/providers/faux, the protocol edge):
// each LLM call streams the next reply. It also records the context every call saw.
type script struct {
	replies []reply

	mu   sync.Mutex
	p    *faux.Provider
	seen []llm.Context
}

type reply struct {
	thinking string
	text     string
	calls    []llm.Content
	stop     llm.StopReason // default: toolUse with calls, stop without
	errMsg   string         // ends with an error event instead of done
	usage    *llm.Usage
	stall    bool // wait (an hour) before every event after start: only an abort ends it
}

// scriptDeltaSize splits text into several deltas ("hello there" -> "hello ", "there").
const scriptDeltaSize = 6

func (s *script) stream(ctx context.Context, model *llm.Model, c *llm.Context, opts *llm.StreamOptions) iter.Seq[llm.Event] {
	s.mu.Lock()
	if s.p == nil {
		rs := make([]faux.Response, len(s.replies))
		for i, r := range s.replies {
			rs[i] = faux.Response{Thinking: r.thinking, Text: r.text, ToolCalls: r.calls, StopReason: r.stop, Error: r.errMsg, Usage: r.usage}
			if r.stall {
				rs[i].DeltaLatency = time.Hour
			}
		}
		s.p = faux.New(faux.WithResponses(rs...), faux.WithDeltaSize(scriptDeltaSize))
	}
	seen := *c
	seen.Messages = append([]llm.Message(nil), c.Messages...)
	s.seen = append(s.seen, seen)
	p := s.p
	s.mu.Unlock()
	return p.Stream(ctx, model, c, opts)
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
