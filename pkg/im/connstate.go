package im

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"
)

// Connection states of an adapter (ConnStatus.State). They are the strings pkg/presence
// publishes, so status and the console show the same words as /readyz.
const (
	ConnConnecting   = "connecting"   // holds the connection lease, not connected yet (Err: the last failure)
	ConnConnected    = "connected"    // the platform answered (the adapter called Connected)
	ConnDisconnected = "disconnected" // the last attempt failed; waiting to try again (Err says why)
	ConnStandby      = "standby"      // another replica holds the connection
	ConnWebhook      = "webhook"      // the platform calls us; nothing to hold
)

// ConnStatus is one adapter connection's state.
type ConnStatus struct {
	Platform, Bot string
	// Part is "inbound" for ingest's connection to the platform.
	Part  string
	State string
	Err   string    // the last failure, while connecting or disconnected
	Since time.Time // when State last changed
}

// Ready reports whether the connection does its job here or elsewhere: connected, webhook or
// standby.
func (s ConnStatus) Ready() bool {
	return s.State == ConnConnected || s.State == ConnWebhook || s.State == ConnStandby
}

// ConnStates tracks the connection state of a process's adapters, for /readyz and presence.
// Safe for concurrent use; the zero value is not usable, use NewConnStates.
type ConnStates struct {
	mu       sync.Mutex
	m        map[string]*ConnTracker
	onChange func()
}

// NewConnStates returns an empty tracker set; onChange (may be nil) is called, outside any
// lock, after a state changes.
func NewConnStates(onChange func()) *ConnStates {
	return &ConnStates{m: map[string]*ConnTracker{}, onChange: onChange}
}

// Track returns the tracker of one adapter connection (created in state connecting).
func (c *ConnStates) Track(platform, bot, part string) *ConnTracker {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := platform + "/" + bot + "/" + part
	if t := c.m[k]; t != nil {
		return t
	}
	t := &ConnTracker{set: c, st: ConnStatus{Platform: platform, Bot: bot, Part: part, State: ConnConnecting, Since: time.Now()}}
	c.m[k] = t
	return t
}

// Snapshot returns every tracked connection, sorted by platform, bot and part.
func (c *ConnStates) Snapshot() []ConnStatus {
	c.mu.Lock()
	out := make([]ConnStatus, 0, len(c.m))
	for _, t := range c.m {
		out = append(out, t.Status())
	}
	c.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Platform != b.Platform {
			return a.Platform < b.Platform
		}
		if a.Bot != b.Bot {
			return a.Bot < b.Bot
		}
		return a.Part < b.Part
	})
	return out
}

// ConnTracker is the state of one adapter connection.
type ConnTracker struct {
	set *ConnStates
	mu  sync.Mutex
	st  ConnStatus
}

// Status returns the current state.
func (t *ConnTracker) Status() ConnStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.st
}

// Set changes the state (err may be nil); a change calls the set's onChange.
func (t *ConnTracker) Set(state string, err error) {
	t.mu.Lock()
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	changed := t.st.State != state || t.st.Err != msg
	if t.st.State != state {
		t.st.Since = time.Now()
	}
	t.st.State, t.st.Err = state, msg
	t.mu.Unlock()
	if changed && t.set != nil && t.set.onChange != nil {
		t.set.onChange()
	}
}

type trackerKey struct{}

type runState struct {
	t    *ConnTracker
	log  *slog.Logger
	once sync.Once
}

// WithConnTracker returns ctx carrying t: an adapter's Run given this ctx reports its
// connection's state to t (Hold sets standby, connecting and disconnected; the adapter calls
// Connected once the platform answered).
func WithConnTracker(ctx context.Context, t *ConnTracker) context.Context {
	if t == nil {
		return ctx
	}
	return context.WithValue(ctx, trackerKey{}, &runState{t: t})
}

// Connected is what an adapter calls, with the ctx Hold gave its run function, once the
// platform has answered (a gateway READY, a first poll or sync, a WebSocket handshake): it
// logs "im: connected" (once per connection) and marks the connection connected for /readyz
// and status. Calling it without a tracker in ctx only logs.
func Connected(ctx context.Context, log *slog.Logger) {
	rs, _ := ctx.Value(trackerKey{}).(*runState)
	if rs == nil {
		if log != nil {
			log.Info("im: connected")
		}
		return
	}
	rs.once.Do(func() {
		if log != nil {
			log.Info("im: connected")
		}
		rs.t.Set(ConnConnected, nil)
	})
}

// connRun is the per-run state Hold hands to run: a fresh once, so each new connection logs
// and reports Connected again.
func connRun(ctx context.Context) (context.Context, *ConnTracker) {
	rs, _ := ctx.Value(trackerKey{}).(*runState)
	if rs == nil {
		return ctx, nil
	}
	return context.WithValue(ctx, trackerKey{}, &runState{t: rs.t}), rs.t
}

// setState reports s to the tracker in ctx, if any.
func setState(ctx context.Context, s string, err error) {
	if rs, _ := ctx.Value(trackerKey{}).(*runState); rs != nil {
		rs.t.Set(s, err)
	}
}
