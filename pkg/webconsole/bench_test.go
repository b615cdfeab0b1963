package webconsole_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/cputime"
	"github.com/agentbus/agentbus/internal/testwait"
)

// BenchmarkSessionPage measures the server time of GET /sessions/{key} for a session of 1,000
// turns (one in ten with a tool call) that a real pipeline (embedded nats-server, the four
// roles, the openai-completions provider against a fake server) built: reading AGENT_EVENTS,
// AGENT_CTX, TOOL_RESULTS, IM_OUT, IM_SENT and DEAD_LETTERS, and rendering the page. The
// target is 300 ms. cpu-ns/op is the CPU the whole process (console and embedded server) spent
// per page: on a shared machine the wall time measures the neighbours too.
//
//	go test -run '^$' -bench SessionPage -benchtime 20x ./pkg/webconsole
func BenchmarkSessionPage(b *testing.B) {
	const turns = 1000
	pl := newPipeline(b, script1, script2, "")
	pl.waitTool(b, "user_profile")
	start := time.Now()
	const wave = 50
	for i := 0; i < turns; i += wave {
		for j := i; j < min(i+wave, turns); j++ {
			text := fmt.Sprintf("message %d: how are things?", j)
			if j%10 == 0 {
				text = fmt.Sprintf("message %d: remember that I live in Paris", j)
			}
			pl.post(b, fmt.Sprintf("m%d", j), "bench", text)
		}
		pl.cb.wait(b, min(i+wave, turns))
	}
	b.Logf("built a session of %d turns in %s", turns, time.Since(start).Round(time.Millisecond))

	// Log in once; the benchmark sends the session cookie.
	rec := httptest.NewRecorder()
	pl.srv.ServeHTTP(rec, httptest.NewRequest("GET", "/?token="+testToken, nil))
	cookies := rec.Result().Cookies()
	path := "/sessions/" + url.PathEscape(key("bench").String())
	get := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", path, nil)
		for _, c := range cookies {
			req.AddCookie(c)
		}
		rec := httptest.NewRecorder()
		pl.srv.ServeHTTP(rec, req)
		return rec
	}
	// Wait until every turn is committed (the last replies may be ahead of the last commits).
	testwait.Eventually(b, waitMargin, func() error {
		r := get()
		n := strings.Count(r.Body.String(), `class="turn t-committed"`)
		return testwait.Want(r.Code == http.StatusOK && n == turns, "status %d, %d of %d turns committed", r.Code, n, turns)
	})
	b.Run(fmt.Sprintf("turns=%d", turns), func(b *testing.B) {
		var size int
		if f := os.Getenv("AGENTBUS_BENCH_CPUPROFILE"); f != "" {
			// A profile of the page reads alone (go test -cpuprofile also covers building the session).
			out, err := os.Create(f)
			if err != nil {
				b.Fatal(err)
			}
			defer out.Close()
			if err := pprof.StartCPUProfile(out); err != nil {
				b.Fatal(err)
			}
			defer pprof.StopCPUProfile()
		}
		cpu := cputime.Process()
		for b.Loop() {
			r := get()
			if r.Code != http.StatusOK {
				b.Fatalf("GET %s: %d", path, r.Code)
			}
			size = r.Body.Len()
		}
		cputime.Report(b, cpu)
		b.ReportMetric(float64(size)/1024, "KiB/page")
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/page")
	})
}
