package app_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/internal/fakeopenai"
)

// realisticUsage answers like a real server: the usage it reports is the request's size (its
// body, tool schemas included, at about four bytes a token), not a constant.
func realisticUsage(r *fakeopenai.Request, reply fakeopenai.Reply) fakeopenai.Reply {
	reply.PromptTokens = len(r.Body) / 4
	return reply
}

// callCounter tells the model calls of a run apart.
type callCounter struct{ turns, summaries, flushes int }

func countCalls(rs []fakeopenai.Request) callCounter {
	var c callCounter
	for i := range rs {
		switch {
		case isSummaryReq(&rs[i]):
			c.summaries++
		case isHousekeeping(&rs[i]):
			c.flushes++
		default:
			c.turns++
		}
	}
	return c
}

// TestCompactionDoesNotThrash is issue 37's run: a private chat of a trusted user with a
// ~5k-token window and 40 long messages. Each compaction must free enough room that the next
// one is many turns away: model calls per user message stay low.
func TestCompactionDoesNotThrash(t *testing.T) {
	pl := newPipeline(t, func(r *fakeopenai.Request) fakeopenai.Reply {
		switch {
		case isSummaryReq(r):
			return realisticUsage(r, fakeopenai.Reply{Text: "## Goal\nalice is telling a long story. " + filler(600)})
		case isHousekeeping(r):
			return realisticUsage(r, fakeopenai.Reply{Text: "NO_REPLY"})
		}
		return realisticUsage(r, fakeopenai.Reply{Text: "echo: " + r.LastUser()[:12] + " " + filler(400)})
	}, pipelineOpts{provider: ", contextWindow: 5000", ai: "  trigger:\n    trusted: [alice]\n"})
	const turns = 40
	for i := 1; i <= turns; i++ {
		pl.post(private(fmt.Sprintf("m%d", i), "alice", fmt.Sprintf("part %d of my story: %s", i, filler(800))))
		pl.replies(i)
	}
	got := pl.settle(turns)
	for _, r := range got {
		if !strings.HasPrefix(r.Text(), "echo: part ") {
			t.Fatalf("a reply that is not an answer reached the chat: %q", r.Text())
		}
	}
	c := countCalls(pl.model.Requests())
	perMsg := float64(c.turns+c.summaries+c.flushes) / turns
	t.Logf("%d user messages: %d turn calls, %d summaries, %d memory flushes: %.2f model calls per user message",
		turns, c.turns, c.summaries, c.flushes, perMsg)
	if c.summaries == 0 {
		t.Fatalf("no compaction in %d long messages of a 5k window: the test does not exercise it", turns)
	}
	// Before issue 37's fix: 1.85 calls per message here, a compaction every second turn.
	if perMsg > 1.5 || c.summaries > turns/5 {
		t.Fatalf("%.2f model calls per user message (%d summaries, %d flushes for %d messages): compaction thrashes",
			perMsg, c.summaries, c.flushes, turns)
	}
	// Between two compactions, several turns: the turn calls between two summary calls.
	gap, minGap, seen := 0, turns, false
	for _, r := range pl.model.Requests() {
		switch {
		case isSummaryReq(&r):
			if seen {
				minGap = min(minGap, gap)
			}
			seen, gap = true, 0
		case !isHousekeeping(&r):
			gap++
		}
	}
	if minGap < 3 {
		t.Fatalf("two compactions %d turns apart: a compaction did not free enough room", minGap)
	}
}

// TestShortChatsNotCompacted is issue 37's plain load test, smaller: chats of 30 two-word
// messages of trusted users with the default settings. None of them is compacted, and no
// memory flush runs: every model call answers a user.
func TestShortChatsNotCompacted(t *testing.T) {
	pl := newPipeline(t, func(r *fakeopenai.Request) fakeopenai.Reply {
		return realisticUsage(r, fakeopenai.Echo(r))
	}, pipelineOpts{ai: "  trigger:\n    trusted: [ann, bob, cid]\n"})
	users := []string{"ann", "bob", "cid"}
	const perChat = 30
	for i := 1; i <= perChat; i++ {
		for _, u := range users {
			pl.post(private(fmt.Sprintf("%s-%d", u, i), u, fmt.Sprintf("hello %d", i)))
		}
		for _, u := range users {
			pl.repliesIn(u, i)
		}
	}
	pl.settle(perChat * len(users))
	c := countCalls(pl.model.Requests())
	t.Logf("%d chats x %d messages: %d turn calls, %d summaries, %d memory flushes", len(users), perChat, c.turns, c.summaries, c.flushes)
	if c.summaries != 0 || c.flushes != 0 || c.turns != perChat*len(users) {
		t.Fatalf("%d turn calls, %d summaries, %d flushes for %d messages; want one call per message",
			c.turns, c.summaries, c.flushes, perChat*len(users))
	}
	for _, u := range users {
		if s := summaries(pl.ctxHistory(private("", u, "").key())); len(s) != 0 {
			t.Fatalf("chat %s was compacted: %+v", u, s)
		}
	}
}
