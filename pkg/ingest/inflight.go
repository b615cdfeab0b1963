package ingest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"
)

// requestOverhead is what one request in flight counts against im.webhook.maxInFlightBytes
// besides its body: its goroutine, headers, the parsed message and the events built from it.
const requestOverhead = 16 << 10

// firstRead is what a request without a Content-Length reserves before its body is read; the
// reservation grows (doubling) as the body does.
const firstRead = 64 << 10

// inFlight bounds the webhook requests being served: how many (maxN) and how many bytes
// (maxBytes, each request counted as its body plus requestOverhead), so that hundreds of small
// concurrent requests are served while a flood of large bodies cannot take more memory than
// maxBytes. Safe for concurrent use.
type inFlight struct {
	mu              sync.Mutex
	n, maxN         int
	bytes, maxBytes int64
}

func newInFlight(maxN int, maxBytes int64) *inFlight {
	return &inFlight{maxN: max1(maxN), maxBytes: max(maxBytes, 1)}
}

// acquire admits a new request that needs bytes, or reports that there is no room.
func (f *inFlight) acquire(bytes int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n >= f.maxN || f.bytes+bytes > f.maxBytes {
		return false
	}
	f.n++
	f.bytes += bytes
	return true
}

// grow adds bytes to an admitted request's reservation, or reports that there is no room.
func (f *inFlight) grow(bytes int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.bytes+bytes > f.maxBytes {
		return false
	}
	f.bytes += bytes
	return true
}

// release ends an admitted request that reserved bytes in all.
func (f *inFlight) release(bytes int64) {
	f.mu.Lock()
	f.n--
	f.bytes -= bytes
	f.mu.Unlock()
}

// load is the requests and bytes in flight now (tests, logs).
func (f *inFlight) load() (int, int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n, f.bytes
}

// errNoRoom: a body grew past what the bytes in flight leave room for (answered 503).
var errNoRoom = errors.New("ingest: no room for the body among the requests in flight")

// errBodyTooLarge: a body over maxBodyBytes (answered 413).
var errBodyTooLarge = errors.New("ingest: body over maxBodyBytes")

// readBody reads a request body of at most limit bytes, whose first reserved bytes (minus
// requestOverhead) are already counted in f; a body that grows past them reserves more
// (doubling) and fails with errNoRoom when f has none. It returns the body and the total
// reservation, which the caller releases.
func readBody(body io.Reader, limit, reserved int64, f *inFlight) ([]byte, int64, error) {
	buf := make([]byte, 0, reserved-requestOverhead)
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) > limit {
				return nil, reserved, errBodyTooLarge
			}
			more := min(int64(cap(buf)), limit+1-int64(cap(buf)))
			more = max(more, 512)
			if !f.grow(more) {
				return nil, reserved, errNoRoom
			}
			reserved += more
			buf = append(buf, make([]byte, more)...)[:len(buf)]
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			if int64(len(buf)) > limit {
				return nil, reserved, errBodyTooLarge
			}
			return buf, reserved, nil
		}
		if err != nil {
			return nil, reserved, err
		}
	}
}

// logThrottle lets one log line per key through per interval and counts the ones it holds
// back, so that a flood of refusals costs one line a second per reason (saying how many were
// suppressed) instead of one per request. Keys are reasons and configured bot ids: bounded.
// Safe for concurrent use.
type logThrottle struct {
	mu         sync.Mutex
	every      time.Duration
	last       map[string]time.Time
	suppressed map[string]int
}

func newLogThrottle(every time.Duration) *logThrottle {
	return &logThrottle{every: every, last: map[string]time.Time{}, suppressed: map[string]int{}}
}

// allow reports whether a line for key may be logged at now, and how many lines of key were
// held back since the last one that was.
func (l *logThrottle) allow(key string, now time.Time) (suppressed int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if last, seen := l.last[key]; seen && now.Sub(last) < l.every {
		l.suppressed[key]++
		return 0, false
	}
	l.last[key] = now
	suppressed = l.suppressed[key]
	delete(l.suppressed, key)
	return suppressed, true
}

// logRefusal logs one refused or failed webhook request at level, at most once a second per
// reason and bot, with the count of the lines held back since ("suppressed").
func (h *WebhookHandler) logRefusal(level slog.Level, reason, bot string, attrs ...any) {
	suppressed, ok := h.logs.allow(reason+"\x00"+bot, h.now())
	if !ok {
		return
	}
	args := append([]any{"bot", bot, "platform", PlatformWebhook}, attrs...)
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	h.log.Log(context.Background(), level, reason, args...)
}
