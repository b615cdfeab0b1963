package app_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/childproc"
	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/pkg/webhook"
)

var (
	footprintSessions = flag.Int("footprint.sessions", 20, "TestFootprint: sessions (issue 41's study used 2,000; the default keeps CI short)")
	footprintTurns    = flag.String("footprint.turns", "3,12", "TestFootprint: turns per session at each measurement (ascending)")
	footprintStorage  = flag.String("footprint.storage", "memory", "TestFootprint: the embedded server's storage, memory or file (with file, the Go heap shows the server's subject index rather than the stored messages)")
	footprintServer   = flag.Bool("footprint.server", false, "TestFootprint: run nats-server as a process of its own (file storage), so that /varz mem is the server's resident memory alone")
	footprintPace     = flag.Int("footprint.pace", 250, "TestFootprint: turns posted at a time; the next batch waits for their replies")
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

// streamsWithTurnSubjects are the streams whose subjects may name a recent call or part:
// their subjects are reported, not held to the per-session bound. KV_tool_markers holds the
// started markers of non-idempotent calls in flight and, for a minute after each result, its
// purge marker (docs/sizing.md); KV_delivered the chunks of parts the IM adapters split.
// user_profile, the tool called here, is idempotent and the webhook does not split parts, so
// this run creates none of either.
var streamsWithTurnSubjects = map[string]bool{"KV_delivered": true, "KV_tool_markers": true}

// memory is what the server says about memory: JetStream's memory storage (/jsz "memory", 0
// with file storage) and the process's resident memory (/varz "mem": the test process, so the
// roles' heap too); heap is the process's Go heap in use after a GC.
type memory struct {
	jsMemory, jsStore uint64
	rss               int64
	heap              uint64
}

func readMemory(t *testing.T, url string) memory {
	t.Helper()
	var m memory
	var j jsz
	getJSON(t, url+"/jsz", &j)
	m.jsMemory, m.jsStore = j.Memory, j.Store
	var v struct {
		Mem int64 `json:"mem"`
	}
	getJSON(t, url+"/varz", &v)
	m.rss = v.Mem
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.heap = ms.HeapInuse
	return m
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// awaitReplies waits until n replies have reached the callback, for as long as they keep
// coming: it fails only when none arrived for waitMargin. A run of thousands of turns takes as
// long as the machine needs (minutes on a loaded one); what the margin bounds is a stall.
func awaitReplies(pl *pipeline, n int) {
	pl.t.Helper()
	last := -1
	for {
		got, err := pl.cb.wait(n, waitMargin)
		if err == nil {
			return
		}
		if len(got) <= last {
			pl.t.Fatalf("%v (none for %s); replies: %d", err, waitMargin, len(got))
		}
		last = len(got)
	}
}

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
	m, pace := *footprintSessions, max(*footprintPace, 1)
	var pl *pipeline
	var monURL string
	if *footprintServer {
		// The server alone in its process: its /varz mem is what it holds, not the roles'.
		ports, err := childproc.FreePorts(2)
		if err != nil {
			t.Fatal(err)
		}
		p := startChild(t, "nats-footprint", filepath.Join(t.TempDir(), "nats.log"), []string{faultChildEnv + "=regionnats",
			envRegionDomain + "=fp", envRegionPort + "=" + strconv.Itoa(ports[0]), envRegionStore + "=" + t.TempDir(),
			envRegionHTTP + "=" + strconv.Itoa(ports[1])})
		t.Cleanup(func() { p.Stop(10 * time.Second) })
		if _, err := p.WaitReady(60 * time.Second); err != nil {
			t.Fatal(err)
		}
		pl = newPipeline(t, profileTurns, pipelineOpts{storage: "file", natsURL: fmt.Sprintf("nats://127.0.0.1:%d", ports[0])})
		monURL = fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	} else {
		pl = newPipeline(t, profileTurns, pipelineOpts{storage: *footprintStorage})
		srv := pl.p.Embedded.Server()
		mux := http.NewServeMux()
		mux.HandleFunc("/jsz", srv.HandleJsz)
		mux.HandleFunc("/varz", srv.HandleVarz)
		mon := httptest.NewServer(mux)
		t.Cleanup(mon.Close)
		monURL = mon.URL
	}

	type sample struct {
		turns                 int
		per                   map[string]uint64
		subjects, msgs, bytes uint64
		mem                   memory
	}
	var samples []sample
	rssOf := "test process: server and roles"
	if *footprintServer {
		rssOf = "nats-server process alone"
	}
	done := 0
	for _, turns := range steps {
		start := time.Now()
		for turn := done; turn < turns; turn++ {
			// One turn per session at a time: every session's turns are separate turns. At most
			// pace turns are posted before their replies are waited for, so a large run queues
			// no more work than the machine takes at once.
			for from := 0; from < m; from += pace {
				to := min(from+pace, m)
				for s := from; s < to; s++ {
					postPaced(pl, private(fmt.Sprintf("fp-%d-%d", s, turn), fmt.Sprintf("user%04d", s), fmt.Sprintf("message %d", turn)))
				}
				awaitReplies(pl, m*turn+to)
			}
		}
		took, ran := time.Since(start), m*(turns-done)
		done = turns
		per, subj, msgs, bytes := streamSubjects(t, monURL)
		mem := readMemory(t, monURL)
		samples = append(samples, sample{turns, per, subj, msgs, bytes, mem})
		t.Logf("%d sessions × %d turns (%d turns in %s, %.0f turns/s): %d subjects, %d messages, %d bytes in streams",
			m, turns, ran, took.Round(time.Millisecond), float64(ran)/took.Seconds(), subj, msgs, bytes)
		t.Logf("  memory: /jsz memory %d B, storage %d B; /varz mem (RSS of the %s) %.1f MiB; Go heap of the test process in use after GC %.1f MiB",
			mem.jsMemory, mem.jsStore, rssOf, float64(mem.rss)/(1<<20), float64(mem.heap)/(1<<20))
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
		(float64(last.subjects)-float64(first.subjects))/float64(m*(last.turns-first.turns)),
		(float64(keptLast)-float64(kept))/float64(m*(last.turns-first.turns)), keys(streamsWithTurnSubjects), first.turns, last.turns)
	t.Logf("stored per turn: %.1f messages, %.0f bytes",
		(float64(last.msgs)-float64(first.msgs))/float64(m*(last.turns-first.turns)), (float64(last.bytes)-float64(first.bytes))/float64(m*(last.turns-first.turns)))
	t.Logf("memory between %d and %d turns/session: /jsz memory %d -> %d B, storage %d -> %d B (%+.1f %%); RSS %.1f -> %.1f MiB (%+.1f %%); Go heap %.1f -> %.1f MiB (%+.1f %%)",
		first.turns, last.turns, first.mem.jsMemory, last.mem.jsMemory, first.mem.jsStore, last.mem.jsStore,
		pct(float64(first.mem.jsStore), float64(last.mem.jsStore)),
		float64(first.mem.rss)/(1<<20), float64(last.mem.rss)/(1<<20), pct(float64(first.mem.rss), float64(last.mem.rss)),
		float64(first.mem.heap)/(1<<20), float64(last.mem.heap)/(1<<20), pct(float64(first.mem.heap), float64(last.mem.heap)))
	t.Logf("subjects between %d and %d turns/session: %d -> %d (%+.2f %%) in all streams",
		first.turns, last.turns, first.subjects, last.subjects, pct(float64(first.subjects), float64(last.subjects)))
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

// pct is the change from a to b in per cent.
func pct(a, b float64) float64 {
	if a == 0 {
		return 0
	}
	return 100 * (b - a) / a
}
