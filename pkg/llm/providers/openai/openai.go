// Package openai implements the "openai-completions" API (POST /chat/completions with
// stream: true) with net/http: the request body is written directly (encode.go, checked against
// the official SDK github.com/openai/openai-go/v3 in the tests) and the event stream is read
// and its chunks decoded here (http.go, stream.go). It talks to OpenAI and to any
// OpenAI-compatible server: vLLM, llama.cpp, DeepSeek, Moonshot, Zhipu, DashScope, ...
// Differences between servers are llm.Compat switches, detected from the base URL when unset
// (see docs/providers.md).
//
// Streaming: text deltas become text blocks; reasoning deltas (reasoning_content, reasoning or
// reasoning_text, whichever the server sends) become thinking blocks whose ThinkingSignature
// names the field; tool calls are accumulated by their index, so interleaved parallel calls
// build separate blocks, and their arguments are re-parsed with llm.ParsePartialJSON on every
// delta. Usage comes from the usage chunk (stream_options.include_usage) or from any chunk that
// carries usage. Every failure ends the stream with one error event: HTTP errors quote the
// server's message, a chunk with an "error" object or a malformed chunk is reported as such,
// an unknown finish reason or invalid final tool-call JSON is an error, and cancelling ctx ends
// the stream with StopReason aborted, the usage seen so far kept.
//
// Retries: the initial request is retried on 429, 5xx and connection errors by the shared
// internal/retry helper (retry.Do around the HTTP client). Once a
// response has been accepted nothing is retried, so no token is ever streamed twice.
package openai

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net/http"
	"time"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/internal/retry"
)

// DefaultBaseURL is used when a model has no BaseURL.
const DefaultBaseURL = "https://api.openai.com/v1"

// Provider implements llm.Provider for the openai-completions API. It is safe for concurrent
// use; each Stream call builds its own request.
type Provider struct {
	httpClient *http.Client
	headers    map[string]string
	policy     retry.Policy
}

// Option configures a Provider.
type Option func(*Provider)

// WithHTTPClient sets the HTTP client used when a call's StreamOptions.HTTPClient is nil.
func WithHTTPClient(c *http.Client) Option { return func(p *Provider) { p.httpClient = c } }

// WithHeaders adds headers to every request (model.Headers and StreamOptions.Headers are added
// after them and win).
func WithHeaders(h map[string]string) Option { return func(p *Provider) { p.headers = h } }

// WithMaxAttempts sets how many times the initial request is tried in total (1 = no retries;
// default retry.DefaultMaxAttempts = 4).
func WithMaxAttempts(n int) Option { return func(p *Provider) { p.policy.MaxAttempts = n } }

// WithBackoff sets the exponential backoff used when the server sends no Retry-After: the first
// wait and the largest one (defaults 500ms and 30s).
func WithBackoff(initial, max time.Duration) Option {
	return func(p *Provider) { p.policy.InitialInterval, p.policy.MaxInterval = initial, max }
}

// WithLogger sets the logger for retry warnings (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(p *Provider) { p.policy.Logger = l } }

// maxIdlePerHost is how many idle keep-alive connections the default client keeps to the API
// host: about the model calls a busy process has in flight at once.
const maxIdlePerHost = 64

// New returns a Provider.
func New(opts ...Option) *Provider {
	p := &Provider{}
	for _, o := range opts {
		o(p)
	}
	if p.httpClient == nil {
		// One client per provider so connections are reused across calls. No overall timeout:
		// streams last as long as the model talks; ctx bounds them.
		var rt http.RoundTripper = http.DefaultTransport
		if t, ok := http.DefaultTransport.(*http.Transport); ok { // not when wrapped (otelhttp, ...)
			t = t.Clone()
			t.ResponseHeaderTimeout = 5 * time.Minute // a server that accepts and never answers
			// Every call goes to the one API host, many at once: net/http keeps only 2 idle
			// connections per host by default, so under load each further stream dialed (and
			// with TLS, handshook) a connection and closed it after one call, 4 % of agentbus
			// up's CPU from outside (issue 40).
			t.MaxIdleConnsPerHost = maxIdlePerHost
			t.MaxIdleConns = max(t.MaxIdleConns, maxIdlePerHost)
			rt = t
		}
		p.httpClient = &http.Client{Transport: rt}
	}
	return p
}

// Register registers New(opts...) as the implementation of llm.APIOpenAICompletions.
func Register(opts ...Option) { llm.RegisterAPI(llm.APIOpenAICompletions, New(opts...)) }

var _ llm.Provider = (*Provider)(nil)

// Stream implements llm.Provider.
func (p *Provider) Stream(ctx context.Context, model *llm.Model, c *llm.Context, opts *llm.StreamOptions) iter.Seq[llm.Event] {
	return func(yield func(llm.Event) bool) {
		if opts == nil {
			opts = &llm.StreamOptions{}
		}
		if c == nil {
			c = &llm.Context{}
		}
		s := newStreamer(model, yield)
		if !s.emit(llm.Event{Type: llm.EventStart, Partial: s.msg}) {
			return
		}
		cp := resolveCompat(model)
		body, err := requestBody(model, c, opts, cp)
		if err != nil {
			s.fail(llm.StopReasonError, err)
			return
		}
		resp, err := p.post(ctx, model, opts, body)
		if err != nil {
			if ctx.Err() != nil {
				s.fail(llm.StopReasonAborted, fmt.Errorf("%w: %w", errAborted, context.Cause(ctx)))
				return
			}
			s.fail(llm.StopReasonError, describe(err))
			return
		}
		defer resp.Body.Close()
		s.consume(ctx, resp.Body)
	}
}

// errAborted is reported when ctx ends the stream without a more specific cause.
var errAborted = errors.New("request aborted")
