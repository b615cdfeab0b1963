package store

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
)

func newCtxLog(t testing.TB, bounds ContextBounds) (*ContextLog, *ContextLog) {
	t.Helper()
	js := startJS(t)
	a, err := NewContextLog(context.Background(), js, bounds)
	if err != nil {
		t.Fatal(err)
	}
	// A second repository on the same server: another worker with a cold pointer cache.
	b, err := NewContextLog(context.Background(), js, bounds)
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

func sid(scene string, epoch uint64) events.SessionID {
	return events.NewSessionID(testKey(scene), epoch)
}

func texts(ms []llm.Message) []string {
	out := make([]string, len(ms))
	for i := range ms {
		out[i] = ms[i].TextContent()
	}
	return out
}

func turn(ts int64, user, reply string) []llm.Message {
	a := llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.Text(reply)}, Timestamp: ts, StopReason: llm.StopReasonStop}
	return []llm.Message{llm.UserText(user, ts), a}
}

func TestAppendFenced(t *testing.T) {
	ctx := context.Background()
	a, b := newCtxLog(t, ContextBounds{})
	id := sid("fence", 1)
	s1, err := a.AppendMessages(ctx, id, 0, turn(1, "u1", "a1"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		log      *ContextLog
		expected uint64
		msgs     []llm.Message
		want     error
	}{
		{"empty-log expectation on a non-empty log", a, 0, turn(2, "x", "x"), ErrStaleWriter},
		{"expected sequence from the future", a, s1 + 100, turn(2, "x", "x"), ErrStaleWriter},
		{"cold cache, stale", b, s1 - 1, turn(2, "x", "x"), ErrFenced},
		{"invalid message (no role)", a, s1, []llm.Message{{Content: []llm.Content{llm.Text("x")}}}, ErrInvalid},
		{"no messages", a, s1, nil, ErrInvalid},
		{"too large", a, s1, []llm.Message{llm.UserText(strings.Repeat("x", 2<<20), 2)}, ErrTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.log.AppendMessages(ctx, id, tc.expected, tc.msgs)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	got, err := b.LoadContext(ctx, id)
	if err != nil || got.LastSeq != s1 || fmt.Sprint(texts(got.Messages)) != "[u1 a1]" {
		t.Fatalf("after rejected appends: %+v %v", got, err)
	}
	// The right expectation from a cold cache works.
	s2, err := b.AppendMessages(ctx, id, s1, turn(2, "u2", "a2"))
	if err != nil || s2 <= s1 {
		t.Fatalf("append at %d: %d %v", s1, s2, err)
	}
	// Epochs are separate logs: epoch 2 starts empty, and purging epoch 1 leaves epoch 2 alone.
	if got, _ := a.LoadContext(ctx, sid("fence", 2)); got.LastSeq != 0 || len(got.Messages) != 0 {
		t.Fatalf("epoch 2: %+v", got)
	}
	e2, err := a.AppendMessages(ctx, sid("fence", 2), 0, turn(3, "new", "epoch"))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Purge(ctx, id); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*ContextLog{a, b} {
		if got, _ := l.LoadContext(ctx, id); got.LastSeq != 0 || len(got.Messages) != 0 {
			t.Fatalf("after purge: %+v", got)
		}
		if got, _ := l.LoadContext(ctx, sid("fence", 2)); got.LastSeq != e2 || len(got.Messages) != 2 {
			t.Fatalf("epoch 2 after purging 1: %+v", got)
		}
	}
}

// TestAppendConcurrentOneWins: N writers append at the same expected sequence; exactly one
// batch lands, whole.
func TestAppendConcurrentOneWins(t *testing.T) {
	ctx := context.Background()
	a, _ := newCtxLog(t, ContextBounds{})
	id := sid("race", 1)
	base, err := a.AppendMessages(ctx, id, 0, turn(1, "u0", "a0"))
	if err != nil {
		t.Fatal(err)
	}
	const n = 12
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins, stale := 0, 0
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			batch := []llm.Message{llm.UserText(fmt.Sprint("w", i, "-1"), 2), llm.UserText(fmt.Sprint("w", i, "-2"), 2),
				llm.UserText(fmt.Sprint("w", i, "-3"), 2), llm.UserText(fmt.Sprint("w", i, "-4"), 2)}
			_, err := a.AppendMessages(ctx, id, base, batch)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, ErrStaleWriter):
				stale++
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 || stale != n-1 {
		t.Fatalf("wins %d stale %d", wins, stale)
	}
	got, _ := a.LoadContext(ctx, id)
	if len(got.Messages) != 6 {
		t.Fatalf("messages %q", texts(got.Messages))
	}
	w := strings.Split(got.Messages[2].TextContent(), "-")[0]
	for i, m := range got.Messages[2:] {
		if m.TextContent() != fmt.Sprint(w, "-", i+1) {
			t.Fatalf("batch interleaved: %q", texts(got.Messages))
		}
	}
}

func TestAppendMsgIDRetry(t *testing.T) {
	ctx := context.Background()
	a, _ := newCtxLog(t, ContextBounds{})
	id := sid("retry", 1)
	s1, err := a.AppendMessages(ctx, id, 0, turn(1, "u", "a"), WithMsgID("turn-1:commit"), WithTurn("turn-1"))
	if err != nil {
		t.Fatal(err)
	}
	// The same commit retried (e.g. after a lost ack) reports the original sequence.
	s1b, err := a.AppendMessages(ctx, id, 0, turn(1, "u", "a"), WithMsgID("turn-1:commit"))
	if err != nil || s1b != s1 {
		t.Fatalf("retry: %d %v (first %d)", s1b, err, s1)
	}
	if got, _ := a.LoadContext(ctx, id); len(got.Messages) != 2 {
		t.Fatalf("duplicate stored: %q", texts(got.Messages))
	}
}

func TestLoadContextBounds(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	hour := time.Hour.Milliseconds()
	// Ten turns, one per hour, ending now: u0/a0 ten hours ago ... u9/a9 one hour ago.
	write := func(t *testing.T, l *ContextLog, id events.SessionID) []uint64 {
		var seqs []uint64
		var last uint64
		for i := 0; i < 10; i++ {
			var err error
			last, err = l.AppendMessages(ctx, id, last, turn(now.UnixMilli()-int64(10-i)*hour, fmt.Sprint("u", i), fmt.Sprint("a", i)))
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, last)
		}
		return seqs
	}
	tests := []struct {
		name        string
		bounds      ContextBounds
		summaryAt   int // turn index whose record the summary anchors on; -1 = no summary
		afterSum    bool
		want        string
		wantSummary string
	}{
		{"unbounded", ContextBounds{}, -1, false, "[u0 a0 u1 a1 u2 a2 u3 a3 u4 a4 u5 a5 u6 a6 u7 a7 u8 a8 u9 a9]", ""},
		{"count", ContextBounds{MaxMessages: 5}, -1, false, "[a7 u8 a8 u9 a9]", ""},
		{"age", ContextBounds{MaxAge: 3*time.Hour + time.Minute}, -1, false, "[u7 a7 u8 a8 u9 a9]", ""},
		{"age and count", ContextBounds{MaxMessages: 3, MaxAge: 3*time.Hour + time.Minute}, -1, false, "[a8 u9 a9]", ""},
		{"summary anchor", ContextBounds{}, 6, false, "[u7 a7 u8 a8 u9 a9]", "S6"},
		{"summary anchor + count", ContextBounds{MaxMessages: 4}, 6, false, "[u8 a8 u9 a9]", "S6"},
		{"summary then more turns", ContextBounds{}, 8, true, "[u9 a9 x1 y1]", "S8"},
		{"old summary survives age bound", ContextBounds{MaxAge: 90 * time.Minute}, 3, false, "[u9 a9]", "S3"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newCtxLog(t, tc.bounds)
			a.now, b.now = func() time.Time { return now }, func() time.Time { return now }
			id := sid(fmt.Sprint("bounds", i), 1)
			seqs := write(t, a, id)
			last := seqs[len(seqs)-1]
			if tc.summaryAt >= 0 {
				var err error
				last, err = a.AppendSummary(ctx, id, last, Summary{Text: fmt.Sprint("S", tc.summaryAt), AnchorSeq: seqs[tc.summaryAt], Covered: 2 * (tc.summaryAt + 1)})
				if err != nil {
					t.Fatal(err)
				}
				if tc.afterSum {
					// A cold-cache writer appends after the summary: the pointer must carry over.
					if last, err = b.AppendMessages(ctx, id, last, turn(now.UnixMilli(), "x1", "y1")); err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, l := range []*ContextLog{a, b} {
				got, err := l.LoadContext(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if fmt.Sprint(texts(got.Messages)) != tc.want || got.LastSeq != last || len(got.Seqs) != len(got.Messages) {
					t.Fatalf("got %q last %d, want %s last %d", texts(got.Messages), got.LastSeq, tc.want, last)
				}
				sum := ""
				if got.Summary != nil {
					sum = got.Summary.Text
				}
				if sum != tc.wantSummary {
					t.Fatalf("summary %q want %q", sum, tc.wantSummary)
				}
			}
		})
	}
}

func TestLoadContextTrimsOrphanToolResults(t *testing.T) {
	ctx := context.Background()
	a, _ := newCtxLog(t, ContextBounds{MaxMessages: 3})
	id := sid("tools", 1)
	call := llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.ToolCall("c1", "search", map[string]any{"q": "x"})}, Timestamp: 1}
	res := llm.Message{Role: llm.RoleToolResult, ToolCallID: "c1", ToolName: "search", Content: []llm.Content{llm.Text("r1")}, Timestamp: 1}
	final := llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.Text("done")}, Timestamp: 1}
	if _, err := a.AppendMessages(ctx, id, 0, []llm.Message{llm.UserText("q", 1), call, res, res, final}); err != nil {
		t.Fatal(err)
	}
	got, err := a.LoadContext(ctx, id)
	if err != nil || fmt.Sprint(texts(got.Messages)) != "[done]" {
		t.Fatalf("got %q %v", texts(got.Messages), err)
	}
}

func TestAppendSummaryInvalid(t *testing.T) {
	ctx := context.Background()
	a, _ := newCtxLog(t, ContextBounds{})
	id := sid("suminv", 1)
	s1, _ := a.AppendMessages(ctx, id, 0, turn(1, "u", "a"))
	for _, tc := range []struct {
		name string
		s    Summary
		at   uint64
		want error
	}{
		{"anchor zero", Summary{Text: "s"}, s1, ErrInvalid},
		{"anchor beyond the log", Summary{Text: "s", AnchorSeq: s1 + 1}, s1, ErrInvalid},
		{"no text", Summary{AnchorSeq: s1}, s1, ErrInvalid},
		{"stale", Summary{Text: "s", AnchorSeq: 1}, s1 + 5, ErrStaleWriter},
	} {
		if _, err := a.AppendSummary(ctx, id, tc.at, tc.s); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if _, err := a.LoadContext(ctx, events.SessionID{Key: testKey("x")}); !errors.Is(err, ErrInvalid) {
		t.Errorf("load without epoch: %v", err)
	}
}

// TestLoadContextSeesOtherWriters: a cached (warm) reader never serves a stale context: it
// picks up another writer's commits and summaries, with the cache on and off.
func TestLoadContextSeesOtherWriters(t *testing.T) {
	for _, cache := range []int{256, 0} {
		t.Run(fmt.Sprint("cache=", cache), func(t *testing.T) {
			ctx := context.Background()
			js := startJS(t)
			a, _ := NewContextLog(ctx, js, ContextBounds{MaxMessages: 6}, WithCacheSessions(cache))
			b, _ := NewContextLog(ctx, js, ContextBounds{MaxMessages: 6}, WithCacheSessions(cache))
			id := sid("shared", 1)
			check := func(l *ContextLog, want, wantSum string) Loaded {
				t.Helper()
				got, err := l.LoadContext(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				sum := ""
				if got.Summary != nil {
					sum = got.Summary.Text
				}
				if fmt.Sprint(texts(got.Messages)) != want || sum != wantSum {
					t.Fatalf("got %q summary %q, want %s %q", texts(got.Messages), sum, want, wantSum)
				}
				return got
			}
			s, _ := a.AppendMessages(ctx, id, 0, turn(1, "u1", "a1"))
			check(a, "[u1 a1]", "")
			check(b, "[u1 a1]", "")
			s, _ = b.AppendMessages(ctx, id, s, turn(2, "u2", "a2"))
			s, _ = b.AppendMessages(ctx, id, s, turn(3, "u3", "a3"))
			check(a, "[u1 a1 u2 a2 u3 a3]", "")
			s, _ = b.AppendMessages(ctx, id, s, turn(4, "u4", "a4"))
			check(a, "[u2 a2 u3 a3 u4 a4]", "") // count bound on the warm path
			s, _ = b.AppendSummary(ctx, id, s, Summary{Text: "S", AnchorSeq: s - 1})
			check(a, "[u4 a4]", "S")
			got := check(b, "[u4 a4]", "S")
			s, _ = a.AppendMessages(ctx, id, got.LastSeq, turn(5, "u5", "a5"))
			check(b, "[u4 a4 u5 a5]", "S")
			l := check(a, "[u4 a4 u5 a5]", "S")
			if l.LastSeq != s {
				t.Fatalf("last %d want %d", l.LastSeq, s)
			}
			// Callers may scribble on what they got without touching the cache.
			l.Messages[0] = llm.UserText("scribble", 0)
			check(a, "[u4 a4 u5 a5]", "S")
		})
	}
}

// TestContextLogConcurrentWriters: goroutines sharing one ContextLog (and its cache) race to
// commit to the same sessions with load/append/retry; the warm view always equals a cold read, and
// every batch is whole. A cache of 2 sessions for 3 sessions exercises eviction.
func TestContextLogConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	js := startJS(t)
	shared, _ := NewContextLog(ctx, js, ContextBounds{}, WithCacheSessions(2))
	cold, _ := NewContextLog(ctx, js, ContextBounds{}, WithCacheSessions(0))
	ids := []events.SessionID{sid("cc0", 1), sid("cc1", 1), sid("cc2", 1)}
	const writers, commits = 4, 6
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := 0; c < commits; c++ {
				for _, id := range ids {
					for {
						got, err := shared.LoadContext(ctx, id)
						if err != nil {
							t.Error(err)
							return
						}
						_, err = shared.AppendMessages(ctx, id, got.LastSeq, turn(1, fmt.Sprintf("w%d-c%d", w, c), fmt.Sprintf("w%d-c%d", w, c)))
						if errors.Is(err, ErrStaleWriter) {
							continue
						}
						if err != nil {
							t.Error(err)
							return
						}
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, id := range ids {
		warm, err1 := shared.LoadContext(ctx, id)
		fresh, err2 := cold.LoadContext(ctx, id)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if len(warm.Messages) != 2*writers*commits || fmt.Sprint(texts(warm.Messages)) != fmt.Sprint(texts(fresh.Messages)) || warm.LastSeq != fresh.LastSeq {
			t.Fatalf("%s: warm %d msgs last %d, cold %d last %d", id, len(warm.Messages), warm.LastSeq, len(fresh.Messages), fresh.LastSeq)
		}
		for i := 0; i < len(warm.Messages); i += 2 {
			if warm.Messages[i].TextContent() != warm.Messages[i+1].TextContent() {
				t.Fatalf("batch split at %d: %q", i, texts(warm.Messages))
			}
		}
	}
	shared.mu.Lock()
	tails := 0
	for _, st := range shared.cache {
		if st.hasTail {
			tails++
		}
	}
	if tails > 2 || tails != shared.tails {
		t.Fatalf("tails %d (counter %d), cache bound 2", tails, shared.tails)
	}
	shared.mu.Unlock()
}

// TestColdLoadSkipsByCount: a long epoch without summaries is not read in full by a cold load
// with a count bound: the running totals are binary-searched and only the last records decoded.
func TestColdLoadSkipsByCount(t *testing.T) {
	ctx := context.Background()
	js := startJS(t)
	w, _ := NewContextLog(ctx, js, ContextBounds{})
	plain, withSum := sid("long", 1), sid("long-summary", 1)
	var last, lastS, anchor uint64
	var err error
	for i := 0; i < 90; i++ {
		if last, err = w.AppendMessages(ctx, plain, last, turn(time.Now().UnixMilli(), fmt.Sprint("u", i), fmt.Sprint("a", i))); err != nil {
			t.Fatal(err)
		}
		if lastS, err = w.AppendMessages(ctx, withSum, lastS, turn(time.Now().UnixMilli(), fmt.Sprint("u", i), fmt.Sprint("a", i))); err != nil {
			t.Fatal(err)
		}
		if i == 20 {
			anchor = lastS
			if lastS, err = w.AppendSummary(ctx, withSum, lastS, Summary{Text: "S20", AnchorSeq: anchor}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name   string
		id     events.SessionID
		bounds ContextBounds
		sum    string
	}{
		{"from the start", plain, ContextBounds{MaxMessages: 6}, ""},
		{"from MaxAge ago", plain, ContextBounds{MaxMessages: 6, MaxAge: time.Hour}, ""},
		{"from the summary anchor", withSum, ContextBounds{MaxMessages: 6}, "S20"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cold, _ := NewContextLog(ctx, js, tc.bounds, WithCacheSessions(0))
			got, err := cold.LoadContext(ctx, tc.id)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(texts(got.Messages)) != "[u87 a87 u88 a88 u89 a89]" {
				t.Fatalf("got %q", texts(got.Messages))
			}
			if (got.Summary == nil && tc.sum != "") || (got.Summary != nil && got.Summary.Text != tc.sum) {
				t.Fatalf("summary %+v", got.Summary)
			}
			if n := cold.decoded.Load(); n > 5 {
				t.Fatalf("decoded %d records of ~90 for 6 messages", n)
			}
		})
	}
}

// The owner loads its own commits from the cache by their sequence; an unknown sequence (the
// log moved on elsewhere) falls back to asking the server.
func TestLoadContextAt(t *testing.T) {
	ctx := context.Background()
	owner, other := newCtxLog(t, ContextBounds{MaxMessages: 10})
	id := sid("at", 1)
	s, err := owner.AppendMessages(ctx, id, 0, turn(1, "u1", "a1"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		l    *ContextLog
		at   uint64
		want string
	}{
		{"own commit, cached", owner, s, "[u1 a1]"},
		{"nothing cached here", other, s, "[u1 a1]"},
		{"empty log", other, 0, "[u1 a1]"},
	}
	for _, tc := range cases {
		got, err := tc.l.LoadContextAt(ctx, id, tc.at)
		if err != nil || fmt.Sprint(texts(got.Messages)) != tc.want || got.LastSeq != s {
			t.Fatalf("%s: %q last %d, %v; want %s last %d", tc.name, texts(got.Messages), got.LastSeq, err, tc.want, s)
		}
	}
	s2, err := other.AppendMessages(ctx, id, s, turn(2, "u2", "a2"))
	if err != nil {
		t.Fatal(err)
	}
	// The owner's cache is at s; asked for s2 it reads the server.
	got, err := owner.LoadContextAt(ctx, id, s2)
	if err != nil || fmt.Sprint(texts(got.Messages)) != "[u1 a1 u2 a2]" || got.LastSeq != s2 {
		t.Fatalf("after another writer: %q last %d, %v", texts(got.Messages), got.LastSeq, err)
	}
	if _, err := owner.LoadContextAt(ctx, events.SessionID{}, 1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad id: %v", err)
	}
}

// A cache hit of LoadContextAt shares the cache's memory: the view must not change when the
// owner commits more, and appending to the view must not reach the cache.
func TestLoadContextAtViewIsStable(t *testing.T) {
	ctx := context.Background()
	owner, _ := newCtxLog(t, ContextBounds{MaxMessages: 4})
	id := sid("view", 1)
	s, err := owner.AppendMessages(ctx, id, 0, turn(1, "u1", "a1"))
	if err != nil {
		t.Fatal(err)
	}
	view, err := owner.LoadContextAt(ctx, id, s)
	if err != nil {
		t.Fatal(err)
	}
	grown := append(view.Messages, llm.UserText("mine", 0))
	for i := 2; i <= 4; i++ { // past the count bound: the cache trims and reallocates
		if s, err = owner.AppendMessages(ctx, id, s, turn(int64(i), fmt.Sprintf("u%d", i), fmt.Sprintf("a%d", i))); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(texts(view.Messages)); got != "[u1 a1]" {
			t.Fatalf("after commit %d the view reads %s", i, got)
		}
	}
	if got := fmt.Sprint(texts(grown)); got != "[u1 a1 mine]" {
		t.Fatalf("appended view %s", got)
	}
	got, err := owner.LoadContextAt(ctx, id, s)
	if err != nil || fmt.Sprint(texts(got.Messages)) != "[u3 a3 u4 a4]" {
		t.Fatalf("cache after the appends: %q, %v", texts(got.Messages), err)
	}
}

// A kept session's tail stays cached past the WithCacheSessions bound, the others share the
// bound, and a released one is bounded again.
func TestContextLogKeep(t *testing.T) {
	ctx := context.Background()
	l, err := NewContextLog(ctx, startJS(t), ContextBounds{}, WithCacheSessions(1))
	if err != nil {
		t.Fatal(err)
	}
	owned, other1, other2 := sid("owned", 1), sid("other1", 1), sid("other2", 1)
	l.Keep(owned)
	last := map[events.SessionID]uint64{}
	for i, id := range []events.SessionID{owned, other1, other2} {
		s, err := l.AppendMessages(ctx, id, 0, turn(int64(i), "u", "a"))
		if err != nil {
			t.Fatal(err)
		}
		last[id] = s
	}
	decodes := func(id events.SessionID) int64 {
		t.Helper()
		before := l.decoded.Load()
		if _, err := l.LoadContext(ctx, id); err != nil {
			t.Fatal(err)
		}
		return l.decoded.Load() - before
	}
	cases := []struct {
		name   string
		id     events.SessionID
		cached bool
	}{
		{"kept, beyond the bound", owned, true},
		{"the newest other one", other2, true},
		{"evicted to make room", other1, false},
	}
	for _, tc := range cases {
		if n := decodes(tc.id); (n == 0) != tc.cached {
			t.Errorf("%s: decoded %d records, cached %v", tc.name, n, tc.cached)
		}
	}
	// other1 was read back and took the bounded slot. Released, owned is over the bound.
	l.Release(owned)
	if n := decodes(owned); n == 0 {
		t.Error("released: still cached beyond the bound")
	}
	if l.tails > 1 {
		t.Errorf("%d bounded tails, bound 1", l.tails)
	}
}

// FindTurnCommit finds a turn's commit after the context it started from, and only its own;
// a closing commit's mark carries its reply parts.
func TestFindTurnCommit(t *testing.T) {
	l, _ := newCtxLog(t, ContextBounds{})
	ctx := context.Background()
	id := sid("find", 1)
	var last uint64
	var err error
	seqs := map[string]uint64{}
	for _, turn := range []string{"t1", "", "t3"} {
		opts := []AppendOption{WithMsgID("in-listen")}
		if turn != "" {
			opts = []AppendOption{WithMsgID(turn + ":commit"), WithTurn(turn), WithClosing(2, 1)}
		}
		if last, err = l.AppendMessages(ctx, id, last, []llm.Message{llm.UserText("m "+turn, 1)}, opts...); err != nil {
			t.Fatal(err)
		}
		seqs[turn] = last
	}
	cases := []struct {
		turn  string
		after uint64
		found bool
	}{
		{"t1", 0, true},
		{"t3", 0, true},
		{"t3", seqs["t1"], true},
		{"t1", seqs["t1"], false}, // its commit is not after where it says it started
		{"t2", 0, false},
	}
	for _, c := range cases {
		mark, found, err := l.FindTurnCommit(ctx, id, c.turn, c.after)
		if err != nil {
			t.Fatal(err)
		}
		if found != c.found || found && (mark.Seq != seqs[c.turn] || !mark.Closes || mark.ReplyParts != 2 || len(mark.Messages) != 1) {
			t.Errorf("FindTurnCommit(%s after %d) = %+v, %v; want found=%v at %d", c.turn, c.after, mark, found, c.found, seqs[c.turn])
		}
	}
	if _, _, err := l.FindTurnCommit(ctx, id, "", 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("an empty turn id: %v, want ErrInvalid", err)
	}
	// A commit that does not close its turn says so.
	if _, err := l.AppendMessages(ctx, id, last, []llm.Message{llm.UserText("plain", 1)}, WithMsgID("t4:commit"), WithTurn("t4"), WithInboxSeq(9)); err != nil {
		t.Fatal(err)
	}
	if mark, err := l.LastCommit(ctx, id); err != nil || mark.Closes || mark.Turn != "t4" {
		t.Errorf("LastCommit of a plain commit = %+v, %v", mark, err)
	}
}

// TestCachedTailReleasesCutMessages checks that a long session's cached tail does not keep
// the messages cut from its front reachable through its backing arrays: a worker holding
// thousands of chats would carry up to twice their tails for the collector to trace.
func TestCachedTailReleasesCutMessages(t *testing.T) {
	const keep = 40
	log, _ := newCtxLog(t, ContextBounds{MaxMessages: keep})
	ctx := context.Background()
	id := sid("long", 1)
	var seq uint64
	var sent []weak.Pointer[llm.Content]
	worst := 0
	for i := range 6 * keep {
		m := llm.UserText(fmt.Sprintf("message %d", i), int64(i+1))
		sent = append(sent, weak.Make(&m.Content[0]))
		var err error
		if seq, err = log.AppendMessages(ctx, id, seq, []llm.Message{m}); err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		cut := len(sent) - keep
		alive := 0
		for _, w := range sent[:max(cut, 0)] {
			if w.Value() != nil {
				alive++
			}
		}
		worst = max(worst, alive)
	}
	if worst > keep/4+4 {
		t.Fatalf("up to %d messages cut from a %d-message tail were still reachable, want at most %d", worst, keep, keep/4+4)
	}
	got, err := log.LoadContext(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Messages) != keep || got.Messages[0].TextContent() != fmt.Sprintf("message %d", 5*keep) ||
		got.Messages[keep-1].TextContent() != fmt.Sprintf("message %d", 6*keep-1) {
		t.Fatalf("tail of %d messages from %q to %q", len(got.Messages), got.Messages[0].TextContent(), got.Messages[len(got.Messages)-1].TextContent())
	}
}
