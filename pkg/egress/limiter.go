package egress

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// RateLimit is a token bucket: PerSecond sends per second on average, bursts of up to Burst.
// PerSecond <= 0 means unlimited. Burst <= 0 means max(1, ceil(PerSecond)).
type RateLimit struct {
	PerSecond float64 `json:"perSecond" yaml:"perSecond"`
	Burst     int     `json:"burst" yaml:"burst"`
}

// limiter throttles sends per platform: one token bucket per platform (watermill's
// middleware.Throttle is one global rate, but platforms have their own limits), plus a pause
// per platform when a platform answers 429 with Retry-After, so every sender to that platform
// backs off together instead of each part hammering it on its own schedule.
type limiter struct {
	mu       sync.Mutex
	limits   map[string]RateLimit // "*" is the default for platforms not listed
	byName   map[string]*platformLimit
	maxPause time.Duration
}

type platformLimit struct {
	bucket *rate.Limiter // nil = unlimited

	mu          sync.Mutex
	pausedUntil time.Time
}

func newLimiter(limits map[string]RateLimit, maxPause time.Duration) *limiter {
	return &limiter{limits: limits, byName: map[string]*platformLimit{}, maxPause: maxPause}
}

func (l *limiter) get(platform string) *platformLimit {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.byName[platform]
	if ok {
		return p
	}
	rl, ok := l.limits[platform]
	if !ok {
		rl = l.limits["*"]
	}
	p = &platformLimit{}
	if rl.PerSecond > 0 {
		burst := rl.Burst
		if burst <= 0 {
			burst = int(rl.PerSecond + 0.999)
			if burst < 1 {
				burst = 1
			}
		}
		p.bucket = rate.NewLimiter(rate.Limit(rl.PerSecond), burst)
	}
	l.byName[platform] = p
	return p
}

// Wait blocks until platform may be sent to: past any Retry-After pause and with a token.
func (l *limiter) Wait(ctx context.Context, platform string) error {
	p := l.get(platform)
	for {
		p.mu.Lock()
		until := p.pausedUntil
		p.mu.Unlock()
		d := time.Until(until)
		if d <= 0 {
			break
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	if p.bucket == nil {
		return nil
	}
	return p.bucket.Wait(ctx)
}

// Pause holds every send to platform for d (capped at maxPause). A later, longer pause wins.
func (l *limiter) Pause(platform string, d time.Duration) {
	if d <= 0 {
		return
	}
	if l.maxPause > 0 && d > l.maxPause {
		d = l.maxPause
	}
	p := l.get(platform)
	until := time.Now().Add(d)
	p.mu.Lock()
	if until.After(p.pausedUntil) {
		p.pausedUntil = until
	}
	p.mu.Unlock()
}
