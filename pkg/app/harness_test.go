package app_test

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
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
	"github.com/agentbus/agentbus/pkg/webhook"
)

const (
	botID     = "b1"
	botSecret = "s3cret-for-tests"
	master    = "boss"
)

var (
	stopping sync.WaitGroup // processes still stopping
	dirsMu   sync.Mutex
	dirs     []string // data directories to remove once every process has stopped
)

func TestMain(m *testing.M) {
	if kind := os.Getenv(faultChildEnv); kind != "" {
		os.Exit(faultChild(kind)) // a child process of TestFaultCluster
	}
	code := m.Run()
	stopping.Wait()
	for _, d := range dirs {
		_ = os.RemoveAll(d)
	}
	os.Exit(code)
}

// pipeline is one `agentbus up` process (embedded NATS, all four roles) whose model is the real
// openai-completions provider talking to a fake OpenAI server, and whose webhook bot's callback
// is a recording HTTP server.
type pipeline struct {
	t     *testing.T
	dir   string // data directory
	p     *app.Process
	model *fakeopenai.Server
	cb    *callback
}

type pipelineOpts struct {
	concurrency     string // ai.agent.concurrency ("" = default)
	collectWindowMs int64
	timeoutMs       int64  // ai.agent.timeout
	apiKey          string // the fake provider's key ("" = "test")
	agentYAML       string // more ai.agent keys, one per line, indented by four spaces
	vision          bool   // the fake provider's models take images
	provider        string // more entries of the fake provider's flow map, e.g. ", contextWindow: 4000"
	busSubject      string // when set, the provider "fake" is api: bus on this subject (served by the test)
	ai              string // more blocks of ai (after ai.agent), indented by two spaces
	storage         string // nats.storage ("" = memory)
	natsURL         string // when set, the NATS server to use instead of an embedded one

	// log, when set, gets the process's log as JSON at info (instead of testLogger).
	log io.Writer
}

func newPipeline(t *testing.T, script fakeopenai.Script, o pipelineOpts) *pipeline {
	t.Helper()
	model := fakeopenai.New(t, script)
	cb := newCallback(t)
	dir, err := os.MkdirTemp("", "agentbus-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	dirsMu.Lock()
	dirs = append(dirs, dir)
	dirsMu.Unlock()
	if o.apiKey == "" {
		o.apiKey = "test"
	}
	agent := ""
	if o.concurrency != "" {
		agent += fmt.Sprintf("    concurrency: %s\n", o.concurrency)
	}
	if o.timeoutMs != 0 {
		agent += fmt.Sprintf("    timeout: %d\n", o.timeoutMs)
	}
	if o.collectWindowMs != 0 {
		agent += fmt.Sprintf("    collectWindowMs: %d\n", o.collectWindowMs)
	}
	agent += o.agentYAML + o.ai
	vision := ""
	if o.vision {
		vision = ", capabilities: {vision: true}"
	}
	prov := fmt.Sprintf(`{api: openai-completions, baseUrl: "%s", apiKey: "%s"%s}`, model.BaseURL(), o.apiKey, vision+o.provider)
	if o.busSubject != "" {
		prov = fmt.Sprintf(`{api: bus, subject: %s%s}`, o.busSubject, vision+o.provider)
	}
	if o.storage == "" {
		o.storage = "memory"
	}
	server := fmt.Sprintf("  embedded: true\n  storeDir: %s\n  listen: \"127.0.0.1:0\"", filepath.Join(dir, "nats"))
	if o.natsURL != "" {
		server = fmt.Sprintf("  url: %q", o.natsURL)
	}
	yml := fmt.Sprintf(`
dataDir: %[1]s
nats:
%[10]s
  storage: %[9]s
im:
  webhook:
    listen: "127.0.0.1:0"
    # Tests send bursts from one sender (a master's commands); the limits have their own tests.
    rateLimit: {perSender: {perSecond: 100, burst: 200}}
    bots:
      - id: %[3]s
        secret: %[4]s
        callback: %[5]s/callback
        masters: [%[6]s]
ai:
  providers:
    fake: %[7]s
  agents:
    zhin: {provider: fake, model: m1}
  agent:
    maxIterations: 8
%[8]s`, dir, filepath.Join(dir, "nats"), botID, botSecret, cb.srv.URL, master, prov, agent, o.storage, server)
	cfg, err := config.Parse([]byte(yml))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, yml)
	}
	ctx, cancel := context.WithCancel(context.Background())
	start := time.Now()
	log := testLogger()
	if o.log != nil {
		log = slog.New(slog.NewJSONHandler(o.log, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	p, err := app.Start(ctx, cfg, app.Options{Roles: app.AllRoles, Out: io.Discard, Log: log, NoProbe: true})
	if err != nil {
		cancel()
		t.Fatalf("start: %v", err)
	}
	t.Logf("pipeline started in %s", time.Since(start))
	// Stopping a process takes seconds (the tool worker's pull requests run out their
	// PollWait first), so tests do not wait for it: TestMain does, before removing the data
	// directories.
	t.Cleanup(func() {
		stopping.Add(1)
		go func() {
			defer stopping.Done()
			_ = p.Stop(context.Background())
			cancel()
		}()
	})
	if p.WebhookURL == "" {
		t.Fatal("no webhook URL: ingest did not start the webhook adapter")
	}
	return &pipeline{t: t, dir: dir, p: p, model: model, cb: cb}
}

// testLogger logs warnings to stderr under -v and nothing otherwise.
func testLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// msg builds an inbound webhook body.
type msg struct {
	id, scene, sceneID, sender, name, text string
	at                                     bool // add an at segment for the bot
}

func private(id, sender, text string) msg {
	return msg{id: id, scene: "private", sceneID: sender, sender: sender, name: strings.ToUpper(sender[:1]) + sender[1:], text: text}
}

func group(id, groupID, sender, text string, at bool) msg {
	return msg{id: id, scene: "group", sceneID: groupID, sender: sender, name: strings.ToUpper(sender[:1]) + sender[1:], text: text, at: at}
}

func (m msg) body() []byte {
	content := []webhook.Segment{events.TextSeg(m.text)}
	if m.at {
		content = append(content, events.AtSeg(botID, "zhin"))
	}
	b, err := json.Marshal(webhook.Inbound{
		ID: m.id, Scene: webhook.Scene{Type: m.scene, ID: m.sceneID},
		Sender: webhook.Sender{ID: m.sender, Name: m.name}, Content: content, Time: time.Now().UnixMilli(),
	})
	if err != nil {
		panic(err)
	}
	return b
}

func (m msg) key() events.SessionKey {
	return events.SessionKey{Platform: "webhook", Bot: botID, Scope: m.scene, Scene: m.sceneID}
}

// post sends a signed message, fails the test unless it is accepted (202) and returns the
// response body.
func (pl *pipeline) post(m msg) string {
	pl.t.Helper()
	b := m.body()
	code, body := pl.postRaw(botID, b, webhook.Sign(botSecret, b))
	if code != http.StatusAccepted {
		pl.t.Fatalf("POST %s: %d %s", m.id, code, body)
	}
	return body
}

// postRaw sends body to /webhook/{bot} with the given signature header ("" = none).
func (pl *pipeline) postRaw(bot string, body []byte, sig string) (int, string) {
	pl.t.Helper()
	req, err := http.NewRequest(http.MethodPost, pl.p.WebhookURL+"/webhook/"+bot, bytes.NewReader(body))
	if err != nil {
		pl.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if sig != "" {
		req.Header.Set(webhook.SignatureHeader, sig)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		pl.t.Fatalf("POST webhook: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitMargin bounds every wait on the pipeline. It is generous on purpose: the tests run on
// busy shared machines (a full -race suite on two cores), and a wait that succeeds costs only
// the time the condition takes, so only a failing test ever waits this long.
const waitMargin = 90 * time.Second

// replies waits until n replies have reached the callback and returns every reply so far.
func (pl *pipeline) replies(n int) []reply {
	pl.t.Helper()
	got, err := pl.cb.wait(n, waitMargin)
	if err != nil {
		pl.t.Fatalf("%v; replies: %s", err, fmtReplies(got))
	}
	return got
}

// repliesIn waits until n replies in the scene sceneID have reached the callback.
func (pl *pipeline) repliesIn(sceneID string, n int) []reply {
	pl.t.Helper()
	got, err := pl.cb.waitFor(n, waitMargin, func(r reply) bool { return r.Scene.ID == sceneID })
	if err != nil {
		pl.t.Fatalf("scene %s: %v; replies: %s", sceneID, err, fmtReplies(pl.cb.all()))
	}
	return got
}

// waitToolsServed asks /health (through the whole pipeline, in the private chat of a probe
// user) until the turn worker sees at least one tool served.
func (pl *pipeline) waitToolsServed() {
	pl.t.Helper()
	served := regexp.MustCompile(`(\d+) tools? served`)
	for i := 1; ; i++ {
		pl.post(private(fmt.Sprintf("probe-%d", i), "probe", "/health"))
		got := pl.repliesIn("probe", i)
		if m := served.FindStringSubmatch(got[i-1].Text()); m != nil && m[1] != "0" {
			return
		}
		if i == 50 {
			pl.t.Fatalf("no tools served after %d /health probes: %q", i, got[i-1].Text())
		}
		time.Sleep(100 * time.Millisecond) // pace the probes: each one is a turn
	}
}

// settle waits a little and fails if more than n replies arrived (a duplicate or an unwanted
// answer would show up within that time).
func (pl *pipeline) settle(n int) []reply {
	pl.t.Helper()
	time.Sleep(400 * time.Millisecond) // the window a duplicate would show up in
	got := pl.cb.all()
	if len(got) != n {
		pl.t.Fatalf("%d replies, want exactly %d: %s", len(got), n, fmtReplies(got))
	}
	return got
}

// requests waits until n model requests have arrived.
func (pl *pipeline) requests(n int) []fakeopenai.Request {
	pl.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitMargin)
	defer cancel()
	rs, err := pl.model.WaitRequests(ctx, n)
	if err != nil {
		pl.t.Fatal(err)
	}
	return rs
}

// streamMsgs is the number of messages a stream holds.
func (pl *pipeline) streamMsgs(name string) uint64 {
	pl.t.Helper()
	s, err := pl.p.JS.Stream(context.Background(), name)
	if err != nil {
		pl.t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		pl.t.Fatal(err)
	}
	return info.State.Msgs
}

// lastMsg polls a stream for the last message on subject.
func (pl *pipeline) lastMsg(stream, subject string) *jetstream.RawStreamMsg {
	pl.t.Helper()
	s, err := pl.p.JS.Stream(context.Background(), stream)
	if err != nil {
		pl.t.Fatal(err)
	}
	var m *jetstream.RawStreamMsg
	testwait.Eventually(pl.t, waitMargin, func() error {
		m, err = s.GetLastMsgForSubject(context.Background(), subject)
		if err != nil {
			return fmt.Errorf("no message on %s %s: %w", stream, subject, err)
		}
		return nil
	})
	return m
}

// lastInbound is the last inbound message of sk as the bus stores it (im.LastInbound), as the
// JSON of an im.message event, waiting for it as lastMsg does.
func (pl *pipeline) lastInbound(sk events.SessionKey) *jetstream.RawStreamMsg {
	pl.t.Helper()
	deadline := time.Now().Add(waitMargin)
	for {
		m, ok := im.LastInbound(context.Background(), pl.p.JS, sk)
		if ok {
			b, err := events.Marshal(events.New(m))
			if err != nil {
				pl.t.Fatal(err)
			}
			return &jetstream.RawStreamMsg{Data: b}
		}
		if time.Now().After(deadline) {
			pl.t.Fatalf("no inbound message of %s on the bus", sk)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// reply is one POST the egress made to the callback.
type reply struct {
	webhook.Outbound
	SigOK bool
	At    time.Time
}

func (r reply) Text() string { return events.Segments(r.Content).PlainText() }

func fmtReplies(rs []reply) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "\n  [%s replyTo=%s scene=%s/%s] %q", r.ID, r.ReplyTo, r.Scene.Type, r.Scene.ID, r.Text())
	}
	return b.String()
}

// callback is the bot's callback endpoint: it verifies and records every reply.
type callback struct {
	srv *httptest.Server

	mu      sync.Mutex
	got     []reply
	changed chan struct{}
}

func newCallback(t *testing.T) *callback {
	c := &callback{changed: make(chan struct{})}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil || r.URL.Path != "/callback" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		var out webhook.Outbound
		if err := json.Unmarshal(body, &out); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rep := reply{Outbound: out, At: time.Now(),
			SigOK: webhook.Verify(botSecret, body, r.Header.Get(webhook.SignatureHeader)) == nil}
		c.mu.Lock()
		c.got = append(c.got, rep)
		close(c.changed)
		c.changed = make(chan struct{})
		n := len(c.got)
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"platform-%d"}`, n)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *callback) all() []reply {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]reply(nil), c.got...)
}

func (c *callback) wait(n int, timeout time.Duration) ([]reply, error) {
	return c.waitFor(n, timeout, nil)
}

// waitFor waits until n replies that keep (nil: all) has reached the callback.
func (c *callback) waitFor(n int, timeout time.Duration, keep func(reply) bool) ([]reply, error) {
	deadline := time.After(timeout)
	for {
		c.mu.Lock()
		var got []reply
		for _, r := range c.got {
			if keep == nil || keep(r) {
				got = append(got, r)
			}
		}
		ch := c.changed
		c.mu.Unlock()
		if len(got) >= n {
			return got, nil
		}
		select {
		case <-ch:
		case <-deadline:
			return got, fmt.Errorf("%d replies at the callback after %s, want %d", len(got), timeout, n)
		}
	}
}
