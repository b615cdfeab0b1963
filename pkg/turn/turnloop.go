package turn

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/loop"
	"github.com/agentbus/agentbus/pkg/store"
	"github.com/agentbus/agentbus/pkg/tracing"
)

// runLoopWithin is runLoop under ai.agent.timeout: the model steps and tool calls of one turn
// get that long (seed: "单次 Agent 回合超时"); the flush, commit and reply that follow run on
// ctx, so a turn that ran out of time still commits what it has and says why it stopped.
func (t *turnRun) runLoopWithin(ctx context.Context, persisted []llm.Message) (*llm.Message, []llm.Message, error) {
	limit := t.a.w.opts.TurnTimeout
	if limit <= 0 {
		return t.runLoop(ctx, persisted)
	}
	lctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	final, msgs, err := t.runLoop(lctx, persisted)
	if errors.Is(lctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		t.mu.Lock()
		if t.reason == "" {
			t.reason = fmt.Sprintf("stopped: the turn ran longer than ai.agent.timeout (%s)", limit)
		}
		t.timedOut = true
		t.mu.Unlock()
		if err != nil && errors.Is(err, context.DeadlineExceeded) {
			err = nil // an aborted final message carries the outcome; the turn commits what it has
		}
	}
	return final, msgs, err
}

// runLoop runs the loop from the input, or continues from what a previous owner persisted.
// It returns the final assistant message and every message of the turn (input included).
func (t *turnRun) runLoop(ctx context.Context, persisted []llm.Message) (*llm.Message, []llm.Message, error) {
	w := t.a.w
	var loaded store.Loaded
	err := store.RetryTransient(ctx, func() error {
		var err error
		loaded, err = t.a.cx.loadContext(ctx, t.sid)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	t.mu.Lock()
	if t.started != nil {
		// The context the turn starts from: its commit comes after it (readTurn looks there).
		t.started.ContextSeq = loaded.LastSeq
	}
	t.mu.Unlock()
	// The model's harness: ai.agent, the built-in size defaults, then ai.agent.modelHarness.
	harness := w.harness(t.model.Provider, t.model.ID)
	t.phase("turn.start", "resumed", len(persisted) > 0)
	tools, agentTools, skillText := w.selectToolsWith(harness, t.msg, t.input, loaded.Messages)
	t.phase("tools.collected", "tools", len(agentTools))
	if pre := t.preExecute(ctx); pre != "" {
		skillText += "\n## Pre-executed tool results\n" + pre
	}
	skillText += toneSection(!w.opts.NoToneHints, t.input) // ai.agent.toneAwareness (tone.go)
	system := w.systemPrompt(ctx, t.msg, t.model, tools, skillText)
	if t.persona != "" {
		system = withPersona(system, t.persona)
	}
	if system, err = t.bootstrapHook(ctx, system); err != nil { // hooks.go
		return nil, nil, err
	}
	loaded = t.autoCompact(ctx, loaded, system) // L2 when the context nears the window (compact.go)
	ac := &loop.AgentContext{SystemPrompt: system, Messages: contextMessages(loaded), Tools: agentTools}
	cfg := &loop.Config{
		Model:         t.model,
		StreamFn:      w.opts.StreamFn,
		GetAPIKey:     w.opts.Models.APIKey,
		ToolExecution: loop.ToolExecutionMode(harness.ToolExecution),
		Executor:      t.tracedExecutor(),
		MaxIterations: w.maxIterations(t.model, tools),
		GetSteeringMessages: func() []llm.Message {
			return t.drain(&t.steerQ, w.opts.SteeringMode)
		},
		GetFollowUpMessages: func() []llm.Message {
			return t.drain(&t.followQ, w.opts.FollowUpMode)
		},
		AfterToolCall:  scrubToolError(w.opts.Workspace),
		StopAfterTools: stopOnAsk, // ask_user: the question goes to the chat, the answer is the next message
	}
	if cs := w.compactionSettings(t.model); cs.Enabled {
		cfg.TransformContext = t.microCompact(cs) // L1
	}
	cfg.TransformContext = t.transformHook(cfg.TransformContext) // ai.hooks after L1 (hooks.go)
	if lvl, err := llm.ParseThinkingLevel(harness.Thinking); err == nil {
		cfg.StreamOptions.Thinking = lvl
	}
	cfg.StreamOptions.SessionID = t.sidStr
	cfg.StreamOptions.Secrets = w.opts.Secrets
	cfg.StreamFn = t.rateLimited(cfg.StreamFn) // ai.agent.rateLimit (ratelimit.go)
	emit, stopLive := t.emitter()
	defer stopLive()
	emit = t.phaseEmitter(emit)
	t.phase("path.agent_loop", "model", t.model.Provider+"/"+t.model.ID, "maxIterations", cfg.MaxIterations, "toolExecution", harness.ToolExecution)
	out, err := t.runCompacting(ctx, ac, cfg, emit, func() ([]llm.Message, error) {
		if len(persisted) == 0 {
			return loop.Run(ctx, t.input, ac, cfg, emit)
		}
		return t.resumeLoop(ctx, ac, cfg, persisted, emit)
	})
	final := lastAssistant(out)
	if t.a.w.phaseTracing() {
		outcome := "answered"
		switch {
		case err != nil:
			outcome = "error: " + err.Error()
		case final == nil:
			outcome = "no answer"
		case final.StopReason != "":
			outcome = string(final.StopReason)
		}
		t.phase("turn.end", "outcome", outcome, "messages", len(out))
	}
	return final, out, err
}

// tracedExecutor is the turn's tool executor, with an execute_tool span per call when
// tracing is on (off, not even the wrapper is allocated).
func (t *turnRun) tracedExecutor() loop.ToolExecutor {
	if tracing.Enabled(t.a.w.opts.Tracer) {
		return tracing.WrapExecutor(t.executor())
	}
	return t.executor()
}

// preExecute runs the permitted preExecutable tools in parallel before the loop (seed:
// pre-exec results go into the prompt of the same agentLoop) within ai.agent.preExecTimeout.
// Their bus call ids are turn-scoped, so a resumed turn reads the same results back.
func (t *turnRun) preExecute(ctx context.Context) string {
	pre := t.a.w.tools.View(t.msg).Pre
	if len(pre) == 0 {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, t.a.w.opts.PreExecTimeout)
	defer cancel()
	out := make([]string, len(pre))
	var wg sync.WaitGroup
	for i, e := range pre {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := t.executor()
			if t.restarted {
				x.Fresh, x.Resumed = false, true // an earlier attempt may have run it
			}
			res, err := x.Execute(ctx, loop.ToolCallRequest{ID: "pre-" + e.Name, Name: e.Name, Args: map[string]any{}})
			switch {
			case err != nil:
				out[i] = "- " + e.Name + ": (unavailable: " + err.Error() + ")"
			case res.IsError:
				out[i] = "- " + e.Name + ": (error) " + llm.TextContentOf(res.Content)
			default:
				out[i] = "- " + e.Name + ": " + llm.TextContentOf(res.Content)
			}
		}()
	}
	wg.Wait()
	return strings.Join(out, "\n")
}

// resumeLoop continues a turn from its persisted messages: tool calls without a result are
// requested again under their original ids (tool workers answer each id once), and no LLM
// step whose message was persisted is repeated.
func (t *turnRun) resumeLoop(ctx context.Context, ac *loop.AgentContext, cfg *loop.Config, persisted []llm.Message, emit func(loop.Event)) ([]llm.Message, error) {
	msgs := append([]llm.Message(nil), persisted...)
	for i := range msgs {
		if msgs[i].Role == llm.RoleAssistant {
			t.noteCalls(&msgs[i])
		}
	}
	last := msgs[len(msgs)-1]
	if last.Role == llm.RoleAssistant {
		calls := last.ToolCalls()
		if len(calls) == 0 || last.StopReason == llm.StopReasonError || last.StopReason == llm.StopReasonAborted {
			return msgs, nil // the final message was persisted: nothing left to run
		}
	}
	// Complete missing tool results of the last assistant message.
	if ai := lastAssistantIndex(msgs); ai >= 0 && len(msgs[ai].ToolCalls()) > 0 {
		have := map[string]bool{}
		for _, m := range msgs[ai+1:] {
			if m.Role == llm.RoleToolResult {
				have[m.ToolCallID] = true
			}
		}
		for _, c := range msgs[ai].ToolCalls() {
			if have[c.ID] {
				continue
			}
			res, err := t.executor().Execute(ctx, loop.ToolCallRequest{ID: c.ID, Name: c.Name, Args: c.Arguments, OnUpdate: func(loop.ToolResult) {}})
			if err != nil {
				res = loop.ErrorResult(err.Error())
			}
			m := llm.Message{Role: llm.RoleToolResult, Content: res.Content, Details: res.Details, IsError: res.IsError,
				ToolCallID: c.ID, ToolName: c.Name, Timestamp: time.Now().UnixMilli()}
			emit(loop.Event{Type: loop.EventMessageEnd, Message: &m})
			msgs = append(msgs, m)
		}
	}
	if stopOnAsk(msgs) {
		return msgs, nil // the turn had asked the user: the answer is the next message
	}
	ac.Messages = append(ac.Messages, msgs...)
	more, err := loop.Continue(ctx, ac, cfg, emit)
	return append(msgs, more...), err
}

// noteCalls gives the tool calls of assistant message m their bus ids: the turn id plus the
// model's id, and "~n" for the n-th use of an id within the turn. Models and small local
// servers reuse ids like "call_0" from one step to the next, and TOOL_CALLS deduplicates on
// the bus id, so a second call_0 would otherwise get the first one's result. Replaying the
// turn's assistant messages in order (resume) gives the same ids again.
func (t *turnRun) noteCalls(m *llm.Message) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.callSeen == nil {
		t.callSeen, t.busIDs = map[string]int{}, map[string]string{}
	}
	clear(t.busIDs)
	for _, c := range m.ToolCalls() {
		t.callSeen[c.ID]++
		id := t.id + "-" + c.ID
		if n := t.callSeen[c.ID]; n > 1 {
			id += "~" + strconv.Itoa(n)
		}
		t.busIDs[c.ID] = id
	}
}

// busID is the bus id of the latest assistant message's call id.
func (t *turnRun) busID(callID string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if id, ok := t.busIDs[callID]; ok {
		return id
	}
	return t.id + "-" + callID
}

func lastAssistantIndex(ms []llm.Message) int {
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].Role == llm.RoleAssistant {
			return i
		}
	}
	return -1
}

func lastAssistant(ms []llm.Message) *llm.Message {
	if i := lastAssistantIndex(ms); i >= 0 {
		return &ms[i]
	}
	return nil
}

func stopOf(m *llm.Message) llm.StopReason {
	if m == nil {
		return ""
	}
	return m.StopReason
}

// emitter persists every finished message and streams text deltas live.
// The returned stop publishes buffered deltas and must be called when the loop is done.
func (t *turnRun) emitter() (emit func(loop.Event), stop func()) {
	subject := events.AgentLiveSubject(t.a.sk)
	live := &liveBuffer{publish: func(d events.LiveDelta) {
		ev := events.New(d, events.WithTurn(t.id), events.WithSession(t.sidStr))
		if m, err := events.NewMsg(subject, ev); err == nil {
			_ = t.a.w.nc.PublishMsg(m)
		}
	}}
	return func(ev loop.Event) {
		switch ev.Type {
		case loop.EventMessageEnd:
			live.flush()
			idx := t.index
			t.index++
			if idx < len(t.input) {
				break // the prompts are in turn_started already
			}
			if t.a.ctx.Err() != nil {
				// The actor is going away (lease lost, worker stopping): what the loop produces
				// now is an artefact of that cancellation, not of the turn. The next owner
				// resumes from what was recorded before.
				break
			}
			me := events.MessageEnd{Index: idx, Message: *ev.Message}
			if me.Message.Role != llm.RoleAssistant || len(me.Message.ToolCalls()) == 0 {
				// A tool result's durable copy is in TOOL_RESULTS, and a final answer is
				// committed right away: both ride on the next record (the closing commit or a
				// turn_committed, usually) instead of costing an append each.
				t.mu.Lock()
				t.tail = append(t.tail, me)
				t.mu.Unlock()
				break
			}
			// An LLM step that asked for tools must be stored before any of its calls runs
			// (the executor flushes), so resume never asks the model again: on its tool call
			// requests (carryStep), or in AGENT_EVENTS.
			t.noteCalls(&me.Message)
			if mes := append(t.takeTail(), me); !t.carryStep(me.Message.ToolCalls(), mes) {
				t.recordMessages(append(t.takeTail(), mes...)...)
			}
		case loop.EventMessageUpdate:
			if ev.Update.Type == llm.EventTextDelta {
				live.add(string(ev.Update.Type), t.index, ev.Update.ContentIndex, ev.Update.Delta)
			}
		}
	}, live.flush
}
