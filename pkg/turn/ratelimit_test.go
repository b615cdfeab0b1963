package turn

import (
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm/providers/faux"
)

// ai.agent.rateLimit: a user's third model call in a minute with perMinute 2 is refused and
// the reply says when to come back; a master in another chat is not limited.
func TestRateLimitPerUser(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.RateLimit = RateLimit{PerMinute: 2} }, faux.WithResponder(faux.Echo))
	h.worker("w1")
	for i, text := range []string{"one", "two", "three"} {
		h.send(sk, "m"+text, text)
		h.replies(sk, i+1)
	}
	got := h.replies(sk, 3)
	if !strings.Contains(got[0], "one") || !strings.Contains(got[1], "two") {
		t.Fatalf("first two turns: %q", got)
	}
	if !strings.HasPrefix(got[2], "⏳ rate limit reached: 2 model calls per minute; try again in ") {
		t.Errorf("third turn: %q", got[2])
	}
	boss := events.SessionKey{Platform: "webhook", Bot: "b1", Scope: "private", Scene: "boss"}
	for i := range 3 {
		h.send(boss, "b"+string(rune('0'+i)), "hi", events.RoleMaster)
		h.replies(boss, i+1)
	}
	for _, r := range h.replies(boss, 3) {
		if strings.Contains(r, "rate limit") {
			t.Errorf("master limited: %q", r)
		}
	}
}

// The windows are fixed and counted per user: calls are refused until the window ends, then
// counted again; the hour limit holds across minutes.
func TestCallLimiterWindows(t *testing.T) {
	now := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	l := newCallLimiter(RateLimit{PerMinute: 2, PerHour: 3})
	l.now = func() time.Time { return now }
	steps := []struct {
		advance time.Duration
		user    string
		ok      bool
		want    string // part of the error
	}{
		{0, "a", true, ""},
		{time.Second, "a", true, ""},
		{time.Second, "a", false, "2 model calls per minute; try again in 58s"},
		{0, "b", true, ""}, // another user has a budget of its own
		{time.Minute, "a", true, ""},
		{time.Second, "a", false, "3 model calls per hour"},
		{time.Hour, "a", true, ""},
	}
	for i, s := range steps {
		now = now.Add(s.advance)
		err := l.take(s.user)
		if (err == nil) != s.ok || (err != nil && !strings.Contains(err.Error(), s.want)) {
			t.Errorf("step %d (%s): err %v, want ok=%v %q", i, s.user, err, s.ok, s.want)
		}
	}
}
