package openairesponses

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/llm"
)

// builder accumulates the assistant message of one stream and emits the events of the llm
// contract in order. It is deliberately the same small type in every provider package of this
// tree (a shared helper package would couple them); see pkg/llm/providertest for the contract
// it is checked against.
type builder struct {
	model   *llm.Model
	msg     *llm.Message
	yield   func(llm.Event) bool
	raw     map[int][]byte           // raw tool-call JSON per content index
	text    map[int]*strings.Builder // text or thinking per content index: appending is amortized O(1)
	open    map[int]bool
	stopped bool // the consumer broke out of the range
}

func newBuilder(model *llm.Model, yield func(llm.Event) bool) *builder {
	return &builder{model: model, msg: llm.NewAssistant(model), yield: yield, raw: map[int][]byte{}, text: map[int]*strings.Builder{}, open: map[int]bool{}}
}

func (b *builder) emit(ev llm.Event) bool {
	if b.stopped {
		return false
	}
	ev.Partial = b.msg
	if !b.yield(ev) {
		b.stopped = true
		return false
	}
	return true
}

func (b *builder) start() bool { return b.emit(llm.Event{Type: llm.EventStart}) }

// openBlock appends c and emits its *_start event.
func (b *builder) openBlock(c llm.Content) (int, bool) {
	if c.Type == llm.ContentToolCall && c.Arguments == nil {
		c.Arguments = map[string]any{}
	}
	b.msg.Content = append(b.msg.Content, c)
	i := len(b.msg.Content) - 1
	b.open[i] = true
	t := llm.EventTextStart
	switch c.Type {
	case llm.ContentThinking:
		t = llm.EventThinkingStart
	case llm.ContentToolCall:
		t = llm.EventToolCallStart
	}
	return i, b.emit(llm.Event{Type: t, ContentIndex: i})
}

func (b *builder) delta(i int, d string) bool {
	if i < 0 || i >= len(b.msg.Content) || !b.open[i] {
		return !b.stopped
	}
	c := &b.msg.Content[i]
	switch c.Type {
	case llm.ContentText:
		c.Text = b.appendText(i, c.Text, d)
		return b.emit(llm.Event{Type: llm.EventTextDelta, ContentIndex: i, Delta: d})
	case llm.ContentThinking:
		c.Thinking = b.appendText(i, c.Thinking, d)
		return b.emit(llm.Event{Type: llm.EventThinkingDelta, ContentIndex: i, Delta: d})
	case llm.ContentToolCall:
		b.raw[i] = append(b.raw[i], d...)
		c.Arguments = llm.ParsePartialJSON(string(b.raw[i]))
		return b.emit(llm.Event{Type: llm.EventToolCallDelta, ContentIndex: i, Delta: d})
	}
	return !b.stopped
}

// appendText returns cur+d without copying cur: the block's text lives in a strings.Builder
// whose String() shares its buffer, so a long reply costs O(n), not O(n²). Strings handed out
// earlier stay valid (a Builder never writes over bytes it has returned).
func (b *builder) appendText(i int, cur, d string) string {
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
func (b *builder) closeBlock(i int) bool {
	if i < 0 || i >= len(b.msg.Content) || !b.open[i] {
		return !b.stopped
	}
	delete(b.open, i)
	delete(b.text, i)
	c := &b.msg.Content[i]
	switch c.Type {
	case llm.ContentThinking:
		return b.emit(llm.Event{Type: llm.EventThinkingEnd, ContentIndex: i, Content: c.Thinking})
	case llm.ContentToolCall:
		if raw, ok := b.raw[i]; ok {
			c.Arguments = llm.ParsePartialJSON(string(raw))
			delete(b.raw, i)
		}
		if c.Arguments == nil {
			c.Arguments = map[string]any{}
		}
		tc := *c
		return b.emit(llm.Event{Type: llm.EventToolCallEnd, ContentIndex: i, ToolCall: &tc})
	}
	return b.emit(llm.Event{Type: llm.EventTextEnd, ContentIndex: i, Content: c.Text})
}

func (b *builder) closeAll() bool {
	for i := range b.msg.Content {
		if b.open[i] && !b.closeBlock(i) {
			return false
		}
	}
	return !b.stopped
}

func (b *builder) usage(u llm.Usage) {
	u.TotalTokens = u.Input + u.Output + u.CacheRead + u.CacheWrite
	llm.CalculateCost(b.model, &u)
	*b.msg.Usage = u
}

// finish closes open blocks and emits done.
func (b *builder) finish(reason llm.StopReason) {
	if !b.closeAll() {
		return
	}
	b.msg.StopReason = reason
	final := b.msg.Clone()
	if b.stopped {
		return
	}
	b.yield(llm.Event{Type: llm.EventDone, Reason: reason, Message: &final})
}

// fail emits the terminal error event, aborted when ctx was cancelled. Content and usage
// received so far are kept.
func (b *builder) fail(ctx context.Context, err error) {
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
	b.yield(llm.ErrorEvent(b.model, b.msg, reason, err))
}

// sanitize makes s valid UTF-8: strings that came from JSON with lone surrogates or from
// byte-oriented tools would otherwise make the request body invalid.
func sanitize(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// redact removes secret from msg, so an error text can never leak the API key.
func redact(msg, secret string) string {
	if secret == "" {
		return msg
	}
	return strings.ReplaceAll(msg, secret, "[redacted]")
}

// clip keeps error bodies readable.
func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
