package app_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/pkg/webhook"
)

var (
	footprintSessions = flag.Int("footprint.sessions", 200, "TestFootprint: sessions (issue 41's study used 2,000)")
	footprintTurns    = flag.String("footprint.turns", "3,12", "TestFootprint: turns per session at each measurement (ascending)")
)

// jsz is the part of the server's /jsz?accounts=true&streams=true this test reads.
type jsz struct {
	Memory         uint64 `json:"memory"`
	Store          uint64 `json:"storage"`
	Messages       uint64 `json:"messages"`
	Bytes          uint64 `json:"bytes"`
	AccountDetails []struct {
		Streams []struct {
			Name  string `json:"name"`
			State struct {
				Msgs        uint64 `json:"messages"`
				Bytes       uint64 `json:"bytes"`
				NumSubjects uint64 `json:"num_subjects"`
			} `json:"state"`
		} `json:"stream_detail"`
	} `json:"account_details"`
}

// streamSubjects reads the server's /jsz (its monitoring handler, over HTTP) and returns the
// subjects each stream holds, with the totals.
func streamSubjects(t *testing.T, url string) (per map[string]uint64, subjects, msgs, bytes uint64) {
	t.Helper()
	resp, err := http.Get(url + "/jsz?accounts=true&streams=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var j jsz
	if err := json.NewDecoder(resp.Body).Decode(&j); err != nil {
		t.Fatal(err)
	}
	per = map[string]uint64{}
	for _, a := range j.AccountDetails {
		for _, s := range a.Streams {
			per[s.Name] += s.State.NumSubjects
			subjects += s.State.NumSubjects
			msgs += s.State.Msgs
			bytes += s.State.Bytes
		}
	}
	return per, subjects, msgs, bytes
}

// streamsWithTurnSubjects are the streams whose subjects may still name a call (issue 41):
// their subjects are reported, not held to the per-session bound. KV_delivered holds the
// started marker of each call of a non-idempotent tool for the bucket's TTL (docs/sizing.md);
// user_profile, the tool called here, is idempotent, so this run creates none.
var streamsWithTurnSubjects = map[string]bool{"KV_delivered": true}

// profileTurns answers every user message with one user_profile call (a tool served by the
// tool worker) and, once its result is in, with the text: every turn stores a
// tool call and a tool result, as in the issue 41 study.
func profileTurns(r *fakeopenai.Request) fakeopenai.Reply {
	last := r.Messages[len(r.Messages)-1]
	if last.Role == "tool" {
		return fakeopenai.Reply{Text: "saved: " + last.Content}
	}
	if !r.HasTool("user_profile") {
		return fakeopenai.Echo(r)
	}
	return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{ID: fmt.Sprintf("call_%d", r.N), Name: "user_profile",
		Arguments: `{"action":"set","key":"last","value":"` + r.LastUser() + `"}`}}}
}

// TestFootprint runs turns on many sessions through the whole pipeline (webhook in, turn
// worker with a real provider client against a fake OpenAI server, one user_profile call on a
// tool worker per turn, egress out) on a real
// nats-server and reads its monitoring endpoint after each step: the subjects the server
// indexes must grow with sessions, not with turns. Between the first and the last step every
// session has had 4× the turns; the subjects of every stream (but those listed in
// streamsWithTurnSubjects) must stay within 5 %.
func TestFootprint(t *testing.T) {
	var steps []int
	for _, s := range strings.Split(*footprintTurns, ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(s), &n); err != nil || n < 1 || len(steps) > 0 && n <= steps[len(steps)-1] {
			t.Fatalf("-footprint.turns: bad list %q", *footprintTurns)
		}
		steps = append(steps, n)
	}
	m := *footprintSessions
	pl := newPipeline(t, profileTurns, pipelineOpts{})
	mon := httptest.NewServer(http.HandlerFunc(pl.p.Embedded.Server().HandleJsz))
	t.Cleanup(mon.Close)

	type sample struct {
		turns                 int
		per                   map[string]uint64
		subjects, msgs, bytes uint64
	}
	var samples []sample
	done := 0
	for _, turns := range steps {
		start := time.Now()
		for turn := done; turn < turns; turn++ {
			for s := range m {
				postPaced(pl, private(fmt.Sprintf("fp-%d-%d", s, turn), fmt.Sprintf("user%04d", s), fmt.Sprintf("message %d", turn)))
			}
			// One turn per session at a time: every session's turns are separate turns.
			pl.replies(m * (turn + 1))
		}
		done = turns
		per, subj, msgs, bytes := streamSubjects(t, mon.URL)
		samples = append(samples, sample{turns, per, subj, msgs, bytes})
		t.Logf("%d sessions × %d turns (%d turns in %s): %d subjects, %d messages, %d bytes in streams",
			m, turns, m*turns, time.Since(start).Round(time.Millisecond), subj, msgs, bytes)
	}
	names := make([]string, 0, len(samples[0].per))
	for n := range samples[len(samples)-1].per {
		names = append(names, n)
	}
	sort.Strings(names)
	first, last := samples[0], samples[len(samples)-1]
	var kept, keptLast uint64
	for _, n := range names {
		a, b := first.per[n], last.per[n]
		note := ""
		if streamsWithTurnSubjects[n] {
			note = " (per call: not bounded by sessions)"
		} else {
			kept += a
			keptLast += b
		}
		t.Logf("  %-28s subjects %7d at %2d turns/session, %7d at %2d turns/session; per session %.2f -> %.2f%s",
			n, a, first.turns, b, last.turns, float64(a)/float64(m), float64(b)/float64(m), note)
	}
	t.Logf("subjects per turn: %.2f (all streams), %.2f (all but %v) between %d and %d turns/session",
		float64(last.subjects-first.subjects)/float64(m*(last.turns-first.turns)),
		float64(keptLast-kept)/float64(m*(last.turns-first.turns)), keys(streamsWithTurnSubjects), first.turns, last.turns)
	t.Logf("stored per turn: %.1f messages, %.0f bytes",
		float64(last.msgs-first.msgs)/float64(m*(last.turns-first.turns)), float64(last.bytes-first.bytes)/float64(m*(last.turns-first.turns)))
	if keptLast > kept+kept/20 {
		t.Fatalf("subjects grew with turns: %d at %d turns/session, %d at %d (more than 5 %%)", kept, first.turns, keptLast, last.turns)
	}
}

// postPaced posts m, waiting while the bot is over its rate limit (429).
func postPaced(pl *pipeline, m msg) {
	pl.t.Helper()
	b := m.body()
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		code, body := pl.postRaw(botID, b, webhook.Sign(botSecret, b))
		switch code {
		case http.StatusAccepted:
			return
		case http.StatusTooManyRequests:
			time.Sleep(wait) // the rate limit's Retry-After, as a platform would
		default:
			pl.t.Fatalf("POST %s: %d %s", m.id, code, body)
		}
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
