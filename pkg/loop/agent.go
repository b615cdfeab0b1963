package loop

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/agentbus/agentbus/pkg/llm"
)

// QueueMode says how many queued steering or follow-up messages one poll takes.
type QueueMode string

const (
	// OneAtATime delivers one queued message per poll (per turn); the default.
	OneAtATime QueueMode = "one-at-a-time"
	// All delivers every queued message at once.
	All QueueMode = "all"
)

// AgentOptions configure NewAgent.
type AgentOptions struct {
	SystemPrompt  string
	Model         *llm.Model
	ThinkingLevel llm.ThinkingLevel
	Tools         []AgentTool
	Messages      []llm.Message

	// Config holds the hooks and options of every run. Model, GetSteeringMessages and
	// GetFollowUpMessages are set by the agent from its state and queues; StreamOptions.Thinking
	// from ThinkingLevel.
	Config Config

	SteeringMode QueueMode // default OneAtATime
	FollowUpMode QueueMode // default OneAtATime
}

// AgentState is a snapshot of an Agent. Slices are shared with the agent and read-only.
type AgentState struct {
	SystemPrompt  string
	Model         *llm.Model
	ThinkingLevel llm.ThinkingLevel
	Tools         []AgentTool
	Messages      []llm.Message
	// IsStreaming is true while a run is in progress.
	IsStreaming bool
	// StreamingMessage is the message being streamed, if any: a copy taken at its
	// message_start and refreshed at each content block end (text_end, thinking_end,
	// toolcall_end). For every delta, Subscribe to message_update.
	StreamingMessage *llm.Message
	// PendingToolCalls are the ids of tool calls started and not yet ended.
	PendingToolCalls []string
	// ErrorMessage is the error of the last failed assistant message of the current or last run.
	ErrorMessage string
}

// Listener receives an agent's events. ctx is the run's context (done on Abort). Listeners are
// called in subscription order on the run's goroutine and the run waits for each to return.
type Listener func(ctx context.Context, ev Event)

// Agent is a stateful, concurrency-safe wrapper around Run: it keeps the conversation, runs one
// prompt at a time, queues steering and follow-up messages, and fans events out to listeners.
type Agent struct {
	mu         sync.Mutex
	state      AgentState
	cfg        Config
	steering   []llm.Message
	followUps  []llm.Message
	steerMode  QueueMode
	followMode QueueMode

	running bool
	cancel  context.CancelFunc
	idle    chan struct{} // closed when the current run ends

	listeners atomic.Pointer[[]*listenerEntry]
	lmu       sync.Mutex // serialises Subscribe/unsubscribe

	getSteering func() []llm.Message
	getFollowUp func() []llm.Message
}

type listenerEntry struct{ fn Listener }

// NewAgent returns an idle agent with the given initial state.
func NewAgent(opts AgentOptions) *Agent {
	a := &Agent{cfg: opts.Config, steerMode: opts.SteeringMode, followMode: opts.FollowUpMode}
	a.state = AgentState{
		SystemPrompt: opts.SystemPrompt, Model: opts.Model, ThinkingLevel: opts.ThinkingLevel,
		Tools: opts.Tools, Messages: append([]llm.Message(nil), opts.Messages...),
	}
	if a.steerMode == "" {
		a.steerMode = OneAtATime
	}
	if a.followMode == "" {
		a.followMode = OneAtATime
	}
	a.getSteering = func() []llm.Message {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.dequeueLocked(&a.steering, a.steerMode)
	}
	a.getFollowUp = func() []llm.Message {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.dequeueLocked(&a.followUps, a.followMode)
	}
	empty := []*listenerEntry{}
	a.listeners.Store(&empty)
	return a
}

// State returns a snapshot of the agent's state.
func (a *Agent) State() AgentState {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.state
	n := len(s.Messages)
	s.Messages = s.Messages[:n:n]
	s.PendingToolCalls = append([]string(nil), s.PendingToolCalls...)
	return s
}

// SetSystemPrompt, SetModel, SetThinkingLevel, SetTools, ReplaceMessages and AppendMessage change
// the state used by the next run; a run in progress keeps what it started with.

func (a *Agent) SetSystemPrompt(s string) { a.mu.Lock(); a.state.SystemPrompt = s; a.mu.Unlock() }

func (a *Agent) SetModel(m *llm.Model) { a.mu.Lock(); a.state.Model = m; a.mu.Unlock() }

func (a *Agent) SetThinkingLevel(l llm.ThinkingLevel) {
	a.mu.Lock()
	a.state.ThinkingLevel = l
	a.mu.Unlock()
}

func (a *Agent) SetTools(t []AgentTool) { a.mu.Lock(); a.state.Tools = t; a.mu.Unlock() }

func (a *Agent) ReplaceMessages(msgs []llm.Message) {
	a.mu.Lock()
	a.state.Messages = append([]llm.Message(nil), msgs...)
	a.mu.Unlock()
}

func (a *Agent) AppendMessage(m llm.Message) {
	a.mu.Lock()
	a.state.Messages = append(a.state.Messages, m)
	a.mu.Unlock()
}

// SetSteeringMode and SetFollowUpMode change how many queued messages one poll delivers.
func (a *Agent) SetSteeringMode(m QueueMode) { a.mu.Lock(); a.steerMode = m; a.mu.Unlock() }

func (a *Agent) SetFollowUpMode(m QueueMode) { a.mu.Lock(); a.followMode = m; a.mu.Unlock() }

// Subscribe adds a listener and returns the function that removes it.
func (a *Agent) Subscribe(fn Listener) (unsubscribe func()) {
	e := &listenerEntry{fn: fn}
	a.lmu.Lock()
	old := *a.listeners.Load()
	next := make([]*listenerEntry, len(old), len(old)+1)
	copy(next, old)
	next = append(next, e)
	a.listeners.Store(&next)
	a.lmu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			a.lmu.Lock()
			defer a.lmu.Unlock()
			old := *a.listeners.Load()
			next := make([]*listenerEntry, 0, len(old))
			for _, x := range old {
				if x != e {
					next = append(next, x)
				}
			}
			a.listeners.Store(&next)
		})
	}
}

// Steer queues a message to inject before the next LLM call of the current run (after the
// running tool batch; in sequential mode the remaining calls are skipped).
func (a *Agent) Steer(m llm.Message) { a.mu.Lock(); a.steering = append(a.steering, m); a.mu.Unlock() }

// FollowUp queues a message to process when the current run would otherwise end.
func (a *Agent) FollowUp(m llm.Message) {
	a.mu.Lock()
	a.followUps = append(a.followUps, m)
	a.mu.Unlock()
}

// ClearSteeringQueue drops queued steering messages.
func (a *Agent) ClearSteeringQueue() { a.mu.Lock(); a.steering = nil; a.mu.Unlock() }

// ClearFollowUpQueue drops queued follow-up messages.
func (a *Agent) ClearFollowUpQueue() { a.mu.Lock(); a.followUps = nil; a.mu.Unlock() }

// HasQueuedMessages reports whether steering or follow-up messages are waiting.
func (a *Agent) HasQueuedMessages() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.steering) > 0 || len(a.followUps) > 0
}

func (a *Agent) dequeueLocked(q *[]llm.Message, mode QueueMode) []llm.Message {
	if len(*q) == 0 {
		return nil
	}
	if mode == All {
		out := *q
		*q = nil
		return out
	}
	out := (*q)[:1:1]
	*q = (*q)[1:]
	return out
}

// Abort cancels the running run: the stream ends with an aborted message, running tools see
// their context done. It does nothing when idle.
func (a *Agent) Abort() {
	a.mu.Lock()
	if a.cancel != nil {
		a.cancel()
	}
	a.mu.Unlock()
}

// WaitForIdle blocks until no run is in progress or ctx is done.
func (a *Agent) WaitForIdle(ctx context.Context) error {
	a.mu.Lock()
	idle := a.idle
	a.mu.Unlock()
	if idle == nil {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Prompt runs a user message with text and optional image blocks and returns when the run has
// ended. It returns ErrAgentBusy while another run is in progress.
func (a *Agent) Prompt(ctx context.Context, text string, images ...llm.Content) error {
	content := make([]llm.Content, 0, 1+len(images))
	content = append(content, llm.Text(text))
	content = append(content, images...)
	return a.PromptMessages(ctx, llm.Message{Role: llm.RoleUser, Content: content, Timestamp: nowMs()})
}

// PromptMessages runs the given messages as prompts (custom kinds allowed) and returns when the
// run has ended. The error is ErrAgentBusy, ErrNoModel, ErrMaxIterations or nil: a failed or
// aborted model call is reported in the state (ErrorMessage) and the messages, not here.
func (a *Agent) PromptMessages(ctx context.Context, msgs ...llm.Message) error {
	return a.start(ctx, msgs, false)
}

// Continue resumes from the current messages. If the last message is an assistant message it
// runs the queued steering messages, else the queued follow-up messages, as prompts; with
// neither queued it returns ErrContinueFromAssistant. With no messages: ErrNoMessages.
func (a *Agent) Continue(ctx context.Context) error {
	return a.start(ctx, nil, true)
}

func (a *Agent) start(ctx context.Context, prompts []llm.Message, cont bool) error {
	a.mu.Lock()
	if a.running {
		a.mu.Unlock()
		return ErrAgentBusy
	}
	if a.state.Model == nil {
		a.mu.Unlock()
		return ErrNoModel
	}
	skipSteering := false
	if cont {
		n := len(a.state.Messages)
		if n == 0 {
			a.mu.Unlock()
			return ErrNoMessages
		}
		if a.state.Messages[n-1].Role == llm.RoleAssistant {
			if q := a.dequeueLocked(&a.steering, a.steerMode); len(q) > 0 {
				prompts, skipSteering = q, true
			} else if q := a.dequeueLocked(&a.followUps, a.followMode); len(q) > 0 {
				prompts = q
			} else {
				a.mu.Unlock()
				return ErrContinueFromAssistant
			}
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	a.running = true
	a.cancel = cancel
	a.idle = make(chan struct{})
	a.state.IsStreaming = true
	a.state.StreamingMessage = nil
	a.state.PendingToolCalls = a.state.PendingToolCalls[:0]
	a.state.ErrorMessage = ""

	cfg := a.cfg
	cfg.Model = a.state.Model
	cfg.StreamOptions.Thinking = a.state.ThinkingLevel
	cfg.GetSteeringMessages = a.getSteering
	cfg.GetFollowUpMessages = a.getFollowUp
	n := len(a.state.Messages)
	ac := &AgentContext{SystemPrompt: a.state.SystemPrompt, Messages: a.state.Messages[:n:n], Tools: a.state.Tools}
	model := a.state.Model
	a.mu.Unlock()

	return a.run(runCtx, cancel, model, func(emit func(Event)) error {
		_, err := start(runCtx, prompts, ac, &cfg, emit, runOptions{skipInitialSteering: skipSteering})
		return err
	})
}

// run executes body with the agent's event handler and restores the idle state afterwards. A
// panic (in a hook or a listener) becomes a failed assistant message and an agent_end event,
// as pi does, rather than escaping to the caller.
func (a *Agent) run(ctx context.Context, cancel context.CancelFunc, model *llm.Model, body func(emit func(Event)) error) (err error) {
	emit := func(ev Event) { a.handle(ctx, ev) }
	defer func() {
		if v := recover(); v != nil {
			reason := llm.StopReasonError
			if ctx.Err() != nil {
				reason = llm.StopReasonAborted
			}
			msg := failedMessage(model, reason, fmt.Errorf("agent run panicked: %v", v))
			a.mu.Lock()
			a.state.Messages = append(a.state.Messages, *msg)
			a.state.ErrorMessage = msg.ErrorMessage
			a.mu.Unlock()
			func() {
				defer func() { _ = recover() }() // a listener that panics again is not called twice
				a.handle(ctx, Event{Type: EventAgentEnd, Messages: []llm.Message{*msg}})
			}()
			err = nil
		}
		cancel()
		a.mu.Lock()
		a.running = false
		a.cancel = nil
		a.state.IsStreaming = false
		a.state.StreamingMessage = nil
		a.state.PendingToolCalls = nil
		close(a.idle)
		a.idle = nil
		a.mu.Unlock()
	}()
	return body(emit)
}

// handle updates the state from an event, then calls the listeners in order.
func (a *Agent) handle(ctx context.Context, ev Event) {
	a.mu.Lock()
	switch ev.Type {
	case EventMessageStart:
		if ev.Message.Role == llm.RoleAssistant {
			c := ev.Message.Clone()
			a.state.StreamingMessage = &c
		} else {
			a.state.StreamingMessage = ev.Message
		}
	case EventMessageUpdate:
		switch ev.Update.Type {
		case llm.EventTextEnd, llm.EventThinkingEnd, llm.EventToolCallEnd:
			c := ev.Message.Clone()
			a.state.StreamingMessage = &c
		}
	case EventMessageEnd:
		a.state.StreamingMessage = nil
		a.state.Messages = append(a.state.Messages, *ev.Message)
	case EventToolExecutionStart:
		a.state.PendingToolCalls = append(a.state.PendingToolCalls, ev.ToolCallID)
	case EventToolExecutionEnd:
		p := a.state.PendingToolCalls
		for i := range p {
			if p[i] == ev.ToolCallID {
				a.state.PendingToolCalls = append(p[:i], p[i+1:]...)
				break
			}
		}
	case EventTurnEnd:
		if ev.Message != nil && ev.Message.ErrorMessage != "" {
			a.state.ErrorMessage = ev.Message.ErrorMessage
		}
	case EventAgentEnd:
		a.state.StreamingMessage = nil
	}
	a.mu.Unlock()
	for _, l := range *a.listeners.Load() {
		l.fn(ctx, ev)
	}
}
