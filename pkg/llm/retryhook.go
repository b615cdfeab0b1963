package llm

import (
	"context"
	"time"
)

// Why a model request was retried (Retry.Reason): a bounded set, fit for a metric label.
const (
	RetryRateLimited = "rate_limited" // HTTP 429
	RetryServerError = "server_error" // HTTP 5xx
	RetryTransport   = "transport"    // no response: connection refused, reset, timeout
)

// Retry describes one retry of a model request by an HTTP provider: the attempt that failed
// and the wait before the next one.
type Retry struct {
	// Attempt is the number of the attempt that failed (1 for the first).
	Attempt int
	// StatusCode is that attempt's HTTP status (0 for a transport error).
	StatusCode int
	// Reason is RetryRateLimited, RetryServerError or RetryTransport.
	Reason string
	// Wait is how long the provider waits before the next attempt.
	Wait time.Duration
}

// RetryReason returns the Retry.Reason of an attempt that ended with status (0: no response).
func RetryReason(status int) string {
	switch {
	case status == 429:
		return RetryRateLimited
	case status >= 500:
		return RetryServerError
	}
	return RetryTransport
}

type retryHookKey struct{}

// WithRetryHook returns ctx with hook, which the HTTP providers call (on the request's
// goroutine) before each wait for another attempt of a request made with ctx. It is how a
// caller counts retries without this package knowing of metrics. A hook already in ctx is
// replaced.
func WithRetryHook(ctx context.Context, hook func(Retry)) context.Context {
	return context.WithValue(ctx, retryHookKey{}, hook)
}

// RetryHook returns the hook WithRetryHook put in ctx, or nil.
func RetryHook(ctx context.Context) func(Retry) {
	h, _ := ctx.Value(retryHookKey{}).(func(Retry))
	return h
}
