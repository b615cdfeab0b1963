// Package faux is a deterministic, scripted LLM provider registered under API "faux". Tests use
// it to drive the agent loop without a network; `agentbus up` uses its Demo responder as the
// clearly announced built-in demo model when no real provider is configured.
//
// A Provider answers each Stream call with the next queued Response (the script) or, when the
// script is empty, with its Responder's reply to the context. With neither, the stream ends in an
// error event ("script exhausted").
//
// Events follow pi's order exactly: start; then for each content block in order
// <kind>_start, <kind>_delta..., <kind>_end; then one done (reason stop, length or toolUse) or one
// error (reason error or aborted). Text and thinking are streamed in deltas of DeltaSize runes;
// tool-call arguments are marshaled to JSON and streamed in chunks of ToolDeltaSize runes, and
// after every chunk the partial block's Arguments are re-parsed (llm.ParsePartialJSONInto, into
// the block's one map, which is updated in place like the rest of the partial message), as a
// real provider does. Usage is estimated at one token per four bytes (context in, content out)
// and priced with llm.CalculateCost.
//
// With zero latency the stream runs inline in the caller's range loop: no goroutines, channels
// or timers, and no allocation per text delta (the partial message's text is a growing substring
// of the scripted text). Cancellation of ctx is checked before every event and ends the stream
// with an error event, StopReason aborted, content and usage so far kept.
//
// A Provider is safe for concurrent use: several streams (several agent loops, several workers
// sharing one provider) may pop from one script.
package faux

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/llm"
)

// ErrScriptExhausted is reported (inside the stream) when the script is empty and there is no
// responder.
var ErrScriptExhausted = errors.New("faux: script exhausted and no responder")

// Response is one scripted assistant reply.
//
// Content blocks are emitted in this order: Thinking, Text, ToolCalls — or, when Content is set,
// exactly the blocks of Content in their order (Thinking/Text/ToolCalls are then ignored).
type Response struct {
	Thinking          string `json:"thinking,omitempty"`
	ThinkingSignature string `json:"thinkingSignature,omitempty"`
	Text              string `json:"text,omitempty"`
	// ToolCalls are toolCall blocks (llm.ToolCall(id, name, args)); an empty ID gets a
	// generated one ("faux_call_<n>"). A non-empty Text on a toolCall block is streamed as the raw
	// argument JSON instead of marshaling Arguments, so a script can send malformed arguments;
	// the final block's Arguments are then what ParsePartialJSON made of it.
	ToolCalls []llm.Content `json:"toolCalls,omitempty"`
	// Content, when set, replaces Thinking/Text/ToolCalls with explicit blocks.
	Content []llm.Content `json:"content,omitempty"`
	// StopReason: "" means toolUse when there are tool calls and stop otherwise; length is
	// reported as done; error and aborted end in an error event.
	StopReason llm.StopReason `json:"stopReason,omitempty"`
	// Error, when set, ends the stream with an error event (StopReason error unless StopReason
	// says aborted) after the content was streamed. Use it to simulate provider failures, e.g.
	// a context overflow message.
	Error string `json:"error,omitempty"`
	// Usage, when set, replaces the estimated token counts (cost is still computed).
	Usage *llm.Usage `json:"usage,omitempty"`
	// Latency before the first event and DeltaLatency before every further event override the
	// provider's settings when positive.
	Latency      time.Duration `json:"-"`
	DeltaLatency time.Duration `json:"-"`
}

// Responder computes a reply from the context the model was given. It must be safe for
// concurrent use.
type Responder func(c *llm.Context) Response

// Provider is the faux API implementation. Create it with New.
type Provider struct {
	mu        sync.Mutex
	script    []Response
	responder Responder

	latency       time.Duration
	deltaLatency  time.Duration
	deltaSize     int
	toolDeltaSize int

	calls atomic.Int64
	ids   atomic.Uint64
}

// Default delta sizes, in runes.
const (
	DefaultDeltaSize     = 16
	DefaultToolDeltaSize = 24
)

// Option configures a Provider.
type Option func(*Provider)

// WithResponses queues responses (same as Push).
func WithResponses(rs ...Response) Option {
	return func(p *Provider) { p.script = append(p.script, rs...) }
}

// WithResponder answers with f once the script is empty.
func WithResponder(f Responder) Option { return func(p *Provider) { p.responder = f } }

// WithLatency waits first before the first event and perDelta before every further event.
func WithLatency(first, perDelta time.Duration) Option {
	return func(p *Provider) { p.latency, p.deltaLatency = first, perDelta }
}

// WithDeltaSize sets how many runes of text or thinking each delta carries (<= 0: the whole
// block in one delta).
func WithDeltaSize(runes int) Option { return func(p *Provider) { p.deltaSize = runes } }

// WithToolDeltaSize sets how many runes of argument JSON each toolcall_delta carries (<= 0: all
// of it in one delta).
func WithToolDeltaSize(runes int) Option { return func(p *Provider) { p.toolDeltaSize = runes } }

// New returns a provider. It is not registered; see Register.
func New(opts ...Option) *Provider {
	p := &Provider{deltaSize: DefaultDeltaSize, toolDeltaSize: DefaultToolDeltaSize}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Register creates a provider and registers it as the implementation of llm.APIFaux.
func Register(opts ...Option) *Provider {
	p := New(opts...)
	llm.RegisterAPI(llm.APIFaux, p)
	return p
}

// Push appends responses to the script.
func (p *Provider) Push(rs ...Response) {
	p.mu.Lock()
	p.script = append(p.script, rs...)
	p.mu.Unlock()
}

// Pending returns how many scripted responses are left.
func (p *Provider) Pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.script)
}

// Calls returns how many streams have run.
func (p *Provider) Calls() int { return int(p.calls.Load()) }

// next pops the next scripted response, or asks the responder.
func (p *Provider) next(c *llm.Context) (Response, bool) {
	p.mu.Lock()
	if len(p.script) > 0 {
		r := p.script[0]
		p.script[0] = Response{} // let the GC have it
		p.script = p.script[1:]
		p.mu.Unlock()
		return r, true
	}
	f := p.responder
	p.mu.Unlock()
	if f == nil {
		return Response{}, false
	}
	return respond(f, c), true
}

// respond calls a responder; a panic becomes a scripted provider error rather than a crash of
// whoever ranges over the stream.
func respond(f Responder, c *llm.Context) (r Response) {
	defer func() {
		if v := recover(); v != nil {
			r = Response{Error: fmt.Sprintf("faux: responder panicked: %v", v)}
		}
	}()
	return f(c)
}

// Stream implements llm.Provider.
func (p *Provider) Stream(ctx context.Context, model *llm.Model, c *llm.Context, opts *llm.StreamOptions) iter.Seq[llm.Event] {
	return func(yield func(llm.Event) bool) {
		p.calls.Add(1)
		if c == nil {
			c = &llm.Context{}
		}
		s := streamer{p: p, ctx: ctx, model: model, yield: yield, done: ctx.Done()}
		s.run(c)
	}
}

// streamer is the state of one stream.
type streamer struct {
	p     *Provider
	ctx   context.Context
	model *llm.Model
	yield func(llm.Event) bool
	done  <-chan struct{}
	msg   *llm.Message
	delay time.Duration // between events
	raw   int           // bytes of tool-call argument JSON streamed so far (for usage)
	timer *time.Timer
}

// wait sleeps d (if positive) and reports whether the stream may go on (ctx not done).
func (s *streamer) wait(d time.Duration) bool {
	if d <= 0 {
		if s.done == nil {
			return true
		}
		select {
		case <-s.done:
			return false
		default:
			return true
		}
	}
	if s.timer == nil {
		s.timer = time.NewTimer(d)
	} else {
		s.timer.Reset(d)
	}
	select {
	case <-s.done:
		return false
	case <-s.timer.C:
		return true
	}
}

// step waits the inter-event delay before the next event. It returns false when ctx is done,
// after sending the aborted error event. Callers step before mutating the partial message, so
// an aborted message holds exactly what the events delivered.
func (s *streamer) step() bool {
	if !s.wait(s.delay) {
		s.abort()
		return false
	}
	return true
}

// send yields ev with the partial message; false means the consumer stopped.
func (s *streamer) send(ev llm.Event) bool {
	ev.Partial = s.msg
	return s.yield(ev)
}

// emit is step then send.
func (s *streamer) emit(ev llm.Event) bool { return s.step() && s.send(ev) }

func (s *streamer) abort() {
	s.finishUsage(nil)
	s.msg.StopReason = llm.StopReasonAborted
	err := s.ctx.Err()
	if err == nil {
		err = context.Canceled
	}
	s.msg.ErrorMessage = err.Error()
	s.yield(llm.Event{Type: llm.EventError, Reason: llm.StopReasonAborted, Message: s.msg})
}

// message1 and message2 are an assistant message with its usage and room for its blocks in
// one allocation (what llm.NewAssistant does in three). A reply of one block (a text, or a
// tool call) takes message1, which fits the 512-byte size class; message2 is 704 bytes.
type message1 struct {
	msg    llm.Message
	usage  llm.Usage
	blocks [1]llm.Content
}

type message2 struct {
	msg    llm.Message
	usage  llm.Usage
	blocks [2]llm.Content
}

// newMessage returns an empty assistant message with room for n blocks without regrowth.
func newMessage(model *llm.Model, n int) *llm.Message {
	var m *llm.Message
	switch {
	case n <= 1:
		a := &message1{}
		a.msg.Content, a.msg.Usage = a.blocks[:0], &a.usage
		m = &a.msg
	case n == 2:
		a := &message2{}
		a.msg.Content, a.msg.Usage = a.blocks[:0], &a.usage
		m = &a.msg
	default:
		m = &llm.Message{Content: make([]llm.Content, 0, n), Usage: &llm.Usage{}}
	}
	m.Role, m.Timestamp = llm.RoleAssistant, time.Now().UnixMilli()
	m.API, m.Provider, m.Model = model.API, model.Provider, model.ID
	return m
}

// blockCount is how many content blocks r streams.
func blockCount(r *Response) int {
	if r.Content != nil {
		return len(r.Content)
	}
	n := len(r.ToolCalls)
	if r.Thinking != "" {
		n++
	}
	if r.Text != "" {
		n++
	}
	return n
}

func (s *streamer) run(c *llm.Context) {
	r, ok := s.p.next(c)
	s.msg = newMessage(s.model, blockCount(&r))
	if !ok {
		s.msg.StopReason = llm.StopReasonError
		s.msg.ErrorMessage = ErrScriptExhausted.Error()
		s.yield(llm.Event{Type: llm.EventError, Reason: llm.StopReasonError, Message: s.msg})
		return
	}
	s.delay = s.p.deltaLatency
	if r.DeltaLatency > 0 {
		s.delay = r.DeltaLatency
	}
	first := s.p.latency
	if r.Latency > 0 {
		first = r.Latency
	}
	defer func() {
		if s.timer != nil {
			s.timer.Stop()
		}
	}()
	s.msg.Usage.Input = estimateContext(c)
	if !s.wait(first) {
		s.abort()
		return
	}
	if !s.yield(llm.Event{Type: llm.EventStart, Partial: s.msg}) {
		return
	}

	blocks := r.Content
	if blocks == nil {
		if r.Thinking != "" {
			if !s.thinking(llm.Content{Type: llm.ContentThinking, Thinking: r.Thinking, ThinkingSignature: r.ThinkingSignature}) {
				return
			}
		}
		if r.Text != "" && !s.text(r.Text) {
			return
		}
		for i := range r.ToolCalls {
			if !s.toolCall(r.ToolCalls[i]) {
				return
			}
		}
	} else {
		for i := range blocks {
			var ok bool
			switch b := blocks[i]; b.Type {
			case llm.ContentThinking:
				ok = s.thinking(b)
			case llm.ContentToolCall:
				ok = s.toolCall(b)
			case llm.ContentText:
				ok = s.text(b.Text)
			default: // images and unknown kinds are not streamable: appear whole, no events
				s.msg.Content = append(s.msg.Content, b)
				ok = true
			}
			if !ok {
				return
			}
		}
	}

	s.finishUsage(r.Usage)
	if !s.wait(s.delay) {
		s.abort()
		return
	}
	reason := r.StopReason
	if r.Error != "" || reason == llm.StopReasonError || reason == llm.StopReasonAborted {
		if reason != llm.StopReasonAborted {
			reason = llm.StopReasonError
		}
		s.msg.StopReason = reason
		s.msg.ErrorMessage = r.Error
		if s.msg.ErrorMessage == "" {
			s.msg.ErrorMessage = "faux: scripted " + string(reason)
		}
		s.yield(llm.Event{Type: llm.EventError, Reason: reason, Message: s.msg})
		return
	}
	if reason == "" {
		reason = llm.StopReasonStop
		for i := range s.msg.Content {
			if s.msg.Content[i].Type == llm.ContentToolCall {
				reason = llm.StopReasonToolUse
				break
			}
		}
	}
	s.msg.StopReason = reason
	s.yield(llm.Event{Type: llm.EventDone, Reason: reason, Message: s.msg})
}

// chunkEnd returns the byte offset after n runes of s starting at off (n <= 0: end of s), so a
// delta never splits a UTF-8 sequence.
func chunkEnd(s string, off, n int) int {
	if n <= 0 {
		return len(s)
	}
	i := off
	for k := 0; k < n && i < len(s); k++ {
		if s[i] < utf8.RuneSelf {
			i++
			continue
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return i
}

func (s *streamer) text(text string) bool {
	if !s.step() {
		return false
	}
	idx := len(s.msg.Content)
	s.msg.Content = append(s.msg.Content, llm.Content{Type: llm.ContentText})
	if !s.send(llm.Event{Type: llm.EventTextStart, ContentIndex: idx}) {
		return false
	}
	for off := 0; off < len(text); {
		if !s.step() {
			return false
		}
		end := chunkEnd(text, off, s.p.deltaSize)
		s.msg.Content[idx].Text = text[:end]
		if !s.send(llm.Event{Type: llm.EventTextDelta, ContentIndex: idx, Delta: text[off:end]}) {
			return false
		}
		off = end
	}
	return s.emit(llm.Event{Type: llm.EventTextEnd, ContentIndex: idx, Content: text})
}

func (s *streamer) thinking(b llm.Content) bool {
	if !s.step() {
		return false
	}
	idx := len(s.msg.Content)
	s.msg.Content = append(s.msg.Content, llm.Content{Type: llm.ContentThinking, Redacted: b.Redacted})
	if !s.send(llm.Event{Type: llm.EventThinkingStart, ContentIndex: idx}) {
		return false
	}
	text := b.Thinking
	for off := 0; off < len(text); {
		if !s.step() {
			return false
		}
		end := chunkEnd(text, off, s.p.deltaSize)
		s.msg.Content[idx].Thinking = text[:end]
		if !s.send(llm.Event{Type: llm.EventThinkingDelta, ContentIndex: idx, Delta: text[off:end]}) {
			return false
		}
		off = end
	}
	if !s.step() {
		return false
	}
	s.msg.Content[idx].ThinkingSignature = b.ThinkingSignature
	return s.send(llm.Event{Type: llm.EventThinkingEnd, ContentIndex: idx, Content: text})
}

func (s *streamer) toolCall(b llm.Content) bool {
	id := b.ID
	if id == "" {
		id = "faux_call_" + strconv.FormatUint(s.p.ids.Add(1), 10)
	}
	raw := b.Text
	if raw == "" {
		raw = marshalArgs(b.Arguments)
	}
	if !s.step() {
		return false
	}
	idx := len(s.msg.Content)
	// One arguments map per call, updated in place after every delta (the partial message is
	// mutated until done anyway): a new map per delta was most of a tool call's allocation.
	args := map[string]any{}
	s.msg.Content = append(s.msg.Content, llm.Content{
		Type: llm.ContentToolCall, ID: id, Name: b.Name, Arguments: args,
		ThoughtSignature: b.ThoughtSignature,
	})
	if !s.send(llm.Event{Type: llm.EventToolCallStart, ContentIndex: idx}) {
		return false
	}
	for off := 0; off < len(raw); {
		if !s.step() {
			return false
		}
		end := chunkEnd(raw, off, s.p.toolDeltaSize)
		llm.ParsePartialJSONInto(args, raw[:end])
		s.raw += end - off
		if !s.send(llm.Event{Type: llm.EventToolCallDelta, ContentIndex: idx, Delta: raw[off:end]}) {
			return false
		}
		off = end
	}
	return s.emit(llm.Event{Type: llm.EventToolCallEnd, ContentIndex: idx, ToolCall: &s.msg.Content[idx]})
}

// finishUsage sets the output estimate (text, thinking and streamed argument JSON), or the
// scripted usage, and prices it.
func (s *streamer) finishUsage(override *llm.Usage) {
	u := s.msg.Usage
	if override != nil {
		*u = *override
	} else {
		n := s.raw
		for i := range s.msg.Content {
			n += len(s.msg.Content[i].Text) + len(s.msg.Content[i].Thinking)
		}
		u.Output = (n + 3) / 4
	}
	u.TotalTokens = u.Input + u.Output + u.CacheRead + u.CacheWrite
	llm.CalculateCost(s.model, u)
}

// estimateContext estimates the input tokens of c at four bytes per token, without allocating.
func estimateContext(c *llm.Context) int {
	n := len(c.SystemPrompt)
	for i := range c.Messages {
		m := &c.Messages[i]
		n += 4 // role and framing
		for j := range m.Content {
			b := &m.Content[j]
			n += len(b.Text) + len(b.Thinking) + len(b.Name) + len(b.Data)/8
			n += argsSize(b.Arguments)
		}
	}
	for i := range c.Tools {
		n += len(c.Tools[i].Name) + len(c.Tools[i].Description) + len(c.Tools[i].Parameters)
	}
	return (n + 3) / 4
}

func argsSize(v any) int {
	switch x := v.(type) {
	case map[string]any:
		n := 2
		for k, e := range x {
			n += len(k) + 4 + argsSize(e)
		}
		return n
	case []any:
		n := 2
		for _, e := range x {
			n += 1 + argsSize(e)
		}
		return n
	case string:
		return len(x) + 2
	case nil:
		return 0
	}
	return 4
}
