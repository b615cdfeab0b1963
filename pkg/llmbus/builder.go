package llmbus

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/agentbus/agentbus/pkg/llm"
)

// builder rebuilds the assistant message from wire events and yields llm events with Partial
// set. It plays the part pkg/llm/providers/internal/streambuild plays for the HTTP providers
// (which this package may not import), but it checks its input instead of producing it: the
// events come from another process, so a block index that does not exist is a protocol error,
// not a bug.
type builder struct {
	model   *llm.Model
	msg     *llm.Message
	yield   func(llm.Event) bool
	text    map[int]*strings.Builder
	args    map[int]*llm.PartialJSON
	open    map[int]bool
	started bool
	stopped bool // the consumer broke out of the range, or the terminal event was yielded
}

func newBuilder(model *llm.Model, yield func(llm.Event) bool) *builder {
	return &builder{model: model, msg: llm.NewAssistant(model), yield: yield,
		text: map[int]*strings.Builder{}, args: map[int]*llm.PartialJSON{}, open: map[int]bool{}}
}

func (b *builder) emit(ev llm.Event) {
	if b.stopped {
		return
	}
	ev.Partial = b.msg
	if !b.yield(ev) {
		b.stopped = true
	}
}

// apply handles one wire event; end is true once the terminal event was yielded.
func (b *builder) apply(ev Event) (end bool, err error) {
	t := llm.EventType(ev.Type)
	switch t {
	case TypeHeartbeat:
		return false, nil
	case llm.EventStart:
		if !b.started {
			b.started = true
			b.emit(llm.Event{Type: llm.EventStart})
		}
		return false, nil
	case llm.EventTextStart, llm.EventThinkingStart, llm.EventToolCallStart,
		llm.EventTextDelta, llm.EventThinkingDelta, llm.EventToolCallDelta,
		llm.EventTextEnd, llm.EventThinkingEnd, llm.EventToolCallEnd:
		if !b.started { // a server that skips start still gives the consumer a whole stream
			b.started = true
			b.emit(llm.Event{Type: llm.EventStart})
		}
		return false, b.block(t, ev)
	case llm.EventDone, llm.EventError:
		return true, b.finish(t, ev)
	}
	return false, nil // a type of a later minor revision: ignored
}

func (b *builder) block(t llm.EventType, ev Event) error {
	i := ev.ContentIndex
	switch t {
	case llm.EventTextStart, llm.EventThinkingStart, llm.EventToolCallStart:
		if i != len(b.msg.Content) {
			return fmt.Errorf("%s at content index %d, want %d (the next block)", t, i, len(b.msg.Content))
		}
		c := llm.Content{Type: llm.ContentText}
		switch t {
		case llm.EventThinkingStart:
			c.Type = llm.ContentThinking
		case llm.EventToolCallStart:
			c = llm.ToolCall(ev.ID, ev.Name, nil)
			b.args[i] = &llm.PartialJSON{}
		}
		b.msg.Content = append(b.msg.Content, c)
		b.open[i] = true
		b.emit(llm.Event{Type: t, ContentIndex: i})
		return nil
	}
	if i < 0 || i >= len(b.msg.Content) || !b.open[i] {
		return fmt.Errorf("%s for content index %d, which is not open", t, i)
	}
	c := &b.msg.Content[i]
	want := map[llm.EventType]string{
		llm.EventTextDelta: llm.ContentText, llm.EventTextEnd: llm.ContentText,
		llm.EventThinkingDelta: llm.ContentThinking, llm.EventThinkingEnd: llm.ContentThinking,
		llm.EventToolCallDelta: llm.ContentToolCall, llm.EventToolCallEnd: llm.ContentToolCall,
	}[t]
	if c.Type != want {
		return fmt.Errorf("%s for content index %d, a %s block", t, i, c.Type)
	}
	switch t {
	case llm.EventTextDelta, llm.EventThinkingDelta:
		sb := b.text[i]
		if sb == nil {
			sb = &strings.Builder{}
			b.text[i] = sb
		}
		sb.WriteString(ev.Delta)
		if t == llm.EventTextDelta {
			c.Text = sb.String()
		} else {
			c.Thinking = sb.String()
		}
		b.emit(llm.Event{Type: t, ContentIndex: i, Delta: ev.Delta})
	case llm.EventToolCallDelta:
		c.Arguments = b.args[i].Append(ev.Delta)
		b.emit(llm.Event{Type: t, ContentIndex: i, Delta: ev.Delta})
	case llm.EventTextEnd, llm.EventThinkingEnd:
		whole := ev.Content
		if whole == "" && b.text[i] != nil {
			whole = b.text[i].String()
		}
		if t == llm.EventTextEnd {
			c.Text = whole
		} else {
			c.Thinking = whole
		}
		b.close(i)
		b.emit(llm.Event{Type: t, ContentIndex: i, Content: whole})
	case llm.EventToolCallEnd:
		if ev.ToolCall != nil {
			*c = *ev.ToolCall
			c.Type = llm.ContentToolCall
		} else {
			c.Arguments = b.args[i].Result()
		}
		if c.Arguments == nil {
			c.Arguments = map[string]any{}
		}
		b.close(i)
		tc := *c
		b.emit(llm.Event{Type: t, ContentIndex: i, ToolCall: &tc})
	}
	return nil
}

func (b *builder) close(i int) {
	delete(b.open, i)
	delete(b.text, i)
	delete(b.args, i)
}

// finish yields the terminal event. The final message is the server's, stamped with this
// client's model (api bus, the provider alias, the model id), so the history names the
// provider the agent called and the next call's handoff treats the message as its own.
func (b *builder) finish(t llm.EventType, ev Event) error {
	m := ev.Message
	if m == nil {
		if t == llm.EventDone {
			return errors.New("done without a message")
		}
		m = &llm.Message{}
		*m = b.msg.Clone()
		m.ErrorMessage = "llmbus: the server reported an error without a message"
	}
	m.Role, m.API, m.Provider, m.Model = llm.RoleAssistant, b.model.API, b.model.Provider, b.model.ID
	if m.Content == nil {
		m.Content = []llm.Content{}
	}
	if m.Usage == nil {
		m.Usage = &llm.Usage{}
	}
	reason := ev.Reason
	if reason == "" {
		reason = m.StopReason
	}
	if t == llm.EventDone {
		if reason == "" {
			reason = llm.StopReasonStop
		}
		if reason == llm.StopReasonError || reason == llm.StopReasonAborted {
			return fmt.Errorf("done with stop reason %q", reason)
		}
		// Blocks the server left open are closed first, so the consumer sees each block end.
		for i := range b.msg.Content {
			if b.open[i] && i < len(m.Content) {
				b.closeFrom(i, m.Content[i])
			}
		}
	} else {
		if reason != llm.StopReasonAborted {
			reason = llm.StopReasonError
		}
		if m.ErrorMessage == "" {
			m.ErrorMessage = "llmbus: the server reported an error without a text"
		}
	}
	m.StopReason = reason
	if b.stopped {
		return nil
	}
	b.stopped = true
	b.yield(llm.Event{Type: t, Reason: reason, Message: m})
	return nil
}

// closeFrom emits the *_end event of open block i with the final block's content.
func (b *builder) closeFrom(i int, final llm.Content) {
	c := &b.msg.Content[i]
	b.close(i)
	switch c.Type {
	case llm.ContentText:
		c.Text = final.Text
		b.emit(llm.Event{Type: llm.EventTextEnd, ContentIndex: i, Content: c.Text})
	case llm.ContentThinking:
		c.Thinking = final.Thinking
		b.emit(llm.Event{Type: llm.EventThinkingEnd, ContentIndex: i, Content: c.Thinking})
	case llm.ContentToolCall:
		*c = final
		if c.Arguments == nil {
			c.Arguments = map[string]any{}
		}
		tc := *c
		b.emit(llm.Event{Type: llm.EventToolCallEnd, ContentIndex: i, ToolCall: &tc})
	}
}

// fail yields the terminal error event for a failure on this side: aborted when ctx was
// cancelled, else error. What was streamed so far is kept.
func (b *builder) fail(ctx context.Context, err error) {
	if b.stopped {
		return
	}
	b.stopped = true
	reason := llm.StopReasonError
	if ctx.Err() != nil {
		reason = llm.StopReasonAborted
		err = fmt.Errorf("request aborted: %w", context.Cause(ctx))
	}
	b.yield(llm.ErrorEvent(b.model, b.msg, reason, err))
}
