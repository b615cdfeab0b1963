package im_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

func TestChunks(t *testing.T) {
	long := strings.Repeat("word ", 50) // 250 chars
	img := events.ImageSeg("media://x")
	tests := []struct {
		name    string
		content events.Segments
		limit   int
		parts   int
		maxLen  int
	}{
		{"fits", events.Segments{events.TextSeg("hello")}, 10, 1, 5},
		{"no limit", events.Segments{events.TextSeg(long)}, 0, 1, 250},
		{"cut at words", events.Segments{events.TextSeg(long)}, 100, 3, 100},
		{"image stays with its text", events.Segments{events.TextSeg(long), img}, 100, 3, 100},
		{"cjk counted in runes", events.Segments{events.TextSeg(strings.Repeat("你好。", 40))}, 50, 3, 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := im.Chunks(tt.content, tt.limit)
			if len(got) != tt.parts {
				t.Fatalf("got %d parts, want %d: %v", len(got), tt.parts, got)
			}
			var all strings.Builder
			media := 0
			for _, p := range got {
				n := 0
				for _, s := range p {
					if s.Type == events.SegText {
						n += len([]rune(s.Str("text")))
						all.WriteString(s.Str("text"))
					} else {
						media++
					}
				}
				if n > tt.maxLen {
					t.Errorf("part of %d chars over %d", n, tt.maxLen)
				}
			}
			if want := strings.Join(strings.Fields(tt.content.PlainText()), ""); strings.Join(strings.Fields(all.String()), "") != want {
				t.Errorf("text changed by chunking")
			}
			if want := len(tt.content) - 1; tt.name == "image stays with its text" && media != 1 && want > 0 {
				t.Errorf("image lost: %v", got)
			}
		})
	}
}

func TestErrorClassification(t *testing.T) {
	resp := func(code int, ra string) *http.Response {
		h := http.Header{}
		if ra != "" {
			h.Set("Retry-After", ra)
		}
		return &http.Response{StatusCode: code, Header: h}
	}
	tests := []struct {
		name      string
		err       error
		permanent bool
		class     error // the class errors.Is matches: ErrRejected, ErrUnknownBot or nil
		retry     time.Duration
	}{
		{"429 with Retry-After", im.HTTPError("p", "send", resp(429, "3"), nil), false, nil, 3 * time.Second},
		{"400", im.HTTPError("p", "send", resp(400, ""), []byte("bad")), true, im.ErrRejected, 0},
		{"503", im.HTTPError("p", "send", resp(503, ""), nil), false, nil, 0},
		{"408", im.HTTPError("p", "send", resp(408, ""), nil), false, nil, 0},
		{"permanent wrapper", im.Permanent(errors.New("x")), true, im.ErrRejected, 0},
		{"wrapped twice", errors.Join(errors.New("ctx"), im.Permanentf("p", "a", "no")), true, im.ErrRejected, 0},
		// An adapter's unknown bot stays an unknown bot when marked permanent (egress
		// dead-letters it as "unknown_bot", not "rejected").
		{"unknown bot, marked permanent", im.Permanent(fmt.Errorf("%w: bot %q", im.ErrUnknownBot, "ghost")), true, im.ErrUnknownBot, 0},
		{"plain", errors.New("x"), false, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := im.IsPermanent(tt.err); got != tt.permanent {
				t.Errorf("permanent = %v, want %v", got, tt.permanent)
			}
			for _, class := range []error{im.ErrRejected, im.ErrUnknownBot} {
				if got := errors.Is(tt.err, class); got != (class == tt.class) {
					t.Errorf("errors.Is(err, %v) = %v, want %v", class, got, class == tt.class)
				}
			}
			if got := im.RetryAfterOf(fmt.Errorf("send: %w", tt.err)); got != tt.retry {
				t.Errorf("retry after = %v, want %v", got, tt.retry)
			}
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"3", 3 * time.Second},
		{"-1", 0},
		{"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
	}
	for _, tc := range tests {
		if got := im.ParseRetryAfter(tc.in, now); got != tc.want {
			t.Errorf("ParseRetryAfter(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestHoldTakeover: three replicas compete for one connection; exactly one runs it at any
// time, and when the holder dies without releasing (its bus connection is cut), another one
// runs it within TTL + TTL/3 (plus generous slack for a loaded machine).
func TestHoldTakeover(t *testing.T) {
	srv := natstest.New(t, natstest.WithMemoryStorage())
	const ttl = 2 * time.Second
	var running atomic.Int32
	var maxRunning atomic.Int32
	var mu sync.Mutex
	var holders []string
	type replica struct {
		name   string
		cancel context.CancelFunc
		done   chan struct{}
		close  func()
	}
	started := make(chan string, 16)
	start := func(name string) *replica {
		nc, js := srv.Connect(t)
		ctx, cancel := context.WithCancel(context.Background())
		r := &replica{name: name, cancel: cancel, done: make(chan struct{}), close: nc.Close}
		go func() {
			defer close(r.done)
			_ = im.Hold(ctx, im.HoldOptions{JS: js, Key: im.ConnKey("test", "bot1"), Owner: name, TTL: ttl}, func(ctx context.Context) error {
				n := running.Add(1)
				for {
					m := maxRunning.Load()
					if n <= m || maxRunning.CompareAndSwap(m, n) {
						break
					}
				}
				mu.Lock()
				holders = append(holders, name)
				mu.Unlock()
				started <- name
				<-ctx.Done()
				running.Add(-1)
				return ctx.Err()
			})
		}()
		t.Cleanup(func() { cancel(); <-r.done })
		return r
	}
	rs := map[string]*replica{}
	for _, n := range []string{"a", "b", "c"} {
		rs[n] = start(n)
	}
	var first string
	select {
	case first = <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("nobody took the connection")
	}
	// Kill the holder: its NATS connection goes, so it can neither renew nor release.
	killed := time.Now()
	rs[first].close()
	var second string
	select {
	case second = <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("nobody took the connection over")
	}
	t.Logf("holder %s killed; %s took over after %v (ttl %v)", first, second, time.Since(killed).Round(time.Millisecond), ttl)
	if second == first {
		t.Fatalf("the killed replica %s took the connection again", first)
	}
	// A clean stop releases at once: the third replica takes over without waiting for the TTL.
	rs[second].cancel()
	<-rs[second].done
	select {
	case third := <-started:
		if third == second || third == first {
			t.Fatalf("connection went to %s", third)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("nobody took the connection after a clean stop")
	}
	if m := maxRunning.Load(); m > 1 {
		t.Fatalf("%d replicas ran the connection at the same time", m)
	}
	mu.Lock()
	t.Logf("holders in order: %v", holders)
	mu.Unlock()
}
