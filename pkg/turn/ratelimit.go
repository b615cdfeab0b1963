package turn

import (
	"context"
	"fmt"
	"iter"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/loop"
)

// rateLimitReply starts the error of a model call refused by ai.agent.rateLimit; the turn's
// reply is that error as it is (replyText), so the user learns when to come back.
const rateLimitReply = "rate limit reached"

// maxLimitedUsers bounds the limiter's table; past it, users whose windows all ended are
// dropped first, then the table is cleared (a user then starts afresh: the limit is a cost
// guard, not an accounting).
const maxLimitedUsers = 100_000

// callLimiter counts the model calls each user caused in fixed windows (minute, hour, day)
// and refuses a call that would go over ai.agent.rateLimit. Counts live in this process: each
// turn worker limits the sessions it owns, so with N turn workers a user whose chats are owned
// by different workers may get up to N times the limit (docs/configuration.md).
type callLimiter struct {
	cfg RateLimit
	now func() time.Time

	mu    sync.Mutex
	users map[string]*userCalls
}

type userCalls struct {
	win [3]window // minute, hour, day
}

type window struct {
	start time.Time
	n     int
}

var limitSpans = [3]time.Duration{time.Minute, time.Hour, 24 * time.Hour}
var limitNames = [3]string{"minute", "hour", "day"}

func newCallLimiter(cfg RateLimit) *callLimiter {
	return &callLimiter{cfg: cfg, now: time.Now, users: map[string]*userCalls{}}
}

func (l *callLimiter) limits() [3]int {
	return [3]int{l.cfg.PerMinute, l.cfg.PerHour, l.cfg.PerDay}
}

// take counts one model call for user, or returns an error starting with rateLimitReply that
// says which limit is reached and when its window ends.
func (l *callLimiter) take(user string) error {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	u := l.users[user]
	if u == nil {
		if len(l.users) >= maxLimitedUsers {
			l.sweep(now)
		}
		u = &userCalls{}
		l.users[user] = u
	}
	lim := l.limits()
	for i := range u.win {
		w := &u.win[i]
		if now.Sub(w.start) >= limitSpans[i] {
			w.start, w.n = now, 0
		}
		if lim[i] > 0 && w.n >= lim[i] {
			wait := w.start.Add(limitSpans[i]).Sub(now).Round(time.Second)
			return fmt.Errorf("%s: %d model calls per %s; try again in %s", rateLimitReply, lim[i], limitNames[i], max(wait, time.Second))
		}
	}
	for i := range u.win {
		u.win[i].n++
	}
	return nil
}

// sweep drops users whose every window has ended, or everyone when none has (mu held).
func (l *callLimiter) sweep(now time.Time) {
	for k, u := range l.users {
		if now.Sub(u.win[2].start) >= limitSpans[2] {
			delete(l.users, k)
		}
	}
	if len(l.users) >= maxLimitedUsers {
		clear(l.users)
	}
}

// rateLimited wraps stream so that each model call of the turn counts against the sender's
// ai.agent.rateLimit; a call over it ends as an error whose message starts with
// rateLimitReply. Masters are not limited unless rateLimit.includeMasters is set.
func (t *turnRun) rateLimited(stream loop.StreamFunc) loop.StreamFunc {
	w := t.a.w
	if w.limiter == nil || (t.msg.Sender.HasRole(events.RoleMaster) && !w.opts.RateLimit.IncludeMasters) {
		return stream
	}
	if stream == nil {
		stream = llm.Stream
	}
	user := t.msg.Platform + "/" + t.msg.Sender.ID
	return func(ctx context.Context, model *llm.Model, c *llm.Context, opts *llm.StreamOptions) iter.Seq[llm.Event] {
		if err := w.limiter.take(user); err != nil {
			w.log.Warn("model call refused by ai.agent.rateLimit", "user", user, "session", t.sidStr, "turn", t.id, "err", err)
			return func(yield func(llm.Event) bool) {
				yield(llm.ErrorEvent(model, nil, llm.StopReasonError, err))
			}
		}
		return stream(ctx, model, c, opts)
	}
}
