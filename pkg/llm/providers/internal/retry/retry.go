// Package retry retries the initial HTTP request of an LLM provider call: the part before any
// byte of the response body has been handed to the caller. It is shared by the HTTP providers
// (openai-completions, anthropic-messages, google-generative-ai, ollama-chat).
//
// What is retried: responses with status 429 or 5xx, and transport errors (connection refused,
// reset before the response headers, ...). Waits follow an exponential backoff
// (github.com/cenkalti/backoff/v4) unless the server says how long to wait with a
// "retry-after-ms" or "Retry-After" header (seconds or an HTTP date); a server-directed wait
// longer than Policy.MaxDelay is not sat out: Do gives up at once with an *HTTPError that wraps
// ErrRetryAfterTooLong. Every wait ends early when ctx is done. Before each wait the hook of
// llm.WithRetryHook in ctx, if any, is told (how the composition root counts
// agentbus_llm_retries_total).
//
// What is never retried: anything after Do has returned a response. Retrying a stream that has
// started would duplicate tokens the caller already showed, so streaming failures are the
// caller's to report.
//
// Do turns every final status >= 400 into an *HTTPError carrying the server's own message
// (from the usual JSON error shapes, or the start of a plain-text body). The error never
// contains request headers or the URL's query, so API keys cannot leak through it.
//
// Three ways to plug it in:
//   - Do, around any send function;
//   - Middleware, whose shape matches option.Middleware of the Stainless-generated SDKs
//     (openai-go, anthropic-sdk-go);
//   - Transport, an http.RoundTripper for SDKs that only take an *http.Client (genai) or plain
//     net/http code (ollama).
package retry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/agentbus/agentbus/pkg/llm"
)

// Defaults used for zero fields of Policy.
const (
	DefaultMaxAttempts     = 4
	DefaultMaxDelay        = 60 * time.Second
	DefaultInitialInterval = 500 * time.Millisecond
	DefaultMaxInterval     = 30 * time.Second
)

// ErrRetryAfterTooLong is wrapped by the *HTTPError Do returns when the server asks for a wait
// longer than Policy.MaxDelay.
var ErrRetryAfterTooLong = errors.New("server-requested retry delay exceeds the limit")

// Policy says how often and how long to retry. The zero value is usable.
type Policy struct {
	// MaxAttempts is the total number of attempts, the first included (0 = DefaultMaxAttempts,
	// 1 = no retries).
	MaxAttempts int
	// MaxDelay caps every single wait. A Retry-After above it makes Do give up
	// (0 = DefaultMaxDelay).
	MaxDelay time.Duration
	// InitialInterval and MaxInterval shape the exponential backoff used when the server gives
	// no Retry-After (0 = DefaultInitialInterval / DefaultMaxInterval).
	InitialInterval time.Duration
	MaxInterval     time.Duration
	// Logger receives one warning per retry (status, attempt, wait). Nil = slog.Default().
	Logger *slog.Logger
}

func (p Policy) withDefaults() Policy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = DefaultMaxDelay
	}
	if p.InitialInterval <= 0 {
		p.InitialInterval = DefaultInitialInterval
	}
	if p.MaxInterval <= 0 {
		p.MaxInterval = DefaultMaxInterval
	}
	if p.MaxInterval > p.MaxDelay {
		p.MaxInterval = p.MaxDelay
	}
	if p.Logger == nil {
		p.Logger = slog.Default()
	}
	return p
}

// HTTPError is a final HTTP failure: a status >= 400 that was not retried or whose retries ran
// out.
type HTTPError struct {
	StatusCode int
	// Message is the server's error message, or the start of the body when it is not JSON.
	Message string
	// RetryAfter is the server-requested wait, when the response carried one.
	RetryAfter time.Duration
	// Attempts is how many requests were made.
	Attempts int
	// Err is ErrRetryAfterTooLong when Do gave up because of the wait, else nil.
	Err error
	// MaxDelay is the limit RetryAfter was compared with (set together with Err).
	MaxDelay time.Duration
}

func (e *HTTPError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP %d", e.StatusCode)
	if t := http.StatusText(e.StatusCode); t != "" {
		b.WriteString(" " + t)
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if errors.Is(e.Err, ErrRetryAfterTooLong) {
		fmt.Fprintf(&b, " (server asked to retry after %s, more than the %s limit; not retrying)", e.RetryAfter, e.MaxDelay)
	} else if e.Attempts > 1 {
		fmt.Fprintf(&b, " (after %d attempts)", e.Attempts)
	}
	return b.String()
}

// Unwrap returns Err.
func (e *HTTPError) Unwrap() error { return e.Err }

// Retryable reports whether a response status is worth another attempt.
func Retryable(status int) bool { return status == http.StatusTooManyRequests || status >= 500 }

// Do sends req with send, retrying as the package doc describes. On success (status < 400)
// the caller owns the returned response and its body. Otherwise the error is an *HTTPError
// (body read and closed), the context's error, or the last transport error.
//
// req's body is replayed on retries through req.GetBody; when that is nil the body is read
// into memory first.
func Do(ctx context.Context, p Policy, req *http.Request, send func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	p = p.withDefaults()
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		body, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("read request body: %w", err)
		}
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		req.Body, _ = req.GetBody()
	}
	var bo *backoff.ExponentialBackOff // made at the first wait: most calls never wait
	for attempt := 1; ; attempt++ {
		try := req
		if attempt > 1 {
			try = req.Clone(ctx)
			if req.GetBody != nil {
				b, err := req.GetBody()
				if err != nil {
					return nil, fmt.Errorf("replay request body: %w", err)
				}
				try.Body = b
			}
		}
		resp, err := send(try)
		if ctx.Err() != nil {
			if resp != nil && resp.Body != nil {
				_ = resp.Body.Close()
			}
			return nil, ctx.Err()
		}
		var (
			wait      time.Duration
			hasWait   bool
			lastError error
			status    int
		)
		switch {
		case err != nil:
			lastError = err
		case resp.StatusCode < 400:
			return resp, nil
		default:
			herr := ErrorFromResponse(resp)
			herr.Attempts = attempt
			status = resp.StatusCode
			wait, hasWait = herr.RetryAfter, herr.RetryAfter > 0 || hasRetryAfter(resp.Header)
			if !Retryable(resp.StatusCode) {
				return nil, herr
			}
			if hasWait && wait > p.MaxDelay {
				herr.Err, herr.MaxDelay = ErrRetryAfterTooLong, p.MaxDelay
				return nil, herr
			}
			lastError = herr
		}
		if attempt >= p.MaxAttempts {
			var herr *HTTPError
			if errors.As(lastError, &herr) {
				return nil, herr
			}
			return nil, fmt.Errorf("after %d attempts: %w", attempt, lastError)
		}
		if !hasWait {
			if bo == nil {
				bo = backoff.NewExponentialBackOff(
					backoff.WithInitialInterval(p.InitialInterval),
					backoff.WithMaxInterval(p.MaxInterval),
					backoff.WithMaxElapsedTime(0), // attempts, not elapsed time, end the loop
				)
			}
			wait = bo.NextBackOff()
		}
		if wait > p.MaxDelay {
			wait = p.MaxDelay
		}
		if hook := llm.RetryHook(ctx); hook != nil {
			hook(llm.Retry{Attempt: attempt, StatusCode: status, Reason: llm.RetryReason(status), Wait: wait})
		}
		p.Logger.LogAttrs(ctx, slog.LevelWarn, "llm request failed, retrying",
			slog.String("error", lastError.Error()), slog.Int("attempt", attempt),
			slog.Int("maxAttempts", p.MaxAttempts), slog.Duration("wait", wait))
		if err := sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Middleware returns Do as a middleware in the shape of the Stainless SDKs' option.Middleware,
// so it converts directly: option.WithMiddleware(retry.Middleware(p)). The request's context
// bounds the retries. Disable the SDK's own retries (option.WithMaxRetries(0)).
func Middleware(p Policy) func(*http.Request, func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	return func(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
		return Do(req.Context(), p, req, next)
	}
}

// MaxIdleConnsPerHost is how many idle keep-alive connections DefaultTransport keeps to one
// host: about the model calls a busy process has in flight at once to one API.
const MaxIdleConnsPerHost = 64

var defaultTransport = sync.OnceValue(func() http.RoundTripper {
	t, ok := http.DefaultTransport.(*http.Transport)
	if !ok { // wrapped (otelhttp, ...): the wrapper's choice
		return http.DefaultTransport
	}
	t = t.Clone()
	t.MaxIdleConnsPerHost = MaxIdleConnsPerHost
	t.MaxIdleConns = max(t.MaxIdleConns, MaxIdleConnsPerHost)
	return t
})

var defaultClient = sync.OnceValue(func() *http.Client { return &http.Client{Transport: DefaultTransport()} })

// DefaultTransport is the transport the providers use when they are given none: a clone of
// http.DefaultTransport (taken at first use) that keeps MaxIdleConnsPerHost idle connections
// per host instead of net/http's 2. Every call of a provider goes to its one API host, many at
// once; with 2 idle connections, each further stream under load dialed (with TLS, handshook) a
// connection and closed it after one call (issue 40). When http.DefaultTransport is not an
// *http.Transport it is returned as is. Shared, so connections are reused across calls and
// providers.
func DefaultTransport() http.RoundTripper { return defaultTransport() }

// DefaultClient is an *http.Client on DefaultTransport with no overall timeout (streams last as
// long as the model talks; the request's context bounds them), for SDKs that would otherwise
// fall back to http.DefaultClient.
func DefaultClient() *http.Client { return defaultClient() }

// Transport is an http.RoundTripper that applies Do to every request.
//
// Unlike a plain RoundTripper it returns an error (an *HTTPError) for final statuses >= 400,
// which http.Client passes through wrapped in a *url.Error; use errors.As to get it back.
type Transport struct {
	Base   http.RoundTripper // nil = DefaultTransport()
	Policy Policy
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = DefaultTransport()
	}
	return Do(req.Context(), t.Policy, req, base.RoundTrip)
}

func hasRetryAfter(h http.Header) bool {
	return h.Get("retry-after-ms") != "" || h.Get("Retry-After") != ""
}

// ParseRetryAfter reads the wait a response asks for: "retry-after-ms" (milliseconds, may be
// fractional) first, then "Retry-After" as seconds or an HTTP date. ok is false when neither
// header holds a usable value.
func ParseRetryAfter(h http.Header, now time.Time) (d time.Duration, ok bool) {
	if v := strings.TrimSpace(h.Get("retry-after-ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		return time.Duration(s * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d, true
		}
		return 0, true
	}
	return 0, false
}

// maxErrorBody bounds how much of an error body is read.
const maxErrorBody = 64 << 10

// ErrorFromResponse reads and closes resp's body and returns an *HTTPError with the server's
// message. It understands {"error":{"message":...}} (OpenAI, Anthropic, Google, vLLM,
// llama.cpp), {"error":"..."} (Ollama), {"message":...} and {"detail":...}; any other body is
// quoted (trimmed to 500 bytes).
func ErrorFromResponse(resp *http.Response) *HTTPError {
	e := &HTTPError{StatusCode: resp.StatusCode, Attempts: 1}
	if d, ok := ParseRetryAfter(resp.Header, time.Now()); ok {
		e.RetryAfter = d
	}
	if resp.Body == nil {
		return e
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	_ = resp.Body.Close()
	e.Message = ErrorMessage(body)
	return e
}

// ErrorMessage extracts a human-readable message from an error body (see ErrorFromResponse).
func ErrorMessage(body []byte) string {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return ""
	}
	var shape struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &shape) == nil {
		if len(shape.Error) > 0 && string(shape.Error) != "null" {
			var s string
			if json.Unmarshal(shape.Error, &s) == nil && s != "" {
				return s
			}
			var obj struct {
				Message string `json:"message"`
				Type    string `json:"type"`
				Code    any    `json:"code"`
			}
			if json.Unmarshal(shape.Error, &obj) == nil && obj.Message != "" {
				return obj.Message
			}
		}
		if shape.Message != "" {
			return shape.Message
		}
		if len(shape.Detail) > 0 {
			var s string
			if json.Unmarshal(shape.Detail, &s) == nil {
				return s
			}
			return truncate(string(shape.Detail), 500)
		}
	}
	return truncate(string(body), 500)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// cut on a rune boundary
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
