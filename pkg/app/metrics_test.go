package app_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"gopkg.in/yaml.v3"

	"github.com/agentbus/agentbus/internal/childproc"
	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/logging"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
	"github.com/agentbus/agentbus/pkg/webhook"
)

// buildRoles builds the four role binaries from cmd/* into a temporary directory.
func buildRoles(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator),
		"./cmd/ingest", "./cmd/turn-worker", "./cmd/tool-worker", "./cmd/egress")
	cmd.Dir = filepath.Join("..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build the role binaries: %v\n%s", err, out)
	}
	return dir
}

// scrape GETs url (a /metrics) and parses the Prometheus text format.
func scrape(url string) (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("GET %s: %s %s", url, resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// total is the sum of a family's values (counters, gauges; a histogram's sample count) over
// the series whose labels include want.
func total(mf *dto.MetricFamily, want map[string]string) (float64, int) {
	var sum float64
	n := 0
next:
	for _, m := range mf.GetMetric() {
		for k, v := range want {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == k && lp.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		n++
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			sum += m.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			sum += m.GetGauge().GetValue()
		case dto.MetricType_HISTOGRAM:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum, n
}

// TestMetricsEveryRole runs each role as its own process built from cmd/* against a real
// nats-server, sends real turns through the signed webhook (the fake model asks for a tool in
// the first), provokes a duplicate, a rejected and a rate-limited request, a dead letter and a
// lease takeover, and then reads /metrics of every process with the Prometheus text parser: each
// family of docs/observability.md exists, with the type and labels documented, and moved.
func TestMetricsEveryRole(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the role binaries and starts five processes")
	}
	bin := buildRoles(t)
	srv := natstest.New(t, natstest.WithListen())
	mdl := fakeopenai.New(t, func(r *fakeopenai.Request) fakeopenai.Reply {
		if res, ok := r.ToolResult("call_1"); ok {
			return fakeopenai.Reply{Text: "saved: " + res}
		}
		if strings.Contains(r.LastUser(), "remember") && r.HasTool("user_profile") {
			return fakeopenai.Reply{Text: "one moment", ToolCalls: []fakeopenai.ToolCall{{ID: "call_1", Name: "user_profile",
				Arguments: `{"action":"set","key":"city","value":"Paris"}`}}}
		}
		return fakeopenai.Echo(r)
	})
	cb := newCallback(t)
	ports := freePorts(t, 6)
	dir := t.TempDir()
	webhookAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	yml := fmt.Sprintf(`
dataDir: DATADIR
nats:
  url: %s
im:
  webhook:
    listen: "%s"
    # Two requests per sender, then 429: the third request of u1 is rate limited.
    rateLimit: {perSender: {perSecond: 0.001, burst: 2}}
    bots:
      - id: %s
        secret: %s
        callback: %s/callback
log:
  format: json
  level: info
ai:
  providers:
    fake: {api: openai-completions, baseUrl: "%s", apiKey: test, models: [{id: m1, cost: {input: 1, output: 2}}]}
  agents:
    zhin: {provider: fake, model: m1}
`, srv.URL, webhookAddr, botID, botSecret, cb.srv.URL, mdl.BaseURL())
	type role struct {
		name, metrics string
		proc          *childproc.Proc
	}
	start := func(name string, port int) *role {
		t.Helper()
		r := &role{name: name, metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", port)}
		cfgPath := filepath.Join(dir, name+".yml")
		if err := os.WriteFile(cfgPath, []byte(strings.Replace(yml, "DATADIR", filepath.Join(dir, name), 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		p, err := childproc.Start(childproc.Spec{Name: name, Path: filepath.Join(bin, strings.TrimSuffix(name, "-b")),
			Args: []string{"--config", cfgPath, "--metrics-listen", fmt.Sprintf("127.0.0.1:%d", port)},
			Log:  filepath.Join(dir, name+".log")})
		if err != nil {
			t.Fatal(err)
		}
		r.proc = p
		t.Cleanup(func() { p.Stop(20 * time.Second) })
		// /metrics is served once every role of the process has started.
		deadline := time.Now().Add(waitMargin)
		for {
			if _, err := scrape(r.metrics); err == nil {
				return r
			}
			select {
			case <-p.Exited():
				t.Fatalf("%s exited:\n%s", name, childproc.Tail(p.LogPath(), 20))
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: /metrics not served after %s:\n%s", name, waitMargin, childproc.Tail(p.LogPath(), 20))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	egress := start("egress", ports[1])
	tool := start("tool-worker", ports[2])
	turnA := start("turn-worker", ports[3])
	ingest := start("ingest", ports[4])

	pl := &pipeline{t: t, p: &app.Process{WebhookURL: "http://" + webhookAddr}, model: mdl, cb: cb}
	// user_profile served by the tool worker
	testwait.Eventually(t, waitMargin, func() error {
		mfs, err := scrape(tool.metrics)
		if err != nil {
			return err
		}
		if _, n := total(mfs["agentbus_consumer_pending_messages"], map[string]string{"stream": events.StreamToolCalls}); n == 0 {
			return fmt.Errorf("no TOOL_CALLS consumer reported yet")
		}
		return nil
	})
	first := private("msg-1", "u1", "remember that I live in Paris")
	pl.post(first)
	if r := pl.repliesIn("u1", 1)[0]; !strings.HasPrefix(r.Text(), "saved:") {
		t.Fatalf("reply %q, want the tool turn's answer", r.Text())
	}
	// The same message again: a duplicate (and u1's second request of its burst of two).
	if body := pl.post(first); !strings.Contains(body, `"duplicate":true`) {
		t.Fatalf("repeated message: %s", body)
	}
	// u1's third request: 429.
	b := private("msg-1b", "u1", "too fast").body()
	if code, body := pl.postRaw(botID, b, webhook.Sign(botSecret, b)); code != http.StatusTooManyRequests {
		t.Fatalf("third request of u1: %d %s, want 429", code, body)
	}
	// A wrong signature: rejected.
	if code, _ := pl.postRaw(botID, b, webhook.Sign("wrong", b)); code != http.StatusUnauthorized {
		t.Fatalf("bad signature: %d, want 401", code)
	}
	pl.post(private("msg-2", "u2", "hello"))
	pl.repliesIn("u2", 1)
	// A part egress cannot decode: a dead letter of egress.
	nc, _ := srv.Connect(t)
	sk := events.SessionKey{Platform: "webhook", Bot: botID, Scope: "private", Scene: "u3"}
	if _, err := jetstreamPublish(nc, events.IMOutSubject(sk), []byte("not an event")); err != nil {
		t.Fatal(err)
	}

	want := []struct {
		role, name string
		typ        dto.MetricType
		labels     map[string]string // a series with these labels must exist and have moved
		moved      bool
	}{
		{"ingest", "agentbus_ingest_messages_total", dto.MetricType_COUNTER, map[string]string{"platform": "webhook", "bot": botID, "outcome": "accepted"}, true},
		{"ingest", "agentbus_ingest_messages_total", dto.MetricType_COUNTER, map[string]string{"outcome": "duplicate"}, true},
		{"ingest", "agentbus_ingest_messages_total", dto.MetricType_COUNTER, map[string]string{"outcome": "rejected"}, true},
		{"ingest", "agentbus_ingest_messages_total", dto.MetricType_COUNTER, map[string]string{"outcome": "rate_limited"}, true},
		{"ingest", "agentbus_webhook_requests_total", dto.MetricType_COUNTER, map[string]string{"code": "4xx"}, true},
		{"turn-worker", "agentbus_turns_total", dto.MetricType_COUNTER, map[string]string{"outcome": "completed"}, true},
		{"turn-worker", "agentbus_turn_duration_seconds", dto.MetricType_HISTOGRAM, nil, true},
		{"turn-worker", "agentbus_llm_requests_total", dto.MetricType_COUNTER, map[string]string{"provider": "fake", "model": "m1", "outcome": "ok"}, true},
		{"turn-worker", "agentbus_llm_request_duration_seconds", dto.MetricType_HISTOGRAM, map[string]string{"provider": "fake", "model": "m1"}, true},
		{"turn-worker", "agentbus_llm_tokens_total", dto.MetricType_COUNTER, map[string]string{"provider": "fake", "model": "m1", "kind": "input"}, true},
		{"turn-worker", "agentbus_llm_tokens_total", dto.MetricType_COUNTER, map[string]string{"kind": "output"}, true},
		{"turn-worker", "agentbus_llm_cost_usd_total", dto.MetricType_COUNTER, map[string]string{"provider": "fake", "model": "m1"}, true},
		{"turn-worker", "agentbus_sessions_owned", dto.MetricType_GAUGE, nil, true},
		{"turn-worker", "agentbus_consumer_pending_messages", dto.MetricType_GAUGE, map[string]string{"stream": events.StreamSessionIn, "consumer": "turn-workers"}, false},
		{"tool-worker", "agentbus_tool_calls_total", dto.MetricType_COUNTER, map[string]string{"tool": "user_profile", "outcome": "ok"}, true},
		{"tool-worker", "agentbus_tool_duration_seconds", dto.MetricType_HISTOGRAM, map[string]string{"tool": "user_profile"}, true},
		{"tool-worker", "agentbus_consumer_pending_messages", dto.MetricType_GAUGE, map[string]string{"stream": events.StreamToolCalls}, false},
		{"egress", "agentbus_egress_sends_total", dto.MetricType_COUNTER, map[string]string{"platform": "webhook", "outcome": "sent"}, true},
		{"egress", "agentbus_egress_sends_total", dto.MetricType_COUNTER, map[string]string{"outcome": "failed"}, true},
		{"egress", "agentbus_dead_letters_total", dto.MetricType_COUNTER, map[string]string{"role": "egress", "reason": "invalid"}, true},
		{"egress", "agentbus_consumer_pending_messages", dto.MetricType_GAUGE, map[string]string{"stream": events.StreamIMOut}, false},
	}
	urls := map[string]string{"ingest": ingest.metrics, "turn-worker": turnA.metrics, "tool-worker": tool.metrics, "egress": egress.metrics}
	check := func() error {
		got := map[string]map[string]*dto.MetricFamily{}
		for r, u := range urls {
			mfs, err := scrape(u)
			if err != nil {
				return err
			}
			got[r] = mfs
			// Every process: the build, the Go runtime and the process.
			for _, name := range []string{"agentbus_build_info", "go_goroutines", "process_cpu_seconds_total"} {
				if mfs[name] == nil {
					return fmt.Errorf("%s: no %s", r, name)
				}
			}
			if v, _ := total(mfs["agentbus_build_info"], nil); v != 1 {
				return fmt.Errorf("%s: agentbus_build_info = %v", r, v)
			}
		}
		for _, w := range want {
			mf := got[w.role][w.name]
			if mf == nil {
				return fmt.Errorf("%s: no family %s", w.role, w.name)
			}
			if mf.GetType() != w.typ {
				return fmt.Errorf("%s: %s is a %s, want %s", w.role, w.name, mf.GetType(), w.typ)
			}
			v, n := total(mf, w.labels)
			if n == 0 {
				return fmt.Errorf("%s: %s has no series with %v", w.role, w.name, w.labels)
			}
			if w.moved && v <= 0 {
				return fmt.Errorf("%s: %s%v = %v, want it moved", w.role, w.name, w.labels, v)
			}
		}
		return nil
	}
	// The consumer gauges are read every 15 s, the dead letter takes a moment.
	testwait.Eventually(t, waitMargin, check) // every family present and moved

	// Labels stay bounded: no series carries a session key, user id or message id.
	for r, u := range urls {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, leak := range []string{"u1", "u2", "msg-1", "msg-2", "webhook:b1", "call_1"} {
			for _, l := range strings.Split(string(body), "\n") {
				if strings.HasPrefix(l, "agentbus_") && strings.Contains(l, `"`+leak+`"`) {
					t.Errorf("%s: a label carries %q: %s", r, leak, l)
				}
			}
		}
	}

	// The turn worker's log: one info line per finished turn with the turn's story, each key
	// once per line.
	lines := jsonLines(t, turnA.proc.LogPath())
	var finished []map[string]any
	for _, l := range lines {
		if l["msg"] == "turn finished" {
			finished = append(finished, l)
		}
	}
	if len(finished) < 2 {
		t.Fatalf("%d 'turn finished' lines in the turn worker's log, want 2:\n%s", len(finished), childproc.Tail(turnA.proc.LogPath(), 20))
	}
	for _, k := range []string{"session", "turn", "trace", "models", "tokens_in", "tokens_out", "cost_usd", "tool_calls", "duration", "outcome", "role"} {
		if _, ok := finished[0][k]; !ok {
			t.Errorf("turn finished line lacks %q: %v", k, finished[0])
		}
	}
	if finished[0]["tool_calls"] != float64(1) || finished[0]["outcome"] != "completed" {
		t.Errorf("first turn's line: %v, want one tool call, completed", finished[0])
	}

	// A lease takeover: the turn worker dies (SIGKILL), another starts, u2 talks again (its
	// second request of two; u1 is over its limit).
	turnA.proc.Kill()
	turnB := start("turn-worker-b", ports[5])
	pl.post(private("msg-3", "u2", "still there?"))
	pl.repliesIn("u2", 2)
	testwait.Eventually(t, waitMargin, func() error { // a lease takeover counted
		mfs, err := scrape(turnB.metrics)
		if err != nil {
			return err
		}
		if v, n := total(mfs["agentbus_lease_takeovers_total"], nil); n == 0 || v < 1 {
			return fmt.Errorf("agentbus_lease_takeovers_total = %v (%d series)", v, n)
		}
		return nil
	})
}

// jsonLines reads a JSON-lines log, failing on a line that is not JSON or repeats a key.
func jsonLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		if dup := duplicateKey(line); dup != "" {
			t.Errorf("log line repeats key %q: %s", dup, line)
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, line)
		}
		out = append(out, m)
	}
	return out
}

// duplicateKey returns a top-level key that occurs twice in the JSON object line, or "".
func duplicateKey(line []byte) string {
	dec := json.NewDecoder(strings.NewReader(string(line)))
	if _, err := dec.Token(); err != nil { // {
		return ""
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		k, _ := tok.(string)
		if seen[k] {
			return k
		}
		seen[k] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return ""
		}
	}
	return ""
}

// jetstreamPublish publishes body on subj through JetStream and returns its ack.
func jetstreamPublish(nc *nats.Conn, subj string, body []byte) (*nats.Msg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return nc.RequestWithContext(ctx, subj, body)
}

// deploy/prometheus.yml scrapes every role service of docker-compose.yml on the port the
// compose file makes them serve /metrics on, and the compose file mounts it.
func TestPrometheusScrapeConfig(t *testing.T) {
	c := readCompose(t)
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var prom struct {
		ScrapeConfigs []struct {
			JobName      string `yaml:"job_name"`
			DNSSDConfigs []struct {
				Names []string `yaml:"names"`
				Type  string   `yaml:"type"`
				Port  int      `yaml:"port"`
			} `yaml:"dns_sd_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(raw, &prom); err != nil {
		t.Fatalf("deploy/prometheus.yml: %v", err)
	}
	scraped := map[string]int{}
	for _, sc := range prom.ScrapeConfigs {
		for _, d := range sc.DNSSDConfigs {
			for _, n := range d.Names {
				scraped[n] = d.Port
			}
		}
	}
	for _, svc := range []string{"ingest", "turn-worker", "tool-worker", "egress"} {
		listen := c.Services[svc].Environment["AGENTBUS_METRICS_LISTEN"]
		if listen == "" {
			t.Errorf("%s: no AGENTBUS_METRICS_LISTEN: the role serves no /metrics", svc)
			continue
		}
		if !strings.HasPrefix(listen, "0.0.0.0:") {
			t.Errorf("%s: AGENTBUS_METRICS_LISTEN %s is not reachable from the Prometheus container", svc, listen)
		}
		if port := fmt.Sprint(scraped[svc]); !strings.HasSuffix(listen, ":"+port) {
			t.Errorf("%s: serves metrics on %s, deploy/prometheus.yml scrapes port %s", svc, listen, port)
		}
	}
	mounted := false
	for _, v := range c.Services["prometheus"].Volumes {
		mounted = mounted || strings.HasPrefix(v, "./deploy/prometheus.yml:")
	}
	if !mounted {
		t.Error("the compose prometheus service does not mount deploy/prometheus.yml")
	}
}

// syncBuf is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A model request that fails once is retried by the provider (pkg/llm, which knows nothing of
// sessions); its warning still names the session, the turn, the provider and the model, which
// the turn worker and the model-call wrapper put on the request's context.
func TestModelRetryWarningNamesTheTurn(t *testing.T) {
	var buf syncBuf
	l, err := logging.New(&buf, "json", "warn")
	if err != nil {
		t.Fatal(err)
	}
	prev := slog.Default()
	slog.SetDefault(l)
	t.Cleanup(func() { slog.SetDefault(prev) })
	pl := newPipeline(t, func(r *fakeopenai.Request) fakeopenai.Reply {
		if r.N == 1 {
			return fakeopenai.Reply{Status: http.StatusServiceUnavailable}
		}
		return fakeopenai.Echo(r)
	}, pipelineOpts{})
	pl.post(private("r1", "u1", "hello after a retry"))
	if got := pl.replies(1)[0].Text(); !strings.Contains(got, "hello after a retry") {
		t.Fatalf("reply %q", got)
	}
	var warn map[string]any
	for _, line := range strings.Split(buf.String(), "\n") {
		if strings.Contains(line, "llm request failed, retrying") {
			if dup := duplicateKey([]byte(line)); dup != "" {
				t.Errorf("key %q twice: %s", dup, line)
			}
			if err := json.Unmarshal([]byte(line), &warn); err != nil {
				t.Fatal(err)
			}
		}
	}
	if warn == nil {
		t.Fatalf("no retry warning logged:\n%s", buf.String())
	}
	for k, v := range map[string]string{"provider": "fake", "model": "m1"} {
		if warn[k] != v {
			t.Errorf("%s = %v, want %s: %v", k, warn[k], v, warn)
		}
	}
	if s, _ := warn["session"].(string); !strings.HasPrefix(s, "webhook:"+botID+":private:u1") {
		t.Errorf("session = %v: %v", warn["session"], warn)
	}
	if tr, _ := warn["turn"].(string); !strings.HasPrefix(tr, "t") {
		t.Errorf("turn = %v: %v", warn["turn"], warn)
	}
}
