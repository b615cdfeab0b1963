package llm

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"sync"
	"time"
)

// EventType names an assistant message stream event.
type EventType string

const (
	EventStart         EventType = "start"
	EventTextStart     EventType = "text_start"
	EventTextDelta     EventType = "text_delta"
	EventTextEnd       EventType = "text_end"
	EventThinkingStart EventType = "thinking_start"
	EventThinkingDelta EventType = "thinking_delta"
	EventThinkingEnd   EventType = "thinking_end"
	EventToolCallStart EventType = "toolcall_start"
	EventToolCallDelta EventType = "toolcall_delta"
	EventToolCallEnd   EventType = "toolcall_end"
	EventDone          EventType = "done"
	EventError         EventType = "error"
)

// Event is one step of an assistant message stream.
//
// Partial points at the message as built so far. The provider keeps mutating it until the stream
// ends, so a consumer that keeps it past the callback must Clone it. For done and error, Message
// is the final message (StopReason error/aborted with ErrorMessage set for error).
type Event struct {
	Type         EventType
	ContentIndex int      // index into Partial.Content of the block this event is about
	Delta        string   // *_delta: the new text, thinking or raw argument JSON
	Content      string   // *_end: the whole text or thinking of the block
	ToolCall     *Content // toolcall_end: the finished call
	Partial      *Message // every event but done/error
	Reason       StopReason
	Message      *Message // done and error: the final message
}

// StreamOptions are the options every provider understands. Providers read what applies to them.
type StreamOptions struct {
	APIKey      string
	Temperature *float64
	MaxTokens   int
	Headers     map[string]string
	SessionID   string // lets providers with prompt caching key their cache
	// Thinking is the provider-independent reasoning level; ThinkingBudgets overrides the token
	// budgets used by providers that take a budget rather than an effort.
	Thinking        ThinkingLevel
	ThinkingBudgets ThinkingBudgets
	// HTTPClient overrides the client used by HTTP providers (tests, proxies).
	HTTPClient *http.Client
	// MaxRetryDelay caps how long a provider waits on Retry-After before giving up (0 = 60s).
	MaxRetryDelay time.Duration
	// Extra carries provider-specific options (for example "ollama.num_ctx").
	Extra map[string]any
	// Secrets are further strings (every configured provider key, tokens) that Stream removes
	// from error messages before they leave this package, next to APIKey, the Headers values
	// and credential-shaped tokens (see Redact).
	Secrets []string
}

// ThinkingBudgets are token budgets per thinking level, for providers that take budgets.
type ThinkingBudgets struct {
	Minimal, Low, Medium, High, XHigh int
}

// DefaultThinkingBudgets are the budgets used when none are configured.
var DefaultThinkingBudgets = ThinkingBudgets{Minimal: 1024, Low: 2048, Medium: 8192, High: 16384, XHigh: 32768}

// Budget returns the token budget for level, falling back to DefaultThinkingBudgets.
func (b ThinkingBudgets) Budget(level ThinkingLevel) int {
	pick := func(v, def int) int {
		if v > 0 {
			return v
		}
		return def
	}
	d := DefaultThinkingBudgets
	switch level {
	case ThinkingMinimal:
		return pick(b.Minimal, d.Minimal)
	case ThinkingLow:
		return pick(b.Low, d.Low)
	case ThinkingMedium:
		return pick(b.Medium, d.Medium)
	case ThinkingHigh:
		return pick(b.High, d.High)
	case ThinkingXHigh:
		return pick(b.XHigh, d.XHigh)
	}
	return 0
}

// Provider is one API implementation. Stream must return promptly; the work happens while the
// caller ranges over the sequence, and cancellation of ctx must reach the underlying request.
// Implementations report every failure inside the stream as an error event. c and opts (opts
// may be nil) are read-only and valid until the stream returns: callers share and reuse them
// (pkg/loop passes its Config's StreamOptions to every call, and reuses its runs' Context).
type Provider interface {
	Stream(ctx context.Context, model *Model, c *Context, opts *StreamOptions) iter.Seq[Event]
}

// ProviderFunc adapts a function to Provider.
type ProviderFunc func(ctx context.Context, model *Model, c *Context, opts *StreamOptions) iter.Seq[Event]

// Stream calls f.
func (f ProviderFunc) Stream(ctx context.Context, model *Model, c *Context, opts *StreamOptions) iter.Seq[Event] {
	return f(ctx, model, c, opts)
}

// ErrNoProvider is returned (inside the stream) when no implementation is registered for a model's API.
var ErrNoProvider = errors.New("no provider registered for api")

var registry sync.Map // api string -> Provider

// RegisterAPI makes p the implementation for api, replacing any earlier one.
func RegisterAPI(api string, p Provider) { registry.Store(api, p) }

// UnregisterAPI removes the implementation for api.
func UnregisterAPI(api string) { registry.Delete(api) }

// LookupAPI returns the implementation registered for api.
func LookupAPI(api string) (Provider, error) {
	v, ok := registry.Load(api)
	if !ok {
		return nil, fmt.Errorf("%w %q (registered: %v)", ErrNoProvider, api, RegisteredAPIs())
	}
	return v.(Provider), nil
}

// RegisteredAPIs lists the registered API values.
func RegisteredAPIs() []string {
	var out []string
	registry.Range(func(k, _ any) bool { out = append(out, k.(string)); return true })
	return out
}

// Stream streams one assistant message from model. The returned sequence always yields exactly
// one terminal event (done or error), last, even when the provider misbehaves: a missing
// provider, a panic, or a stream that ends without a terminal event become an error event.
// Breaking out of the range early is allowed. The terminal message's ErrorMessage is redacted
// (Redact with opts.APIKey, the opts.Headers values and opts.Secrets), so a provider error body
// that echoes a request header never carries the credential further.
func Stream(ctx context.Context, model *Model, c *Context, opts *StreamOptions) iter.Seq[Event] {
	p, err := LookupAPI(model.API)
	return guarded(ctx, p, err, model, c, opts)
}

// StreamProvider is Stream with p instead of the implementation registered for model.API,
// with the same guarantees (one terminal event, last; panics and missing terminals become
// error events; redacted error text). It is for callers that hold a provider of their own
// rather than one in the process-wide registry: a transport that has its own connection per
// caller (pkg/llmbus), or a server that puts any provider on a wire.
func StreamProvider(ctx context.Context, p Provider, model *Model, c *Context, opts *StreamOptions) iter.Seq[Event] {
	var err error
	if p == nil {
		err = fmt.Errorf("%w %q: nil provider", ErrNoProvider, model.API)
	}
	return guarded(ctx, p, err, model, c, opts)
}

func guarded(ctx context.Context, p Provider, err error, model *Model, c *Context, opts *StreamOptions) iter.Seq[Event] {
	return func(yield func(Event) bool) {
		if opts == nil {
			opts = &StreamOptions{}
		}
		if err != nil {
			ev := ErrorEvent(model, nil, StopReasonError, err)
			redactMessage(ev.Message, model, opts)
			yield(ev)
			return
		}
		var last *Message
		terminal := false
		stopped := false
		func() {
			defer func() {
				if r := recover(); r != nil && !terminal && !stopped {
					terminal = true
					ev := ErrorEvent(model, last, StopReasonError, fmt.Errorf("provider %s panicked: %v", model.API, r))
					redactMessage(ev.Message, model, opts)
					stopped = !yield(ev)
				}
			}()
			for ev := range p.Stream(ctx, model, c, opts) {
				if terminal {
					continue // a second terminal event or events after it are dropped
				}
				if ev.Partial != nil {
					last = ev.Partial
				}
				if ev.Type == EventDone || ev.Type == EventError {
					terminal = true
					redactMessage(ev.Message, model, opts)
				}
				if !yield(ev) {
					stopped = true
					return
				}
			}
		}()
		if !terminal && !stopped {
			reason := StopReasonError
			err := errors.New("provider stream ended without a done or error event")
			if ctx.Err() != nil {
				reason, err = StopReasonAborted, ctx.Err()
			}
			yield(ErrorEvent(model, last, reason, err))
		}
	}
}

// Complete streams a message and returns the final one. Failures are reported in the message
// (StopReason error or aborted, ErrorMessage set), as with Stream.
func Complete(ctx context.Context, model *Model, c *Context, opts *StreamOptions) Message {
	var final Message
	for ev := range Stream(ctx, model, c, opts) {
		if ev.Message != nil {
			final = *ev.Message
		}
	}
	return final
}

// SimpleOptions are StreamOptions reduced to what every caller needs: reasoning as a level.
type SimpleOptions struct {
	APIKey      string
	Temperature *float64
	MaxTokens   int
	Reasoning   ThinkingLevel
	Budgets     ThinkingBudgets
	Headers     map[string]string
	SessionID   string
}

func (o *SimpleOptions) stream(model *Model) *StreamOptions {
	if o == nil {
		return &StreamOptions{}
	}
	so := &StreamOptions{
		APIKey: o.APIKey, Temperature: o.Temperature, MaxTokens: o.MaxTokens,
		Headers: o.Headers, SessionID: o.SessionID, ThinkingBudgets: o.Budgets,
	}
	if model.Reasoning {
		so.Thinking = o.Reasoning
	}
	return so
}

// StreamSimple is Stream with reasoning given as a level; the level is ignored for models
// without reasoning.
func StreamSimple(ctx context.Context, model *Model, c *Context, opts *SimpleOptions) iter.Seq[Event] {
	return Stream(ctx, model, c, opts.stream(model))
}

// CompleteSimple is Complete with SimpleOptions.
func CompleteSimple(ctx context.Context, model *Model, c *Context, opts *SimpleOptions) Message {
	return Complete(ctx, model, c, opts.stream(model))
}

// NewAssistant returns an empty assistant message stamped with the model's identity.
func NewAssistant(model *Model) *Message {
	return &Message{
		Role: RoleAssistant, Content: []Content{}, Timestamp: time.Now().UnixMilli(),
		API: model.API, Provider: model.Provider, Model: model.ID, Usage: &Usage{},
	}
}

// ErrorEvent builds a terminal error event. partial may be nil; its content and usage are kept
// so that an aborted message still reports what it cost.
func ErrorEvent(model *Model, partial *Message, reason StopReason, err error) Event {
	var m *Message
	if partial != nil {
		c := partial.Clone()
		m = &c
	} else {
		m = NewAssistant(model)
	}
	m.StopReason = reason
	if err != nil {
		m.ErrorMessage = err.Error()
	}
	return Event{Type: EventError, Reason: reason, Message: m}
}
