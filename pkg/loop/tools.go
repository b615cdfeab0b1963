package loop

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/agentbus/agentbus/pkg/llm"
)

// Texts of the toolResults the loop makes itself. They go back to the model, so they say what
// happened and what to do about it.
const (
	msgAborted   = "Operation aborted"
	msgBlocked   = "Tool execution was blocked"
	msgSkipped   = "Skipped due to queued user message."
	msgTruncated = "was not executed: the response hit the output token limit (stopReason length), so its arguments may be truncated. Re-issue the tool call with complete arguments."
)

// toolCall is the state of one call of the current assistant message.
type toolCall struct {
	call *llm.Content
	tool *AgentTool
	args map[string]any
	res  ToolResult
	err  bool
	done bool // has a result without execution (unknown tool, invalid args, blocked, ...)

	// updates: guarded so that a tool calling onUpdate from its own goroutines, or after it
	// returned, cannot emit concurrently with the loop.
	mu     sync.Mutex
	closed bool
}

func (r *run) collectCalls(msg *llm.Message) {
	r.calls = r.calls[:0]
	for i := range msg.Content {
		if msg.Content[i].Type == llm.ContentToolCall {
			r.calls = append(r.calls, toolCall{call: &msg.Content[i]})
		}
	}
}

func (r *run) findTool(name string) *AgentTool {
	for i := range r.ac.Tools {
		if r.ac.Tools[i].Name == name {
			return &r.ac.Tools[i]
		}
	}
	return nil
}

func (tc *toolCall) fail(text string) {
	tc.res = ToolResult{Content: []llm.Content{llm.Text(text)}}
	tc.err = true
	tc.done = true
}

// failTruncated fails every call of a message cut off by the token limit: their arguments were
// salvaged from partial JSON and may be silently incomplete, so none is safe to run.
func (r *run) failTruncated() {
	for i := range r.calls {
		tc := &r.calls[i]
		r.emitStart(tc)
		tc.fail(`Tool call "` + tc.call.Name + `" ` + msgTruncated)
		r.emitEnd(tc)
		r.appendResult(tc, true)
	}
}

// executeTools runs the calls of msg and appends their toolResult messages. It returns steering
// messages taken while running sequentially (nil otherwise).
func (r *run) executeTools(ctx context.Context, msg *llm.Message) []llm.Message {
	sequential := r.cfg.ToolExecution == Sequential
	if !sequential {
		for i := range r.calls {
			if t := r.findTool(r.calls[i].call.Name); t != nil && t.Sequential {
				sequential = true
				break
			}
		}
	}
	if r.cfg.BeforeToolCall != nil || r.cfg.AfterToolCall != nil {
		if r.info == nil {
			r.info = &AgentContext{SystemPrompt: r.ac.SystemPrompt, Tools: r.ac.Tools}
		}
		r.info.Messages = r.msgs[:len(r.msgs):len(r.msgs)]
	}
	if sequential {
		return r.executeSequential(ctx, msg)
	}
	r.executeParallel(ctx, msg)
	return nil
}

func (r *run) executeSequential(ctx context.Context, msg *llm.Message) []llm.Message {
	for i := range r.calls {
		tc := &r.calls[i]
		r.emitStart(tc)
		if ctx.Err() != nil {
			tc.fail(msgAborted)
		} else {
			r.prepare(ctx, msg, tc)
		}
		if !tc.done {
			r.runCall(ctx, msg, tc, r.directUpdate(tc))
		}
		r.emitEnd(tc)
		r.appendResult(tc, true)

		if ctx.Err() == nil && r.cfg.GetSteeringMessages != nil {
			if steering := r.cfg.GetSteeringMessages(); len(steering) > 0 {
				for j := i + 1; j < len(r.calls); j++ {
					s := &r.calls[j]
					r.emitStart(s)
					s.fail(msgSkipped)
					r.emitEnd(s)
					r.appendResult(s, true)
				}
				return steering
			}
		}
	}
	return nil
}

// executeParallel prepares the calls in order (validation and BeforeToolCall run one at a
// time), runs the prepared ones concurrently, reports tool_execution_end as each finishes and
// then the toolResult messages in the order of the calls. A single runnable call runs on the
// loop's goroutine: no goroutine, no channel.
func (r *run) executeParallel(ctx context.Context, msg *llm.Message) {
	runnable := 0
	last := -1
	for i := range r.calls {
		tc := &r.calls[i]
		r.emitStart(tc)
		if ctx.Err() != nil {
			tc.fail(msgAborted)
		} else {
			r.prepare(ctx, msg, tc)
		}
		if tc.done {
			r.emitEnd(tc)
			continue
		}
		runnable++
		last = i
	}

	switch {
	case runnable == 1:
		tc := &r.calls[last]
		r.runCall(ctx, msg, tc, r.directUpdate(tc))
		r.emitEnd(tc)
	case runnable > 1:
		r.runConcurrently(ctx, msg, runnable)
	}
	for i := range r.calls {
		r.appendResult(&r.calls[i], false)
	}
	r.emitResults(len(r.msgs) - len(r.calls))
}

// toolNote is sent from a tool goroutine to the loop goroutine, which does all the emitting.
type toolNote struct {
	tc      *toolCall
	partial ToolResult
	final   bool
}

func (r *run) runConcurrently(ctx context.Context, msg *llm.Message, runnable int) {
	notes := make(chan toolNote, runnable)
	finished := make(chan struct{})
	defer close(finished)
	for i := range r.calls {
		tc := &r.calls[i]
		if tc.done {
			continue
		}
		onUpdate := func(p ToolResult) {
			tc.mu.Lock()
			closed := tc.closed
			tc.mu.Unlock()
			if closed {
				return
			}
			select {
			case notes <- toolNote{tc: tc, partial: p}:
			case <-finished:
			}
		}
		go func() {
			r.runCall(ctx, msg, tc, onUpdate)
			notes <- toolNote{tc: tc, final: true}
		}()
	}
	for runnable > 0 {
		n := <-notes
		if n.final {
			r.emitEnd(n.tc)
			runnable--
			continue
		}
		r.emit(Event{Type: EventToolExecutionUpdate, ToolCallID: n.tc.call.ID, ToolName: n.tc.call.Name, Args: n.tc.call.Arguments, Result: n.partial})
	}
}

// directUpdate returns an onUpdate that emits on the caller's goroutine, serialised, and drops
// calls made after the tool returned.
func (r *run) directUpdate(tc *toolCall) func(ToolResult) {
	return func(p ToolResult) {
		tc.mu.Lock()
		defer tc.mu.Unlock()
		if tc.closed {
			return
		}
		r.emit(Event{Type: EventToolExecutionUpdate, ToolCallID: tc.call.ID, ToolName: tc.call.Name, Args: tc.call.Arguments, Result: p})
	}
}

// prepare finds the tool, validates the arguments and runs BeforeToolCall. A failure sets a
// final result (tc.done).
func (r *run) prepare(ctx context.Context, msg *llm.Message, tc *toolCall) {
	defer func() {
		if v := recover(); v != nil {
			tc.fail(fmt.Sprintf("Tool %s: preparing the call panicked: %v", tc.call.Name, v))
		}
	}()
	tc.tool = r.findTool(tc.call.Name)
	if tc.tool == nil {
		tc.fail("Tool " + tc.call.Name + " not found")
		return
	}
	args, err := llm.ValidateArguments(&tc.tool.Tool, tc.call.Arguments)
	if err != nil {
		tc.fail(err.Error())
		return
	}
	tc.args = args
	if r.cfg.BeforeToolCall != nil {
		block, err := r.cfg.BeforeToolCall(ctx, BeforeToolCallInfo{AssistantMessage: msg, ToolCall: tc.call, Args: args, Context: r.info})
		switch {
		case ctx.Err() != nil:
			tc.fail(msgAborted)
		case err != nil:
			tc.fail(err.Error())
		case block != nil:
			reason := block.Reason
			if reason == "" {
				reason = msgBlocked
			}
			tc.fail(reason)
		}
	}
}

// runCall executes a prepared call and applies AfterToolCall. It never panics.
func (r *run) runCall(ctx context.Context, msg *llm.Message, tc *toolCall, onUpdate func(ToolResult)) {
	defer func() {
		tc.mu.Lock()
		tc.closed = true
		tc.mu.Unlock()
		if v := recover(); v != nil {
			tc.res = ToolResult{Content: []llm.Content{llm.Text(fmt.Sprintf("Tool %s panicked: %v", tc.call.Name, v))}}
			tc.err = true
		}
	}()
	res, err := r.exec.Execute(ctx, ToolCallRequest{ID: tc.call.ID, Name: tc.call.Name, Args: tc.args, Tool: tc.tool, OnUpdate: onUpdate})
	if err != nil {
		text := err.Error()
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			text = msgAborted
		}
		res = ToolResult{Content: []llm.Content{llm.Text(text)}}
		tc.err = true
	} else {
		tc.err = res.IsError
	}
	tc.res = res
	if r.cfg.AfterToolCall != nil {
		o := r.cfg.AfterToolCall(ctx, AfterToolCallInfo{AssistantMessage: msg, ToolCall: tc.call, Args: tc.args, Result: res, IsError: tc.err, Context: r.info})
		if o != nil {
			if o.Content != nil {
				tc.res.Content = o.Content
			}
			if o.Details != nil {
				tc.res.Details = o.Details
			}
			if o.IsError != nil {
				tc.err = *o.IsError
			}
		}
	}
	tc.res.IsError = tc.err
}

func (r *run) emitStart(tc *toolCall) {
	r.emit(Event{Type: EventToolExecutionStart, ToolCallID: tc.call.ID, ToolName: tc.call.Name, Args: tc.call.Arguments})
}

func (r *run) emitEnd(tc *toolCall) {
	tc.res.IsError = tc.err
	r.emit(Event{Type: EventToolExecutionEnd, ToolCallID: tc.call.ID, ToolName: tc.call.Name, Result: tc.res, IsError: tc.err})
}

// appendResult appends the toolResult message of tc; with emit it also reports it.
func (r *run) appendResult(tc *toolCall, emit bool) {
	content := tc.res.Content
	if content == nil {
		content = []llm.Content{}
	}
	r.msgs = append(r.msgs, llm.Message{
		Role: llm.RoleToolResult, Content: content, Timestamp: nowMs(),
		ToolCallID: tc.call.ID, ToolName: tc.call.Name, IsError: tc.err, Details: tc.res.Details,
	})
	if emit {
		r.emitResults(len(r.msgs) - 1)
	}
}

// emitResults reports r.msgs[from:] as message_start/message_end pairs.
func (r *run) emitResults(from int) {
	for i := from; i < len(r.msgs); i++ {
		m := &r.msgs[i]
		r.emit(Event{Type: EventMessageStart, Message: m})
		r.emit(Event{Type: EventMessageEnd, Message: m})
	}
}
