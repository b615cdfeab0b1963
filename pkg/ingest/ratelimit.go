package ingest

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// keyedLimiter is one token bucket per key, at most max keys: when full, buckets that have
// refilled (an idle key costs nothing to forget: a new bucket starts full as well) are evicted,
// and when none has, a new key is refused. So a flood of distinct senders cannot grow memory.
// Safe for concurrent use.
type keyedLimiter struct {
	mu      sync.Mutex
	limit   rate.Limit
	burst   int
	max     int
	buckets map[string]*rate.Limiter
}

// newKeyedLimiter returns nil (no limit) when perSecond < 0.
func newKeyedLimiter(perSecond float64, burst, max int) *keyedLimiter {
	if perSecond < 0 {
		return nil
	}
	return &keyedLimiter{limit: rate.Limit(perSecond), burst: max1(burst), max: max1(max), buckets: map[string]*rate.Limiter{}}
}

func max1(n int) int {
	if n < 1 {
		return 1
	}
	return n
}

// allow takes a token for key at now, or reports how long to wait before retrying.
func (l *keyedLimiter) allow(key string, now time.Time) (time.Duration, bool) {
	_, d, ok := l.take(key, now)
	return d, ok
}

// take is allow that also returns a refund: calling it puts the token back (when a later check
// refuses the request, it should not have cost this key anything). refund is never nil.
func (l *keyedLimiter) take(key string, now time.Time) (refund func(), wait time.Duration, ok bool) {
	noop := func() {}
	if l == nil {
		return noop, 0, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[key]
	if !ok {
		if len(l.buckets) >= l.max {
			l.evictIdle(now)
		}
		if len(l.buckets) >= l.max {
			return noop, time.Second, false
		}
		b = rate.NewLimiter(l.limit, l.burst)
		l.buckets[key] = b
	}
	r := b.ReserveN(now, 1)
	if !r.OK() {
		return noop, time.Second, false
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return noop, d, false
	}
	return func() { r.CancelAt(now) }, 0, true
}

func (l *keyedLimiter) evictIdle(now time.Time) {
	for k, b := range l.buckets {
		if b.TokensAt(now) >= float64(l.burst) {
			delete(l.buckets, k)
		}
	}
}

// size is the number of buckets kept (tests).
func (l *keyedLimiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// retryAfter is d in whole seconds for a Retry-After header, at least 1.
func retryAfter(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}
