package egress

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/agentbus/agentbus/pkg/events"
)

// Sentinels. Match with errors.Is. A Sender reports a permanent failure by returning an error
// that wraps ErrRejected, ErrUnknownBot or ErrNoSender; every other error is transient and is
// retried with backoff.
var (
	// ErrRejected: the platform refused the message for good (an HTTP 4xx other than 408/429).
	// Retrying would give the same answer, so the part is dead-lettered with reason "rejected".
	ErrRejected = errors.New("egress: platform rejected the message")
	// ErrUnknownBot: the outbound names a bot this egress has no configuration for (no such
	// webhook bot, or the bot has no callback URL). Dead-lettered with reason "unknown_bot".
	ErrUnknownBot = errors.New("egress: unknown bot")
	// ErrNoSender: no Sender is registered for the outbound's platform. Dead-lettered with
	// reason "no_sender".
	ErrNoSender = errors.New("egress: no sender for platform")
)

// Dead-letter reasons egress uses (the <reason> of dlq.egress.<reason>). The DeadLetter body
// carries the full error text, the original bytes and headers.
const (
	ReasonInvalid       = events.DLQInvalid       // not a valid im.out event (bad JSON, missing field)
	ReasonRejected      = "rejected"              // the platform answered with a permanent error
	ReasonUnknownBot    = "unknown_bot"           // no configuration for the bot
	ReasonNoSender      = "no_sender"             // no Sender for the platform
	ReasonPoison        = events.DLQPoison        // the handler panicked on this message
	ReasonMaxDeliveries = events.DLQMaxDeliveries // transient failures on every one of MaxDeliveries deliveries
)

// StatusError is a non-2xx answer of a platform's HTTP API. It matches ErrRejected (errors.Is)
// when the status is permanent: any 4xx except 408 Request Timeout and 429 Too Many Requests.
// 408, 429 and 5xx are transient; RetryAfter holds the platform's Retry-After when it sent one.
type StatusError struct {
	Platform   string
	StatusCode int
	// RetryAfter is the parsed Retry-After header (0 when absent or unparsable).
	RetryAfter time.Duration
	// Body is the start of the response body (at most 512 bytes), for the dead-letter record.
	Body string
}

func (e *StatusError) Error() string {
	s := fmt.Sprintf("%s: HTTP %d %s", e.Platform, e.StatusCode, http.StatusText(e.StatusCode))
	if e.Body != "" {
		s += ": " + e.Body
	}
	return s
}

// Permanent reports whether retrying cannot help.
func (e *StatusError) Permanent() bool {
	return e.StatusCode >= 400 && e.StatusCode < 500 &&
		e.StatusCode != http.StatusRequestTimeout && e.StatusCode != http.StatusTooManyRequests
}

// Is makes errors.Is(err, ErrRejected) true for permanent statuses.
func (e *StatusError) Is(target error) bool { return target == ErrRejected && e.Permanent() }

// RetryAfterDelay returns the platform's Retry-After (0 = none).
func (e *StatusError) RetryAfterDelay() time.Duration { return e.RetryAfter }

// retryAfterer is implemented by errors that carry a platform's requested delay.
type retryAfterer interface{ RetryAfterDelay() time.Duration }

// retryAfterOf returns the delay an error asks for, if any.
func retryAfterOf(err error) time.Duration {
	var ra retryAfterer
	if errors.As(err, &ra) {
		return ra.RetryAfterDelay()
	}
	return 0
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil {
		if secs < 0 {
			return 0
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// permanentError marks an error the handler found before sending (bad event, no sender) as
// permanent, with its dead-letter reason.
type permanentError struct {
	reason string
	err    error
}

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

func permanent(reason string, err error) error { return &permanentError{reason: reason, err: err} }

// classify says whether err is permanent and, if so, the dead-letter reason.
func classify(err error) (reason string, isPermanent bool) {
	var pe *permanentError
	var panicErr middleware.RecoveredPanicError
	switch {
	case err == nil:
		return "", false
	case errors.As(err, &pe):
		return pe.reason, true
	case errors.As(err, &panicErr):
		return ReasonPoison, true
	case errors.Is(err, events.ErrInvalid):
		return ReasonInvalid, true
	case errors.Is(err, ErrNoSender):
		return ReasonNoSender, true
	case errors.Is(err, ErrUnknownBot):
		return ReasonUnknownBot, true
	case errors.Is(err, ErrRejected), selfPermanent(err):
		return ReasonRejected, true
	}
	return "", false
}

// selfPermanent reports whether err says so itself: the native IM adapters (pkg/im/...) cannot
// import egress to wrap ErrRejected, so their errors answer Permanent() instead.
func selfPermanent(err error) bool {
	var p interface{ Permanent() bool }
	return errors.As(err, &p) && p.Permanent()
}
