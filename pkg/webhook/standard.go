package webhook

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Standard Webhooks (the standard-webhooks specification) headers: the signature covers
// "<webhook-id>.<webhook-timestamp>.<body>" with HMAC-SHA256, "v1,<base64>" (several
// space-separated signatures are allowed, for key rotation).
const (
	HeaderID        = standardwebhooks.HeaderWebhookID
	HeaderTimestamp = standardwebhooks.HeaderWebhookTimestamp
	HeaderSignature = standardwebhooks.HeaderWebhookSignature
)

// DefaultTolerance is how far a signed timestamp may be from the receiver's clock (either way),
// as the Standard Webhooks libraries default to.
const DefaultTolerance = 5 * time.Minute

// ErrStale is returned for a timestamp outside the tolerance window (too old: a replay; too
// far ahead: a clock the sender must fix). The sender must not retry the same request.
var ErrStale = errors.New("timestamp outside the accepted window")

// IsStandard reports whether h carries a Standard Webhooks signature (rather than
// X-Agentbus-Signature).
func IsStandard(h http.Header) bool {
	return h.Get(HeaderSignature) != "" || h.Get(HeaderID) != "" || h.Get(HeaderTimestamp) != ""
}

// standardKey is the HMAC key of secret: a "whsec_<base64>" secret is its decoded bytes (as the
// specification hands them out), any other secret its own bytes, so one bot secret serves both
// schemes.
func standardKey(secret string) ([]byte, error) {
	if b64, ok := strings.CutPrefix(secret, "whsec_"); ok {
		key, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, fmt.Errorf("webhook: whsec_ secret is not base64: %w", err)
		}
		return key, nil
	}
	return []byte(secret), nil
}

// VerifyStandard checks a Standard Webhooks signature over body and that its timestamp is
// within tolerance of now (tolerance <= 0 means DefaultTolerance). It returns the webhook id
// and timestamp. Errors wrap ErrBadSignature or ErrStale.
func VerifyStandard(secret string, body []byte, h http.Header, now time.Time, tolerance time.Duration) (string, time.Time, error) {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	key, err := standardKey(secret)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("%w: %w", ErrBadSignature, err)
	}
	wh, err := standardwebhooks.NewWebhookRaw(key)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("%w: %w", ErrBadSignature, err)
	}
	// The library's own timestamp check has a fixed window; the signature is checked by the
	// library and the window here, so it can be configured.
	if err := wh.VerifyIgnoringTimestamp(body, h); err != nil {
		return "", time.Time{}, fmt.Errorf("%w: %w", ErrBadSignature, err)
	}
	sec, err := strconv.ParseInt(strings.TrimSpace(h.Get(HeaderTimestamp)), 10, 64)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("%w: %s is not Unix seconds", ErrBadSignature, HeaderTimestamp)
	}
	if sec <= 0 || sec > maxUnixSeconds {
		return "", time.Time{}, fmt.Errorf("%w: %s %d is not Unix seconds (milliseconds?)", ErrStale, HeaderTimestamp, sec)
	}
	ts := time.Unix(sec, 0)
	if err := CheckTime(ts, now, tolerance); err != nil {
		return "", time.Time{}, err
	}
	return h.Get(HeaderID), ts, nil
}

// CheckTime returns an error wrapping ErrStale unless ts is within tolerance of now, either
// way. The bounds are compared as times, not as the difference now-ts: a time.Duration holds
// only ±292 years, so the difference to a timestamp such as Unix 1e18 saturates and its
// negation overflows, which once let any far-future timestamp through (and kept its request
// replayable for good).
func CheckTime(ts, now time.Time, tolerance time.Duration) error {
	switch {
	case ts.Before(now.Add(-tolerance)):
		return fmt.Errorf("%w: %s old, the limit is %s", ErrStale, roundAge(now, ts), tolerance)
	case ts.After(now.Add(tolerance)):
		return fmt.Errorf("%w: %s in the future, the limit is %s", ErrStale, roundAge(ts, now), tolerance)
	}
	return nil
}

// roundAge is later-earlier for a message, "more than 100 years" where the difference would
// not fit a time.Duration.
func roundAge(later, earlier time.Time) string {
	if later.After(earlier.AddDate(100, 0, 0)) {
		return "more than 100 years"
	}
	return later.Sub(earlier).Round(time.Second).String()
}

// maxUnixSeconds bounds a signed timestamp in seconds: larger values (a timestamp in
// milliseconds or microseconds by mistake, or made up to overflow) are refused as what they
// are before any arithmetic. 1e11 seconds is the year 5138.
const maxUnixSeconds = 1e11

// SignStandard returns the Standard Webhooks headers for body under secret (for clients and
// tests).
func SignStandard(secret, id string, ts time.Time, body []byte) (http.Header, error) {
	key, err := standardKey(secret)
	if err != nil {
		return nil, err
	}
	wh, err := standardwebhooks.NewWebhookRaw(key)
	if err != nil {
		return nil, err
	}
	sig, err := wh.Sign(id, ts, body)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, sig)
	return h, nil
}
