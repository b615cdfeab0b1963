package loop

import (
	"context"
	"errors"
	"iter"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/llm"
)

func newTestAgent(s *script, tools ...AgentTool) *Agent {
	return NewAgent(AgentOptions{SystemPrompt: "sys", Model: testModel, Tools: tools, Config: Config{StreamFn: s.stream}})
}

func TestAgentPromptAndSubscribe(t *testing.T) {
	s := &script{replies: []reply{{text: "hello"}, {text: "again"}}}
	a := newTestAgent(s)
	var order []string
	rec := &recorder{}
	unsub1 := a.Subscribe(func(_ context.Context, ev Event) {
		if ev.Type == EventAgentEnd {
			order = append(order, "first")
		}
		rec.add(ev)
	})
	a.Subscribe(func(_ context.Context, ev Event) {
		if ev.Type == EventAgentEnd {
			order = append(order, "second")
		}
		if ev.Type == EventMessageEnd && ev.Message.Role == llm.RoleAssistant {
			// Listeners run after the state update and may read the state.
			st := a.State()
			if !st.IsStreaming || st.Messages[len(st.Messages)-1].TextContent() == "" {
				t.Errorf("state inside listener: %+v", st)
			}
		}
	})
	if err := a.Prompt(t.Context(), "hi"); err != nil {
		t.Fatal(err)
	}
	want := "agent_start turn_start message_start(user) message_end(user) message_start(assistant) message_update* message_end(assistant) turn_end agent_end"
	if rec.trace() != want {
		t.Fatalf("events:\n got %s\nwant %s", rec.trace(), want)
	}
	if strings.Join(order, ",") != "first,second" {
		t.Fatalf("listener order: %v", order)
	}
	st := a.State()
	if st.IsStreaming || roles(st.Messages) != "user,assistant" || st.Messages[1].TextContent() != "hello" || st.StreamingMessage != nil {
		t.Fatalf("state: %+v", st)
	}
	if s.context(0).SystemPrompt != "sys" {
		t.Fatal("system prompt not used")
	}

	unsub1()
	unsub1() // idempotent
	n := len(rec.all())
	if err := a.Prompt(t.Context(), "more"); err != nil {
		t.Fatal(err)
	}
	if len(rec.all()) != n {
		t.Fatal("unsubscribed listener still called")
	}
	if roles(a.State().Messages) != "user,assistant,user,assistant" || roles(s.context(1).Messages) != "user,assistant,user" {
		t.Fatalf("history not carried over: %s", roles(s.context(1).Messages))
	}
}

// startStalled starts a prompt whose reply stalls after start and waits until it is streaming.
func startStalled(t *testing.T, a *Agent) chan error {
	t.Helper()
	started := make(chan struct{})
	unsub := a.Subscribe(func(_ context.Context, ev Event) {
		if ev.Type == EventMessageStart && ev.Message.Role == llm.RoleAssistant {
			select {
			case <-started:
			default:
				close(started)
			}
		}
	})
	done := make(chan error, 1)
	go func() { done <- a.Prompt(context.Background(), "long question") }()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("prompt did not start streaming")
	}
	unsub()
	return done
}

func TestAgentBusyAbortAndWaitForIdle(t *testing.T) {
	s := &script{replies: []reply{{text: "a long answer", stall: true, usage: &llm.Usage{Input: 50, Output: 3}}}}
	a := newTestAgent(s)
	var listenerCtx context.Context
	a.Subscribe(func(ctx context.Context, ev Event) {
		if ev.Type == EventAgentEnd {
			listenerCtx = ctx
		}
	})
	done := startStalled(t, a)

	st := a.State()
	if !st.IsStreaming || st.StreamingMessage == nil || st.StreamingMessage.Role != llm.RoleAssistant {
		t.Fatalf("state while streaming: %+v", st)
	}
	if err := a.Prompt(t.Context(), "again"); !errors.Is(err, ErrAgentBusy) {
		t.Fatalf("Prompt while running: %v", err)
	}
	if err := a.Continue(t.Context()); !errors.Is(err, ErrAgentBusy) {
		t.Fatalf("Continue while running: %v", err)
	}
	short, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	if err := a.WaitForIdle(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitForIdle while running: %v", err)
	}

	a.Abort()
	if err := a.WaitForIdle(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Prompt after abort: %v", err)
	}
	st = a.State()
	last := st.Messages[len(st.Messages)-1]
	if st.IsStreaming || last.StopReason != llm.StopReasonAborted || last.Usage.Input == 0 || st.ErrorMessage == "" {
		t.Fatalf("after abort: %+v last %+v", st, last)
	}
	if listenerCtx == nil || listenerCtx.Err() == nil {
		t.Fatal("listener context not done after Abort")
	}
	a.Abort() // idle: no-op
	if err := a.WaitForIdle(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestAgentSteerDuringTools(t *testing.T) {
	for _, mode := range []ToolExecutionMode{Sequential, Parallel} {
		t.Run(string(mode), func(t *testing.T) {
			s := &script{replies: []reply{
				{calls: []llm.Content{call("a", "work", nil), call("b", "work", nil)}},
				{text: "switching"},
			}}
			var a *Agent
			tool := toolTool("work", func(_ context.Context, id string, _ map[string]any, _ func(ToolResult)) (ToolResult, error) {
				if id == "a" {
					a.Steer(userMsg("actually, stop"))
				}
				return TextResult("did " + id), nil
			})
			a = newTestAgent(s, tool)
			a.cfg.ToolExecution = mode
			if err := a.Prompt(t.Context(), "work"); err != nil {
				t.Fatal(err)
			}
			msgs := a.State().Messages
			if roles(msgs) != "user,assistant,toolResult,toolResult,user,assistant" {
				t.Fatalf("messages: %s", roles(msgs))
			}
			skipped := msgs[3].TextContent() == msgSkipped
			if skipped != (mode == Sequential) {
				t.Fatalf("%s: second result %q", mode, msgs[3].TextContent())
			}
			if a.HasQueuedMessages() {
				t.Fatal("steering message left in the queue")
			}
		})
	}
}

func TestAgentFollowUp(t *testing.T) {
	s := &script{replies: []reply{{text: "one"}, {text: "two"}}}
	a := newTestAgent(s)
	a.Subscribe(func(_ context.Context, ev Event) {
		if ev.Type == EventTurnEnd && ev.Message.TextContent() == "one" {
			a.FollowUp(userMsg("and then?"))
		}
	})
	if err := a.Prompt(t.Context(), "go"); err != nil {
		t.Fatal(err)
	}
	if got := roles(a.State().Messages); got != "user,assistant,user,assistant" {
		t.Fatalf("messages: %s", got)
	}
}

func TestAgentQueueModes(t *testing.T) {
	tests := []struct {
		mode  QueueMode
		calls int
		first string // roles of the first LLM call
	}{
		{OneAtATime, 2, "user,user"},
		{All, 1, "user,user,user"},
	}
	for _, tt := range tests {
		t.Run(string(tt.mode), func(t *testing.T) {
			s := &script{replies: []reply{{text: "r1"}, {text: "r2"}}}
			a := newTestAgent(s)
			a.SetSteeringMode(tt.mode)
			a.Steer(userMsg("s1"))
			a.Steer(userMsg("s2"))
			if err := a.Prompt(t.Context(), "q"); err != nil {
				t.Fatal(err)
			}
			if s.calls() != tt.calls || roles(s.context(0).Messages) != tt.first {
				t.Fatalf("%d calls, first saw %s", s.calls(), roles(s.context(0).Messages))
			}
		})
	}
	t.Run("follow-up all", func(t *testing.T) {
		s := &script{replies: []reply{{text: "r1"}, {text: "r2"}, {text: "r3"}}}
		a := newTestAgent(s)
		a.SetFollowUpMode(All)
		a.FollowUp(userMsg("f1"))
		a.FollowUp(userMsg("f2"))
		if err := a.Prompt(t.Context(), "q"); err != nil {
			t.Fatal(err)
		}
		if s.calls() != 2 || roles(s.context(1).Messages) != "user,assistant,user,user" {
			t.Fatalf("%d calls, second saw %s", s.calls(), roles(s.context(1).Messages))
		}
	})
}

func TestAgentClearQueues(t *testing.T) {
	a := newTestAgent(&script{})
	a.Steer(userMsg("s"))
	a.FollowUp(userMsg("f"))
	a.ClearSteeringQueue()
	if !a.HasQueuedMessages() {
		t.Fatal("follow-up cleared with steering")
	}
	a.ClearFollowUpQueue()
	if a.HasQueuedMessages() {
		t.Fatal("queues not cleared")
	}
}

func TestAgentContinue(t *testing.T) {
	asst := llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.Text("earlier answer")}, StopReason: llm.StopReasonStop}
	tests := []struct {
		name     string
		history  []llm.Message
		steer    string
		followUp string
		want     error
		saw      string // roles of the LLM call
	}{
		{name: "no messages", want: ErrNoMessages},
		{name: "assistant tail, nothing queued", history: []llm.Message{userMsg("q"), asst}, want: ErrContinueFromAssistant},
		{name: "assistant tail, steering queued", history: []llm.Message{userMsg("q"), asst}, steer: "s", saw: "user,assistant,user"},
		{name: "assistant tail, follow-up queued", history: []llm.Message{userMsg("q"), asst}, followUp: "f", saw: "user,assistant,user"},
		{name: "user tail", history: []llm.Message{userMsg("q")}, saw: "user"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &script{replies: []reply{{text: "continued"}}}
			a := newTestAgent(s)
			a.ReplaceMessages(tt.history)
			if tt.steer != "" {
				a.Steer(userMsg(tt.steer))
			}
			if tt.followUp != "" {
				a.FollowUp(userMsg(tt.followUp))
			}
			err := a.Continue(t.Context())
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if tt.want != nil {
				if s.calls() != 0 || a.State().IsStreaming {
					t.Fatal("a failed Continue ran or left the agent busy")
				}
				return
			}
			if s.calls() != 1 || roles(s.context(0).Messages) != tt.saw {
				t.Fatalf("%d calls, saw %s", s.calls(), roles(s.context(0).Messages))
			}
			if a.HasQueuedMessages() {
				t.Fatal("queued message not consumed")
			}
		})
	}
}

func TestAgentNoModel(t *testing.T) {
	a := NewAgent(AgentOptions{})
	if err := a.Prompt(t.Context(), "x"); !errors.Is(err, ErrNoModel) {
		t.Fatalf("err = %v", err)
	}
}

func TestAgentListenerPanicBecomesFailedMessage(t *testing.T) {
	s := &script{replies: []reply{{text: "x"}, {text: "after"}}}
	a := newTestAgent(s)
	unsub := a.Subscribe(func(_ context.Context, ev Event) {
		if ev.Type == EventTurnEnd {
			panic("listener bug")
		}
	})
	var ends int
	a.Subscribe(func(_ context.Context, ev Event) {
		if ev.Type == EventAgentEnd {
			ends++
		}
	})
	if err := a.Prompt(t.Context(), "q"); err != nil {
		t.Fatal(err)
	}
	st := a.State()
	last := st.Messages[len(st.Messages)-1]
	if st.IsStreaming || last.StopReason != llm.StopReasonError || !strings.Contains(last.ErrorMessage, "listener bug") || ends != 1 {
		t.Fatalf("state %+v, agent_end seen %d", st, ends)
	}
	unsub()
	if err := a.Prompt(t.Context(), "again"); err != nil {
		t.Fatalf("agent unusable after a panic: %v", err)
	}
}

func TestAgentPendingToolCallsAndStreamingSnapshot(t *testing.T) {
	s := &script{replies: []reply{{text: "calling", calls: []llm.Content{call("c1", "echo", map[string]any{"text": "x"})}}, {text: "ok"}}}
	a := newTestAgent(s, echoTool())
	var pending []string
	var snapshot string
	a.Subscribe(func(_ context.Context, ev Event) {
		switch {
		case ev.Type == EventToolExecutionStart:
			pending = a.State().PendingToolCalls
		case ev.Type == EventMessageUpdate && ev.Update.Type == llm.EventTextEnd && snapshot == "":
			snapshot = a.State().StreamingMessage.TextContent()
		}
	})
	if err := a.Prompt(t.Context(), "q"); err != nil {
		t.Fatal(err)
	}
	if len(pending) != 1 || pending[0] != "c1" || len(a.State().PendingToolCalls) != 0 {
		t.Fatalf("pending: %v / %v", pending, a.State().PendingToolCalls)
	}
	if snapshot != "calling" {
		t.Fatalf("streaming snapshot %q", snapshot)
	}
}

func TestAgentThinkingLevelReachesOptions(t *testing.T) {
	var got llm.ThinkingLevel
	a := NewAgent(AgentOptions{Model: testModel, ThinkingLevel: llm.ThinkingHigh, Config: Config{
		StreamFn: func(ctx context.Context, m *llm.Model, c *llm.Context, o *llm.StreamOptions) iter.Seq[llm.Event] {
			got = o.Thinking
			return (&script{replies: []reply{{text: "x"}}}).stream(ctx, m, c, o)
		},
	}})
	if err := a.Prompt(t.Context(), "q"); err != nil {
		t.Fatal(err)
	}
	if got != llm.ThinkingHigh {
		t.Fatalf("thinking %q", got)
	}
}
