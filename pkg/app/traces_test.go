package app_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/agentbus/agentbus/internal/childproc"
	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/internal/otlptest"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/webhook"
)

// tracedCallback is the bot's callback endpoint, recording each reply with the traceparent
// header it came with.
type tracedCallback struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []tracedReply
}

type tracedReply struct {
	webhook.Outbound
	Traceparent string
}

func newTracedCallback(t *testing.T) *tracedCallback {
	c := &tracedCallback{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var out webhook.Outbound
		if err := json.Unmarshal(body, &out); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.got = append(c.got, tracedReply{Outbound: out, Traceparent: r.Header.Get("traceparent")})
		c.mu.Unlock()
		fmt.Fprint(w, `{}`)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// waitReply waits for a reply in the scene sceneID whose text contains want.
func (c *tracedCallback) waitReply(t *testing.T, sceneID, want string) tracedReply {
	t.Helper()
	deadline := time.Now().Add(waitMargin)
	for {
		c.mu.Lock()
		for _, r := range c.got {
			if r.Scene.ID == sceneID && strings.Contains(events.Segments(r.Content).PlainText(), want) {
				c.mu.Unlock()
				return r
			}
		}
		n := len(c.got)
		c.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no reply in %s containing %q after %s (%d replies)", sceneID, want, waitMargin, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTraceAcrossRoleProcesses: the four role binaries (cmd/ingest, cmd/turn-worker,
// cmd/tool-worker, cmd/egress), each an OS process of its own with only the OTEL_* variables
// set, against a nats-server configured by deploy/nats.conf, export to an in-memory OTLP/HTTP
// collector. One webhook message that causes a tool call, sent with a caller's traceparent,
// is one trace: the caller's, with spans from every role, each span's parent in the trace, the
// GenAI attributes on the model calls, and the callback POST carrying the trace onward.
func TestTraceAcrossRoleProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the role binaries and starts four processes")
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(os.PathSeparator), "./cmd/ingest", "./cmd/turn-worker", "./cmd/tool-worker", "./cmd/egress")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build the role binaries: %v\n%s", err, out)
	}

	busPasswords(t)
	opts, err := server.ProcessConfigFile(filepath.Join("..", "..", "deploy", "nats.conf"))
	if err != nil {
		t.Fatalf("deploy/nats.conf: %v", err)
	}
	opts.JetStream, opts.StoreDir = true, t.TempDir()
	opts.Host, opts.Port, opts.HTTPPort = "127.0.0.1", server.RANDOM_PORT, 0
	opts.NoLog, opts.NoSigs = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		t.Fatal("server not ready")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	url := srv.ClientURL()
	provisionAsAdmin(t, url, events.DefaultSpec())

	const args = `{"action":"set","key":"city","value":"Paris"}`
	model := fakeopenai.New(t, func(r *fakeopenai.Request) fakeopenai.Reply {
		if res, ok := r.ToolResult("call_1"); ok {
			return fakeopenai.Reply{Text: "saved. the tool said: " + res}
		}
		if strings.Contains(r.LastUser(), "remember") && r.HasTool("user_profile") {
			return fakeopenai.Reply{Text: "one moment", ToolCalls: []fakeopenai.ToolCall{{ID: "call_1", Name: "user_profile", Arguments: args}}}
		}
		return fakeopenai.Echo(r)
	})
	collector := otlptest.New(t)
	cb := newTracedCallback(t)
	ports := freePorts(t, 5)
	webhookAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	cfgPath := filepath.Join(t.TempDir(), "agentbus.yml")
	cfg := fmt.Sprintf(`nats:
  url: ${AGENTBUS_NATS_URL}
  user: ${AGENTBUS_NATS_USER}
  password: ${AGENTBUS_NATS_PASSWORD}
  provision: wait
  replicas: 1
dataDir: ${AB_DATA}
im:
  webhook:
    listen: %q
    bots:
      - id: %s
        secret: %s
        callback: %s/callback
ai:
  providers:
    openai:
      api: openai-completions
      apiKey: test-key
      baseUrl: %s
  agents:
    zhin:
      provider: openai
      model: gpt-4o-mini
`, webhookAddr, botID, botSecret, cb.srv.URL, model.BaseURL())
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	logs := t.TempDir()
	roles := []struct{ bin, user string }{
		{"egress", natsutil.RoleEgress}, {"tool-worker", natsutil.RoleToolWorker},
		{"turn-worker", natsutil.RoleTurnWorker}, {"ingest", natsutil.RoleIngest},
	}
	for i, r := range roles {
		health := fmt.Sprintf("127.0.0.1:%d", ports[i+1])
		p, err := childproc.Start(childproc.Spec{Name: r.bin, Path: filepath.Join(bin, r.bin),
			Args: []string{"--config", cfgPath, "--health", health},
			Env: []string{
				"AGENTBUS_NATS_URL=" + url, "AGENTBUS_NATS_USER=" + r.user,
				"AGENTBUS_NATS_PASSWORD=" + os.Getenv(natsutil.PasswordEnv(r.user)),
				"AB_DATA=" + filepath.Join(t.TempDir(), r.bin),
				// Only the standard variables: the endpoint, and a short batch delay so the
				// spans arrive while the test waits.
				"OTEL_EXPORTER_OTLP_ENDPOINT=" + collector.URL, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
				"OTEL_BSP_SCHEDULE_DELAY=100",
			},
			Log: filepath.Join(logs, r.bin+".log")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			p.Stop(15 * time.Second)
			if t.Failed() {
				t.Logf("%s log:\n%s", r.bin, childproc.Tail(p.LogPath(), 40))
			}
		})
		waitHealthy(t, "http://"+health+"/healthz", p)
	}

	post := func(id, sender, text, traceparent string) {
		t.Helper()
		body := private(id, sender, text).body()
		req, _ := http.NewRequest(http.MethodPost, "http://"+webhookAddr+"/webhook/"+botID, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(webhook.SignatureHeader, webhook.Sign(botSecret, body))
		if traceparent != "" {
			req.Header.Set("traceparent", traceparent)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST %s: %d", id, resp.StatusCode)
		}
	}
	// The turn worker offers the tool once the tool worker registered it.
	served := regexp.MustCompile(`([1-9]\d*) tools? served`)
	for i := 1; ; i++ {
		post(fmt.Sprintf("probe-%d", i), "probe", "/health", "")
		if served.MatchString(events.Segments(cb.waitReply(t, "probe", "").Content).PlainText()) {
			break
		}
		if i == 50 {
			t.Fatal("no tool served after 50 /health probes")
		}
		cb.mu.Lock()
		cb.got = nil
		cb.mu.Unlock()
		time.Sleep(100 * time.Millisecond) // pace the probes: each one is a turn
	}

	// The caller (a platform that traces) sends the message in a trace of its own.
	var tid [16]byte
	var sid [8]byte
	_, _ = rand.Read(tid[:])
	_, _ = rand.Read(sid[:])
	traceID, callerSpan := hex.EncodeToString(tid[:]), hex.EncodeToString(sid[:])
	post("traced-1", "ann", "remember that I live in Paris", "00-"+traceID+"-"+callerSpan+"-01")
	reply := cb.waitReply(t, "ann", "saved. the tool said")

	// Every role exports what it recorded (batches every 100 ms).
	// 7 spans: the publish is part of the webhook request's span, and the callback POST of
	// the delivery's first attempt part of the send span (no "ingest webhook", no "POST").
	want := []string{"POST /webhook/{bot}", "turn", "chat gpt-4o-mini", "execute_tool user_profile", "send webhook"}
	var spans []otlptest.Span
	deadline := time.Now().Add(waitMargin)
	for {
		spans = collector.Trace(traceID)
		names := map[string]int{}
		for _, s := range spans {
			names[s.Name]++
		}
		complete := names["chat gpt-4o-mini"] >= 2 && names["execute_tool user_profile"] >= 2
		for _, n := range want {
			complete = complete && names[n] > 0
		}
		if complete {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s after %s: %v (refused exports: %v)", traceID, waitMargin, names, collector.Refused())
		}
		time.Sleep(50 * time.Millisecond)
	}

	byID := map[string]otlptest.Span{}
	services := map[string]bool{}
	for _, s := range spans {
		byID[s.SpanID] = s
		services[s.Service] = true
	}
	var layout []string
	for _, s := range spans {
		layout = append(layout, fmt.Sprintf("%s/%s<-%s", s.Service, s.Name, byID[s.ParentID].Name))
	}
	slices.Sort(layout)
	t.Logf("trace %s: %d spans\n  %s", traceID, len(spans), strings.Join(layout, "\n  "))
	for _, svc := range []string{"agentbus-ingest", "agentbus-turn-worker", "agentbus-tool-worker", "agentbus-egress"} {
		if !services[svc] {
			t.Errorf("no span from %s; services %v", svc, services)
		}
	}
	// One tree: the webhook request continues the caller's span, every other span's parent is
	// in the trace.
	for _, s := range spans {
		if s.Name == "POST /webhook/{bot}" {
			if s.ParentID != callerSpan || s.Service != "agentbus-ingest" {
				t.Errorf("webhook request span parent %s in %s, want the caller's %s", s.ParentID, s.Service, callerSpan)
			}
			continue
		}
		if _, ok := byID[s.ParentID]; !ok {
			t.Errorf("%s/%s: parent %q is not in the trace", s.Service, s.Name, s.ParentID)
		}
	}
	parentName := func(s otlptest.Span) string { return byID[s.ParentID].Service + "/" + byID[s.ParentID].Name }
	expectParent := map[string]string{
		"agentbus-turn-worker/turn":                      "agentbus-ingest/POST /webhook/{bot}",
		"agentbus-turn-worker/chat gpt-4o-mini":          "agentbus-turn-worker/turn",
		"agentbus-turn-worker/execute_tool user_profile": "agentbus-turn-worker/turn",
		"agentbus-tool-worker/execute_tool user_profile": "agentbus-turn-worker/execute_tool user_profile",
		"agentbus-egress/send webhook":                   "agentbus-turn-worker/turn",
	}
	for _, s := range spans {
		if wantParent, ok := expectParent[s.Service+"/"+s.Name]; ok && parentName(s) != wantParent {
			t.Errorf("%s/%s is a child of %s, want %s", s.Service, s.Name, parentName(s), wantParent)
		}
	}
	// The model calls carry the GenAI attributes; the tool spans the tool's name and call id.
	for _, s := range spans {
		switch s.Name {
		case "chat gpt-4o-mini":
			for k, v := range map[string]string{"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-4o-mini"} {
				if s.Attrs[k] != v {
					t.Errorf("model span %s = %q, want %q", k, s.Attrs[k], v)
				}
			}
			if s.Attrs["gen_ai.usage.input_tokens"] == "" || s.Attrs["gen_ai.usage.input_tokens"] == "0" || s.Attrs["gen_ai.usage.output_tokens"] == "" {
				t.Errorf("model span without usage: %v", s.Attrs)
			}
		case "execute_tool user_profile":
			if s.Attrs["gen_ai.tool.name"] != "user_profile" || !strings.HasSuffix(s.Attrs["gen_ai.tool.call.id"], "call_1") {
				t.Errorf("%s tool span attributes %v", s.Service, s.Attrs)
			}
		}
	}
	// The callback POST carries the trace onward: its traceparent names egress's send span,
	// which holds the answer's status.
	var send otlptest.Span
	for _, s := range spans {
		switch {
		case s.Service == "agentbus-egress" && s.Name == "send webhook":
			send = s
		case s.Name == "ingest webhook" || s.Name == "POST":
			t.Errorf("%s/%s: a span of its own again", s.Service, s.Name)
		}
	}
	if reply.Traceparent != "00-"+traceID+"-"+send.SpanID+"-01" {
		t.Errorf("callback traceparent %q, want the egress send span 00-%s-%s-01", reply.Traceparent, traceID, send.SpanID)
	}
	if send.Attrs["http.response.status_code"] != "200" {
		t.Errorf("send span attributes %v, want the callback's http.response.status_code 200", send.Attrs)
	}
}

// waitHealthy polls a role's /healthz until it answers 200.
func waitHealthy(t *testing.T, url string, p *childproc.Proc) {
	t.Helper()
	deadline := time.Now().Add(waitMargin)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-p.Exited():
			t.Fatalf("%s exited: %s", p.Name(), childproc.Tail(p.LogPath(), 20))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not healthy after %s: %v", p.Name(), waitMargin, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
