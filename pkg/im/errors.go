package im

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Sentinels. Match with errors.Is. They are the platform contract's error classes (see Sender):
// egress dead-letters ErrUnknownBot as "unknown_bot" and ErrRejected as "rejected", and retries
// the transient ones.
var (
	// ErrUnknownBot: an outbound or inbound names a bot that is not configured (or whose
	// configuration cannot be used, like a webhook bot without a callback URL). Permanent:
	// fix the configuration; egress dead-letters the part with reason "unknown_bot".
	ErrUnknownBot = errors.New("im: unknown bot")
	// ErrRejected: the platform refused the message for good (an HTTP 4xx other than 408/429,
	// a chat that does not exist). Retrying gives the same answer: egress dead-letters the
	// part with reason "rejected". Every permanent *Error and every error marked with
	// Permanent matches it.
	ErrRejected = errors.New("im: platform rejected the message")
	// ErrNotHeld: no ingest replica holds the bot's connection right now (an API call relayed
	// to the holder got no answer). Transient: egress retries.
	ErrNotHeld = errors.New("im: connection not held by any replica")
	// ErrClosed: the connection went away while a call was in flight. Transient.
	ErrClosed = errors.New("im: connection closed")
)

// Error is a platform's refusal of an API call. Egress reads it through two methods:
// Permanent() (dead-letter, never retry) and RetryAfterDelay() (pause the platform first).
type Error struct {
	Platform string
	Action   string // API method / action name
	// Status is the HTTP status (0 when the call did not go over HTTP).
	Status int
	// Code is the platform's own error code (OneBot retcode, Telegram error_code), 0 = none.
	Code int
	Msg  string
	// Perm marks the failure as permanent (bad request, forbidden, chat not found, ...).
	Perm bool
	// RetryAfter is how long the platform asked to wait (HTTP Retry-After, Telegram
	// parameters.retry_after); 0 = no request.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	s := e.Platform + ": " + e.Action + ":"
	if e.Status != 0 {
		s += " HTTP " + strconv.Itoa(e.Status)
	}
	if e.Code != 0 {
		s += " code " + strconv.Itoa(e.Code)
	}
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	return s
}

// Permanent reports whether retrying cannot help.
func (e *Error) Permanent() bool { return e.Perm }

// Is makes errors.Is(err, ErrRejected) true for a permanent refusal.
func (e *Error) Is(target error) bool { return target == ErrRejected && e.Perm }

// RetryAfterDelay is the platform's requested pause (0 = none).
func (e *Error) RetryAfterDelay() time.Duration { return e.RetryAfter }

// HTTPError classifies a non-2xx HTTP answer: 408, 429 and 5xx are transient, any other 4xx
// permanent; Retry-After (seconds or an HTTP date) is kept.
func HTTPError(platform, action string, resp *http.Response, body []byte) *Error {
	e := &Error{Platform: platform, Action: action, Status: resp.StatusCode, Msg: snippet(body, 300)}
	e.Perm = resp.StatusCode >= 400 && resp.StatusCode < 500 &&
		resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests
	e.RetryAfter = ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	return e
}

// ParseRetryAfter reads a Retry-After value: delay-seconds or an HTTP date.
func ParseRetryAfter(v string, now time.Time) time.Duration {
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

// Permanentf returns a permanent *Error (a part the platform can never take, a bad config).
func Permanentf(platform, action, format string, args ...any) *Error {
	return &Error{Platform: platform, Action: action, Msg: fmt.Sprintf(format, args...), Perm: true}
}

func snippet(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return string(b)
}

// permanent wraps an error so that egress dead-letters it instead of retrying.
type permanent struct{ err error }

func (p permanent) Error() string   { return p.err.Error() }
func (p permanent) Unwrap() error   { return p.err }
func (p permanent) Permanent() bool { return true }

// Is makes a permanent error match ErrRejected, unless it wraps a more telling class.
func (p permanent) Is(target error) bool {
	return target == ErrRejected && !errors.Is(p.err, ErrUnknownBot)
}

// Permanent marks err as permanent for egress (nil stays nil): it matches ErrRejected, or keeps
// matching ErrUnknownBot when it wraps that.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanent{err}
}

// IsPermanent reports whether err (or an error it wraps) says it is permanent.
func IsPermanent(err error) bool {
	var p interface{ Permanent() bool }
	return errors.As(err, &p) && p.Permanent()
}
