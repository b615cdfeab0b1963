package webconsole_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/webconsole"
	"github.com/agentbus/agentbus/pkg/webhook"
)

const (
	botID     = "b1"
	botSecret = "s3cret-for-console-tests"
	apiKey1   = "sk-test-key-one-0123456789"
	apiKey2   = "sk-test-key-two-0123456789"
	testToken = "console-test-token-0123456789abcdef"
)

// waitMargin bounds every wait: the machine running the tests is shared and busy; a wait that
// succeeds costs only the time its condition takes.
const waitMargin = 90 * time.Second

// pipeline is one in-process `agentbus up` (embedded NATS, all four roles) whose models are
// the real openai-completions provider against two fake OpenAI servers (fake/m1, fake2/m2),
// with a webhook bot whose callback records replies (and rejects them while reject is set), and
// a console served on a loopback port.
type pipeline struct {
	t      *testing.T
	p      *app.Process
	cfg    *config.Config
	m1, m2 *fakeopenai.Server
	cb     *callback
	url    string // the console's base URL
	srv    *webconsole.Server
}

func newPipeline(t testing.TB, script1, script2 fakeopenai.Script, agentYAML string) *pipeline {
	t.Helper()
	m1, m2 := fakeopenai.New(t, script1), fakeopenai.New(t, script2)
	cb := newCallback(t)
	dir := t.TempDir()
	yml := fmt.Sprintf(`
dataDir: %[1]s
nats:
  embedded: true
  storeDir: %[1]s/nats
  listen: "127.0.0.1:0"
  storage: memory
im:
  webhook:
    listen: "127.0.0.1:0"
    rateLimit: {perBot: {perSecond: 1000, burst: 2000}, perSender: {perSecond: 1000, burst: 2000}}
    bots:
      - id: %[2]s
        secret: %[3]s
        callback: %[4]s/callback
        masters: [boss]
ai:
  providers:
    fake: {api: openai-completions, baseUrl: "%[5]s", apiKey: "%[7]s", models: [{id: m1, cost: {input: 3, output: 15}}]}
    fake2: {api: openai-completions, baseUrl: "%[6]s", apiKey: "%[8]s", models: [{id: m2, cost: {input: 0.5, output: 1.5}}]}
  agents:
    zhin: {provider: fake, model: m1}
  agent:
    maxIterations: 8
%[9]s
console:
  token: %[10]s
`, dir, botID, botSecret, cb.srv.URL, m1.BaseURL(), m2.BaseURL(), apiKey1, apiKey2, agentYAML, testToken)
	cfg, err := config.Parse([]byte(yml))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, yml)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p, err := app.Start(ctx, cfg, app.Options{Roles: app.AllRoles, Out: io.Discard, Log: testLogger(), NoProbe: true})
	if err != nil {
		cancel()
		t.Fatalf("start: %v", err)
	}
	srv, err := webconsole.New(ctx, webconsole.Options{JS: p.JS, Token: testToken, Config: cfg, Log: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := webconsole.Listen("127.0.0.1:0", srv)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = ln.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-served
		_ = p.Stop(context.Background())
	})
	return &pipeline{t: nil, p: p, cfg: cfg, m1: m1, m2: m2, cb: cb, url: ln.URL(), srv: srv}
}

func testLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func key(user string) events.SessionKey {
	return events.SessionKey{Platform: "webhook", Bot: botID, Scope: "private", Scene: user}
}

// post sends a signed private message from user to the bot and fails unless it is accepted.
func (pl *pipeline) post(t testing.TB, id, user, text string) {
	t.Helper()
	b, _ := json.Marshal(webhook.Inbound{ID: id, Scene: webhook.Scene{Type: "private", ID: user},
		Sender: webhook.Sender{ID: user, Name: user}, Content: []webhook.Segment{events.TextSeg(text)}, Time: time.Now().UnixMilli()})
	req, _ := http.NewRequest(http.MethodPost, pl.p.WebhookURL+"/webhook/"+botID, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(webhook.SignatureHeader, webhook.Sign(botSecret, b))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST %s: %d %s", id, resp.StatusCode, body)
	}
}

// waitTool waits until a tool worker serves tool (its entry is in KV tools).
func (pl *pipeline) waitTool(t testing.TB, tool string) {
	t.Helper()
	kv, err := pl.p.JS.KeyValue(context.Background(), events.BucketTools)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, waitMargin, func() error {
		if _, err := kv.Get(context.Background(), events.EncodeToken(tool)); err != nil {
			return fmt.Errorf("tool %s is not served: %w", tool, err)
		}
		return nil
	})
}

// get fetches path from the console with the session cookie of jar (nil = none).
func (pl *pipeline) get(t testing.TB, c *http.Client, path string) (int, string) {
	t.Helper()
	resp, err := c.Get(pl.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// callback records replies; while reject is set it answers 400, which egress treats as a
// permanent failure and dead-letters.
type callback struct {
	srv    *httptest.Server
	reject atomic.Bool

	mu      sync.Mutex
	got     []webhook.Outbound
	changed chan struct{}
}

func newCallback(t testing.TB) *callback {
	c := &callback{changed: make(chan struct{})}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if c.reject.Load() {
			http.Error(w, "bot was removed from the chat", http.StatusBadRequest)
			return
		}
		var out webhook.Outbound
		if err := json.Unmarshal(body, &out); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.got = append(c.got, out)
		n := len(c.got)
		close(c.changed)
		c.changed = make(chan struct{})
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"platform-%d"}`, n)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// wait waits until n replies have arrived and returns their texts.
func (c *callback) wait(t testing.TB, n int) []string {
	t.Helper()
	deadline := time.After(waitMargin)
	for {
		c.mu.Lock()
		got, ch := len(c.got), c.changed
		var texts []string
		for _, o := range c.got {
			texts = append(texts, events.Segments(o.Content).PlainText())
		}
		c.mu.Unlock()
		if got >= n {
			return texts
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("%d replies after %s, want %d: %q", got, waitMargin, n, texts)
		}
	}
}

func dataDir(pl *pipeline) string { return filepath.Clean(pl.cfg.DataDir) }

var _ = strings.Contains

func strconvFormat(n uint64) string { return fmt.Sprint(n) }
