// Package streambuild builds the llm event stream of one assistant message for providers.
package streambuild

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/llm"
)

// Builder accumulates the assistant message of one stream and emits the events of the llm
// contract in order, for the providers that decode their own wire format (anthropic, google,
// ollama, openai-responses); pkg/llm/providertest checks the contract.
type Builder struct {
	model   *llm.Model
	Msg     *llm.Message
	yield   func(llm.Event) bool
	Raw     map[int][]byte           // raw tool-call JSON per content index
	text    map[int]*strings.Builder // text or thinking per content index: appending is amortized O(1)
	open    map[int]bool
	stopped bool // the consumer broke out of the range
}

func New(model *llm.Model, yield func(llm.Event) bool) *Builder {
	return &Builder{model: model, Msg: llm.NewAssistant(model), yield: yield, Raw: map[int][]byte{}, text: map[int]*strings.Builder{}, open: map[int]bool{}}
}

func (b *Builder) Emit(ev llm.Event) bool {
	if b.stopped {
		return false
	}
	ev.Partial = b.Msg
	if !b.yield(ev) {
		b.stopped = true
		return false
	}
	return true
}

func (b *Builder) Start() bool { return b.Emit(llm.Event{Type: llm.EventStart}) }

// openBlock appends c and emits its *_start event.
func (b *Builder) OpenBlock(c llm.Content) (int, bool) {
	if c.Type == llm.ContentToolCall && c.Arguments == nil {
		c.Arguments = map[string]any{}
	}
	b.Msg.Content = append(b.Msg.Content, c)
	i := len(b.Msg.Content) - 1
	b.open[i] = true
	t := llm.EventTextStart
	switch c.Type {
	case llm.ContentThinking:
		t = llm.EventThinkingStart
	case llm.ContentToolCall:
		t = llm.EventToolCallStart
	}
	return i, b.Emit(llm.Event{Type: t, ContentIndex: i})
}

func (b *Builder) Delta(i int, d string) bool {
	if i < 0 || i >= len(b.Msg.Content) || !b.open[i] {
		return !b.stopped
	}
	c := &b.Msg.Content[i]
	switch c.Type {
	case llm.ContentText:
		c.Text = b.appendText(i, c.Text, d)
		return b.Emit(llm.Event{Type: llm.EventTextDelta, ContentIndex: i, Delta: d})
	case llm.ContentThinking:
		c.Thinking = b.appendText(i, c.Thinking, d)
		return b.Emit(llm.Event{Type: llm.EventThinkingDelta, ContentIndex: i, Delta: d})
	case llm.ContentToolCall:
		b.Raw[i] = append(b.Raw[i], d...)
		c.Arguments = llm.ParsePartialJSON(string(b.Raw[i]))
		return b.Emit(llm.Event{Type: llm.EventToolCallDelta, ContentIndex: i, Delta: d})
	}
	return !b.stopped
}

// appendText returns cur+d without copying cur: the block's text lives in a strings.Builder
// whose String() shares its buffer, so a long reply costs O(n), not O(n²). Strings handed out
// earlier stay valid (a Builder never writes over bytes it has returned).
func (b *Builder) appendText(i int, cur, d string) string {
	sb := b.text[i]
	if sb == nil {
		sb = &strings.Builder{}
		sb.WriteString(cur)
		b.text[i] = sb
	}
	sb.WriteString(d)
	return sb.String()
}

// closeBlock emits the *_end event of block i (once).
func (b *Builder) CloseBlock(i int) bool {
	if i < 0 || i >= len(b.Msg.Content) || !b.open[i] {
		return !b.stopped
	}
	delete(b.open, i)
	delete(b.text, i)
	c := &b.Msg.Content[i]
	switch c.Type {
	case llm.ContentThinking:
		return b.Emit(llm.Event{Type: llm.EventThinkingEnd, ContentIndex: i, Content: c.Thinking})
	case llm.ContentToolCall:
		if raw, ok := b.Raw[i]; ok {
			c.Arguments = llm.ParsePartialJSON(string(raw))
			delete(b.Raw, i)
		}
		if c.Arguments == nil {
			c.Arguments = map[string]any{}
		}
		tc := *c
		return b.Emit(llm.Event{Type: llm.EventToolCallEnd, ContentIndex: i, ToolCall: &tc})
	}
	return b.Emit(llm.Event{Type: llm.EventTextEnd, ContentIndex: i, Content: c.Text})
}

func (b *Builder) CloseAll() bool {
	for i := range b.Msg.Content {
		if b.open[i] && !b.CloseBlock(i) {
			return false
		}
	}
	return !b.stopped
}

func (b *Builder) Usage(u llm.Usage) {
	u.TotalTokens = u.Input + u.Output + u.CacheRead + u.CacheWrite
	llm.CalculateCost(b.model, &u)
	*b.Msg.Usage = u
}

// finish closes open blocks and emits done.
func (b *Builder) Finish(reason llm.StopReason) {
	if !b.CloseAll() {
		return
	}
	b.Msg.StopReason = reason
	final := b.Msg.Clone()
	if b.stopped {
		return
	}
	b.yield(llm.Event{Type: llm.EventDone, Reason: reason, Message: &final})
}

// fail emits the terminal error event, aborted when ctx was cancelled. Content and usage
// received so far are kept.
func (b *Builder) Fail(ctx context.Context, err error) {
	if b.stopped {
		return
	}
	reason := llm.StopReasonError
	if ctx.Err() != nil {
		reason = llm.StopReasonAborted
		err = fmt.Errorf("request aborted: %w", context.Cause(ctx))
	}
	b.open = map[int]bool{}
	b.stopped = true
	b.yield(llm.ErrorEvent(b.model, b.Msg, reason, err))
}

// sanitize makes s valid UTF-8: strings that came from JSON with lone surrogates or from
// byte-oriented tools would otherwise make the request body invalid.
func Sanitize(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// redact removes secret from msg, so an error text can never leak the API key.
func Redact(msg, secret string) string {
	if secret == "" {
		return msg
	}
	return strings.ReplaceAll(msg, secret, "[redacted]")
}

// clip keeps error bodies readable.
func Clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
