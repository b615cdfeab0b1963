package events

import (
	"testing"

	"github.com/agentbus/agentbus/internal/cputime"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/nats-io/nats.go"
)

// benchEvents are the events one `agentbus bench --tool` turn writes, with realistic sizes: the
// inbound message, its inbox event, the tool call and result, the turn log records, the context
// commit and the outbound reply with its receipt.
func benchEvents() []struct {
	name string
	subj string
	ev   Any
} {
	k := SessionKey{Platform: "webhook", Bot: "bench", Scope: ScopePrivate, Scene: "u-000123"}
	sid := NewSessionID(k, 1).String()
	trace := "4bf92f3577b34da6a3ce929d0e0e4736"
	turn := "kqSZOTT9kZxH6bbB8Dhe4N"
	corr := []Option{WithSession(sid), WithTurn(turn), WithTrace(trace)}
	im := IMMessage{Platform: k.Platform, Bot: k.Bot, MessageID: "m-000123-0007",
		Scene:   Scene{Type: ScopePrivate, ID: k.Scene},
		Sender:  Sender{ID: k.Scene, Name: "Bench User 123", Roles: []string{"user"}},
		Content: Segments{TextSeg("please call bench_echo with this text: hello number 7")}, Time: 1767000000000}
	args := map[string]any{"text": "with this text: hello number 7"}
	user := llm.Message{Role: llm.RoleUser, Content: []llm.Content{llm.Text("please call bench_echo with this text: hello number 7")}, Timestamp: 1767000000001}
	call := llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.ToolCall("call_kqSZOTT9kZxH6bbB8Dhe4N", "bench_echo", args)},
		API: "faux", Provider: "faux", Model: "demo", StopReason: llm.StopReasonToolUse, Timestamp: 1767000000002,
		Usage: &llm.Usage{Input: 40, Output: 12, TotalTokens: 52}}
	res := ToolResult{CallID: "call_kqSZOTT9kZxH6bbB8Dhe4N", Tool: "bench_echo", Content: []llm.Content{llm.Text("with this text: hello number 7")},
		Worker: "tool-worker-kqSZOTT9kZxH6bbB8Dhe4M", DurationMs: 1}
	answer := llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.Text("You said: “please call bench_echo with this text: hello number 7”. I'm agentbus's built-in demo model.")},
		API: "faux", Provider: "faux", Model: "demo", StopReason: llm.StopReasonStop, Timestamp: 1767000000004,
		Usage: &llm.Usage{Input: 60, Output: 30, TotalTokens: 90}}
	return []struct {
		name string
		subj string
		ev   Any
	}{
		{"im.message", IMInSubject(k), New(im, WithSession(k.String()), WithTrace(trace))},
		{"inbox.user_message", AgentInSubject(k), New(UserMessage{Message: im, Text: "please call bench_echo with this text: hello number 7", IMSeq: 77},
			WithSession(sid), WithTrace(trace), WithID("in-webhook_bench_m-000123-0007"))},
		{"evt.turn_started", AgentEvtSubject(k, EvtKindTurnStarted), New(TurnStarted{Turn: turn, Trigger: InboxRef{Seq: 77, ID: "in-webhook_bench_m-000123-0007", Type: TypeUserMessage},
			Model: ModelRef{Provider: "faux", ID: "demo", API: "faux"}, ContextSeq: 12, Input: []llm.Message{user}, Worker: "worker-1", LeaseRevision: 9}, corr...)},
		{"evt.message_end", AgentEvtSubject(k, EvtKindMessageEnd), New(MessageEnd{Index: 1, Message: call}, corr...)},
		{"tool.call", ToolCallSubject("bench_echo"), New(ToolCall{CallID: "call_kqSZOTT9kZxH6bbB8Dhe4N", Tool: "bench_echo", Args: args, SessionKey: k, Turn: turn,
			Caller: Caller{Platform: k.Platform, Bot: k.Bot, Scope: k.Scope, SenderID: k.Scene, Roles: []string{"user"}}, Deadline: 1767000060000, Idempotent: true}, corr...)},
		{"tool.result", ToolResultSubject(k), New(res, corr...)},
		{"evt.tool_result", AgentEvtSubject(k, EvtKindToolResult), New(ToolResultRecorded{Result: res, Seq: 31}, corr...)},
		{"ctx.messages", AgentCtxSubject(NewSessionID(k, 1)), New(CtxMessages{Messages: []llm.Message{user, call, res.Message(1767000000003), answer}}, corr...)},
		{"im.out", IMOutSubject(k), New(Outbound{OutID: OutID(turn, 0), Turn: turn, Part: 0, Platform: k.Platform, Bot: k.Bot, Scene: im.Scene, ReplyTo: im.MessageID,
			Content: Segments{TextSeg(answer.TextContent())}, Final: true}, corr...)},
		{"im.sent", IMSentSubject(k), New(Receipt{OutID: OutID(turn, 0), Turn: turn, Platform: k.Platform, Bot: k.Bot, Scene: im.Scene, MessageID: "p-991",
			Time: 1767000000005, Content: Segments{TextSeg(answer.TextContent())}, Sender: Sender{ID: k.Bot, Name: "bench"}}, corr...)},
		{"evt.turn_committed", AgentEvtSubject(k, EvtKindTurnCommitted), New(TurnCommitted{FirstSeq: 13, LastSeq: 13, Messages: 4,
			Usage: &llm.Usage{Input: 100, Output: 42, TotalTokens: 142}, StopReason: llm.StopReasonStop,
			Tail: []MessageEnd{{Index: 2, Message: res.Message(1767000000003)}, {Index: 3, Message: answer}}}, corr...)},
		{"live.delta", AgentLiveSubject(k), New(LiveDelta{Kind: "text_delta", Delta: "You said: ", Seq: 3, Message: 3}, WithSession(sid), WithTurn(turn))},
	}
}

func BenchmarkMarshal(b *testing.B) {
	for _, c := range benchEvents() {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := cputime.Process()
			for b.Loop() {
				if _, err := Marshal(c.ev); err != nil {
					b.Fatal(err)
				}
			}
			cputime.Report(b, cpu)
		})
	}
}

func BenchmarkNewMsg(b *testing.B) {
	for _, c := range benchEvents() {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := cputime.Process()
			for b.Loop() {
				if _, err := NewMsg(c.subj, c.ev); err != nil {
					b.Fatal(err)
				}
			}
			cputime.Report(b, cpu)
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, c := range benchEvents() {
		data, err := Marshal(c.ev)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			cpu := cputime.Process()
			for b.Loop() {
				if _, err := Decode(data); err != nil {
					b.Fatal(err)
				}
			}
			cputime.Report(b, cpu)
		})
	}
}

func BenchmarkDecodeMsg(b *testing.B) {
	for _, c := range benchEvents() {
		m, err := NewMsg(c.subj, c.ev)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := cputime.Process()
			for b.Loop() {
				if _, err := DecodeMsg(m); err != nil {
					b.Fatal(err)
				}
			}
			cputime.Report(b, cpu)
		})
	}
}

// BenchmarkUnmarshalMsg is the typed decode the tool worker (tool.call) and egress (im.out) use.
func BenchmarkUnmarshalMsg(b *testing.B) {
	for _, c := range benchEvents() {
		m, err := NewMsg(c.subj, c.ev)
		if err != nil {
			b.Fatal(err)
		}
		switch c.ev.(type) {
		case *Event[ToolCall]:
			b.Run(c.name, func(b *testing.B) {
				b.ReportAllocs()
				cpu := cputime.Process()
				for b.Loop() {
					var ev Event[ToolCall]
					if err := UnmarshalMsg(m, &ev); err != nil {
						b.Fatal(err)
					}
				}
				cputime.Report(b, cpu)
			})
		case *Event[Outbound]:
			b.Run(c.name, func(b *testing.B) {
				b.ReportAllocs()
				cpu := cputime.Process()
				for b.Loop() {
					var ev Event[Outbound]
					if err := UnmarshalMsg(m, &ev); err != nil {
						b.Fatal(err)
					}
				}
				cputime.Report(b, cpu)
			})
		}
	}
}

// BenchmarkHeaders is NewMsg's header work alone (ids, correlation, traceparent).
func BenchmarkHeaders(b *testing.B) {
	c := Correlation{Session: "webhook:bench:private:u-000123#1", Turn: "kqSZOTT9kZxH6bbB8Dhe4N", Trace: "4bf92f3577b34da6a3ce929d0e0e4736"}
	b.ReportAllocs()
	cpu := cputime.Process()
	for b.Loop() {
		h := make(nats.Header, 7)
		SetCorrelation(h, c)
	}
	cputime.Report(b, cpu)
}

func BenchmarkNewTraceID(b *testing.B) {
	b.ReportAllocs()
	cpu := cputime.Process()
	for b.Loop() {
		_ = NewTraceID()
	}
	cputime.Report(b, cpu)
}

// BenchmarkTurnCodec encodes every event one tool turn writes and decodes it once, as a turn's
// share of codec work (docs/benchmarks.md compares it with encoding/json).
func BenchmarkTurnCodec(b *testing.B) {
	evs := benchEvents()
	b.ReportAllocs()
	cpu := cputime.Process()
	for b.Loop() {
		for _, c := range evs {
			data, err := Marshal(c.ev)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := Decode(data); err != nil {
				b.Fatal(err)
			}
		}
	}
	cputime.Report(b, cpu)
}
