package loop

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/llm"
)

// Run starts a run with new prompt messages: they are appended to the context, reported as
// message_start/message_end, and the model is called until it stops asking for tools and no
// steering or follow-up message is queued. See docs/agent-loop.md for the exact event order.
//
// emit (may be nil) receives every event, on the calling goroutine, one at a time; the loop
// waits for it to return before going on. Run returns the messages the run added (prompts
// first), which are the same as the agent_end event's Messages.
//
// Run returns an error only when it could not start (no model: ErrNoModel), or ErrMaxIterations
// together with the messages when Config.MaxIterations stopped it. Provider failures and aborts
// (ctx cancelled) are not errors of Run: they end the run with an assistant message whose
// StopReason is error or aborted.
func Run(ctx context.Context, prompts []llm.Message, agentCtx *AgentContext, cfg *Config, emit func(Event)) ([]llm.Message, error) {
	if cfg == nil || cfg.Model == nil {
		return nil, ErrNoModel
	}
	return start(ctx, prompts, agentCtx, cfg, emit, runOptions{})
}

// Continue resumes a run from the context as it is, without a new message (a retry, or after a
// tool result arrived out of band). The last message must not be an assistant message
// (ErrContinueFromAssistant) and there must be one (ErrNoMessages); it must convert to a user or
// toolResult message for the provider to accept the request.
func Continue(ctx context.Context, agentCtx *AgentContext, cfg *Config, emit func(Event)) ([]llm.Message, error) {
	if cfg == nil || cfg.Model == nil {
		return nil, ErrNoModel
	}
	if agentCtx == nil || len(agentCtx.Messages) == 0 {
		return nil, ErrNoMessages
	}
	if agentCtx.Messages[len(agentCtx.Messages)-1].Role == llm.RoleAssistant {
		return nil, ErrContinueFromAssistant
	}
	return start(ctx, nil, agentCtx, cfg, emit, runOptions{})
}

// start is Run without the argument checks: agent_start, turn_start, the prompts, the loop.
func start(ctx context.Context, prompts []llm.Message, agentCtx *AgentContext, cfg *Config, emit func(Event), o runOptions) ([]llm.Message, error) {
	r := newRun(agentCtx, cfg, emit, len(prompts))
	r.runOptions = o
	r.msgs = append(r.msgs, prompts...)
	r.emit(Event{Type: EventAgentStart})
	r.emit(Event{Type: EventTurnStart})
	for i := range prompts {
		m := &r.msgs[r.base+i]
		r.emit(Event{Type: EventMessageStart, Message: m})
		r.emit(Event{Type: EventMessageEnd, Message: m})
	}
	out, err := r.loop(ctx)
	r.release()
	return out, err
}

// runOptions are the knobs the Agent needs that are not part of the public Config.
type runOptions struct {
	skipInitialSteering bool // Agent.Continue already took the steering messages it runs with
}

// run is the state of one Run. It is allocated once per run and reused across its steps.
type run struct {
	cfg    *Config
	ac     *AgentContext
	sink   func(Event)
	stream StreamFunc
	exec   ToolExecutor

	// msgs is the working context: a copy of agentCtx.Messages followed by the messages of
	// this run, which are msgs[base:]. (A copy, so that the caller's slice is never written.)
	msgs []llm.Message
	base int

	llmCtx llm.Context
	opts   *llm.StreamOptions // cfg.StreamOptions with GetAPIKey's key, made when first needed
	info   *AgentContext      // what hooks see as Context (made for the first hook); Messages refreshed before each use
	steps  int
	calls  []toolCall // reused per step
	runOptions

	yield          func(llm.Event) bool // r.onEvent, made once
	final, started *llm.Message         // of the current step
}

// runs recycles run structs: a run was a fifth of a plain turn's allocation (issue 40). What a
// run hands out lives on after it (the messages it returns, the tool-call states that a late
// onUpdate checks, the Context its hooks were given), so release drops those rather than
// reusing them.
var runs = sync.Pool{New: func() any {
	r := &run{}
	r.yield = r.onEvent
	return r
}}

func newRun(ac *AgentContext, cfg *Config, emit func(Event), extra int) *run {
	if ac == nil {
		ac = &AgentContext{}
	}
	r := runs.Get().(*run)
	r.cfg, r.ac, r.sink, r.stream, r.exec = cfg, ac, emit, cfg.StreamFn, cfg.Executor
	if r.stream == nil {
		r.stream = llm.Stream
	}
	if r.exec == nil {
		r.exec = InProcess
	}
	n := len(ac.Messages)
	r.base = n
	// Room for the prompts and the answer, plus one tool round trip (result, assistant) when
	// there are tools, without regrowth. (Keeping run and msgs small matters: objects over 512
	// bytes cost noticeably more to allocate.)
	room := n + extra + 1
	if len(ac.Tools) > 0 {
		room += 2
	}
	r.msgs = make([]llm.Message, n, room)
	copy(r.msgs, ac.Messages)
	r.llmCtx.SystemPrompt = ac.SystemPrompt
	if len(ac.Tools) > 0 {
		tools := make([]llm.Tool, len(ac.Tools))
		for i := range ac.Tools {
			tools[i] = ac.Tools[i].Tool
		}
		r.llmCtx.Tools = tools
	}
	return r
}

// release returns r to the pool once its run has ended. Everything but the yield function is
// cleared: the messages belong to the caller now, and the tool-call states are not reused so
// that an onUpdate called after its tool returned still finds its call closed.
func (r *run) release() {
	yield := r.yield
	*r = run{}
	r.yield = yield
	runs.Put(r)
}

func (r *run) emit(ev Event) {
	if r.sink != nil {
		r.sink(ev)
	}
}

// loop is pi's runLoop: an inner loop over LLM steps while there are tool calls or steering
// messages, and an outer loop that picks up follow-up messages when the inner one would stop.
func (r *run) loop(ctx context.Context) ([]llm.Message, error) {
	cfg := r.cfg
	var pending []llm.Message
	if !r.skipInitialSteering && cfg.GetSteeringMessages != nil {
		pending = cfg.GetSteeringMessages()
	}
	first := true
	var err error
outer:
	for {
		more := true
		for more || len(pending) > 0 {
			if !first {
				r.emit(Event{Type: EventTurnStart})
			}
			first = false
			r.inject(pending)
			pending = nil

			msg := r.step(ctx)
			r.steps++
			if msg.StopReason == llm.StopReasonError || msg.StopReason == llm.StopReasonAborted {
				r.emit(Event{Type: EventTurnEnd, Message: msg})
				break outer
			}

			more = false
			before := len(r.msgs)
			r.collectCalls(msg)
			if len(r.calls) > 0 {
				more = true
				if msg.StopReason == llm.StopReasonLength {
					r.failTruncated()
				} else {
					pending = r.executeTools(ctx, msg)
				}
			}
			r.emit(Event{Type: EventTurnEnd, Message: msg, ToolResults: r.msgs[before:len(r.msgs):len(r.msgs)]})
			if more && cfg.StopAfterTools != nil && cfg.StopAfterTools(r.msgs[before:len(r.msgs):len(r.msgs)]) {
				more = false // as if the model had stopped; queued steering and follow-ups still count
			}

			if cfg.MaxIterations > 0 && r.steps >= cfg.MaxIterations {
				// Steering messages already taken from the queue are kept in the context
				// so that nothing the user sent is lost; the next run answers them.
				r.inject(pending)
				if more || len(pending) > 0 {
					err = ErrMaxIterations
				}
				break outer
			}
			if pending == nil && cfg.GetSteeringMessages != nil {
				pending = cfg.GetSteeringMessages()
			}
		}
		if cfg.GetFollowUpMessages != nil {
			if f := cfg.GetFollowUpMessages(); len(f) > 0 {
				pending = f
				continue
			}
		}
		break
	}
	out := r.msgs[r.base:len(r.msgs):len(r.msgs)]
	r.emit(Event{Type: EventAgentEnd, Messages: out})
	return out, err
}

// inject appends queued (steering or follow-up) messages before the next LLM call.
func (r *run) inject(msgs []llm.Message) {
	for i := range msgs {
		r.msgs = append(r.msgs, msgs[i])
		m := &r.msgs[len(r.msgs)-1]
		r.emit(Event{Type: EventMessageStart, Message: m})
		r.emit(Event{Type: EventMessageEnd, Message: m})
	}
}

// step makes one LLM call and returns the final assistant message, already appended to r.msgs.
func (r *run) step(ctx context.Context) *llm.Message {
	cfg := r.cfg
	if err := ctx.Err(); err != nil {
		// Do not call the provider with a dead context; report the abort as the model's answer.
		return r.finishStep(nil, failedMessage(cfg.Model, llm.StopReasonAborted, err))
	}
	msgs := r.msgs
	if cfg.TransformContext != nil {
		t, err := cfg.TransformContext(ctx, msgs[:len(msgs):len(msgs)])
		if err != nil {
			reason := llm.StopReasonError
			if ctx.Err() != nil {
				reason = llm.StopReasonAborted
			}
			return r.finishStep(nil, failedMessage(cfg.Model, reason, errors.New("transform context: "+err.Error())))
		}
		msgs = t
	}
	if cfg.ConvertToLLM != nil {
		msgs = cfg.ConvertToLLM(msgs)
	} else {
		msgs = defaultConvert(msgs)
	}
	r.llmCtx.Messages = msgs
	// The provider gets cfg's options themselves (it only reads them, as llm.Provider says)
	// unless GetAPIKey replaces the key: a copy per run would be 160 bytes of every turn.
	opts := &cfg.StreamOptions
	if cfg.GetAPIKey != nil {
		if k := cfg.GetAPIKey(cfg.Model.Provider); k != "" {
			if r.opts == nil {
				r.opts = new(llm.StreamOptions)
			}
			*r.opts = cfg.StreamOptions
			r.opts.APIKey = k
			opts = r.opts
		}
	}

	// The yield function is made once per run (r.yield): a closure per step would allocate,
	// and so would the variables a range-over-func body captures.
	r.final, r.started = nil, nil
	r.stream(ctx, cfg.Model, &r.llmCtx, opts)(r.yield)
	final, started := r.final, r.started
	r.final, r.started = nil, nil
	if final == nil {
		// Only a custom StreamFn can get here: llm.Stream always ends with done or error.
		reason, err := llm.StopReasonError, errors.New("stream ended without a done or error event")
		if ctx.Err() != nil {
			reason, err = llm.StopReasonAborted, ctx.Err()
		}
		final = llm.ErrorEvent(cfg.Model, started, reason, err).Message
	}
	return r.finishStep(started, final)
}

// onEvent is the yield function of every LLM stream of the run.
func (r *run) onEvent(ev llm.Event) bool {
	if r.final != nil {
		return false // a stream that ignores a stop request
	}
	switch ev.Type {
	case llm.EventDone, llm.EventError:
		r.final = ev.Message
		return false
	case llm.EventStart:
		if r.started == nil && ev.Partial != nil {
			r.started = ev.Partial
			r.emit(Event{Type: EventMessageStart, Message: ev.Partial})
		}
	default:
		if ev.Partial == nil {
			return true
		}
		if r.started == nil {
			r.started = ev.Partial
			r.emit(Event{Type: EventMessageStart, Message: ev.Partial})
		}
		r.emit(Event{Type: EventMessageUpdate, Message: ev.Partial, Update: ev})
	}
	return true
}

func (r *run) finishStep(started, final *llm.Message) *llm.Message {
	if started == nil {
		r.emit(Event{Type: EventMessageStart, Message: final})
	}
	r.msgs = append(r.msgs, *final)
	r.emit(Event{Type: EventMessageEnd, Message: final})
	return final
}

func failedMessage(model *llm.Model, reason llm.StopReason, err error) *llm.Message {
	return llm.ErrorEvent(model, nil, reason, err).Message
}

// defaultConvert keeps the roles a model understands. It returns msgs itself when nothing is
// dropped, which is the common case.
func defaultConvert(msgs []llm.Message) []llm.Message {
	for i := range msgs {
		if !msgs[i].IsLLM() {
			out := make([]llm.Message, i, len(msgs)-1)
			copy(out, msgs[:i])
			for j := i + 1; j < len(msgs); j++ {
				if msgs[j].IsLLM() {
					out = append(out, msgs[j])
				}
			}
			return out
		}
	}
	return msgs
}

// DefaultConvertToLLM is the default Config.ConvertToLLM: it keeps user, assistant and
// toolResult messages and drops custom kinds.
func DefaultConvertToLLM(msgs []llm.Message) []llm.Message { return defaultConvert(msgs) }

func nowMs() int64 { return time.Now().UnixMilli() }
