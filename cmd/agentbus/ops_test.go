package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/dlq"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/webhook"
)

// opsCallback is a webhook bot's callback that refuses every reply with 400 until fixed.
type opsCallback struct {
	srv    *httptest.Server
	broken atomic.Bool
	mu     sync.Mutex
	got    []string // bodies of the replies accepted
}

func newOpsCallback(t *testing.T) *opsCallback {
	cb := &opsCallback{}
	cb.broken.Store(true)
	cb.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if cb.broken.Load() {
			http.Error(w, "bad request: this callback is broken", http.StatusBadRequest)
			return
		}
		cb.mu.Lock()
		cb.got = append(cb.got, string(b))
		cb.mu.Unlock()
	}))
	t.Cleanup(cb.srv.Close)
	return cb
}

func (cb *opsCallback) accepted() []string {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	return append([]string(nil), cb.got...)
}

// closedAddr is an address where nothing listens.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// opsConfig is the pipeline's configuration: a fake model, a webhook bot whose callback is cb,
// and, when brokenTelegram, a Telegram bot whose Bot API server cannot be reached.
func opsConfig(dir, model, callback, telegramBase string) string {
	yml := fmt.Sprintf(`dataDir: %[1]s
nats:
  embedded: true
  storeDir: %[1]s/nats
  listen: "127.0.0.1:0"
health:
  listen: "127.0.0.1:0"
im:
  webhook:
    listen: "127.0.0.1:0"
    bots:
      - {id: b1, secret: s3cret-for-tests, callback: "%[3]s/callback"}
ai:
  providers:
    fake: {api: openai-completions, baseUrl: "%[2]s", apiKey: test}
  agents:
    zhin: {provider: fake, model: m1}
  agent:
    workspace: %[1]s/workspace
`, dir, model, callback)
	if telegramBase != "" {
		yml = strings.Replace(yml, "ai:\n", fmt.Sprintf("  telegram:\n    bots:\n      - {id: tg1, token: \"123:abc\", apiBase: %q, preview: \"off\"}\nai:\n", telegramBase), 1)
	}
	return yml
}

func runCmd(t *testing.T, f func(context.Context, []string, io.Writer) error, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := f(ctx, args, &out)
	return out.String(), err
}

func mustContain(t *testing.T, what, text string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Fatalf("%s lacks %q:\n%s", what, w, text)
		}
	}
}

// The operator's commands against a running pipeline: a reply the callback refuses becomes a
// dead letter; status, dlq, replay and sessions show it; the health listener's /readyz fails
// for the Telegram bot that cannot reach its server while /healthz stays 200; once the
// callback is fixed, dlq retry delivers the reply; purge empties the dead letters.
func TestOpsCommandsAgainstAPipeline(t *testing.T) {
	dir := t.TempDir()
	model := fakeopenai.New(t, fakeopenai.Echo)
	cb := newOpsCallback(t)
	yml := opsConfig(dir, model.BaseURL(), cb.srv.URL, "http://"+closedAddr(t))
	cfg, err := config.Parse([]byte(yml))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, yml)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := app.Start(ctx, cfg, app.Options{Roles: app.AllRoles, Out: io.Discard, NoProbe: true, Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	started := time.Now()

	// Health: the Telegram bot cannot connect. Liveness stays 200 and names it; readiness fails
	// naming it, unless the operator accepts running degraded.
	readyz := strings.TrimSuffix(p.HealthURL, "/healthz") + "/readyz"
	get := func(u string) (int, string) {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var code int
	var body string
	testwait.Eventually(t, 0, func() error {
		code, body = get(readyz)
		return testwait.Want(strings.Contains(body, "adapter telegram/tg1: disconnected"), "the telegram adapter not reported disconnected:\n%s", body)
	})
	if code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with a disconnected adapter: %d\n%s", code, body)
	}
	mustContain(t, "/readyz", body, "nats: connected", "streams: ok", "connection refused")
	if code, body = get(p.HealthURL); code != http.StatusOK || !strings.Contains(body, "adapter telegram/tg1: disconnected") {
		t.Fatalf("/healthz: %d\n%s", code, body)
	}
	if code, body = get(readyz + "?degraded=ok"); code != http.StatusOK || !strings.Contains(body, "degraded: adapter telegram/tg1") {
		t.Fatalf("/readyz?degraded=ok: %d\n%s", code, body)
	}

	// A message whose reply the callback refuses: egress dead-letters it.
	in := webhook.Inbound{ID: "m1", Scene: webhook.Scene{Type: "private", ID: "u1"}, Sender: webhook.Sender{ID: "u1", Name: "U"},
		Content: []webhook.Segment{events.TextSeg("hello ops")}, Time: time.Now().UnixMilli()}
	postWebhook(t, p.WebhookURL, in)
	store, err := dlq.Open(ctx, p.JS)
	if err != nil {
		t.Fatal(err)
	}
	var letters []dlq.Letter
	testwait.Eventually(t, 0, func() error {
		letters, _ = store.List(ctx, dlq.Filter{})
		return testwait.Want(len(letters) == 1, "%d dead letters, want the refused reply's 1", len(letters))
	})
	id := letters[0].ID
	sk := "webhook:b1:private:u1"

	// status: this process's replicas with host, pid and version; the sessions the turn worker
	// owns; the Telegram adapter's state; the consumers' backlog; the dead letter. It exits 1
	// because an adapter is not connected.
	out, err := runCmd(t, cmdStatus, "--data", dir)
	if err != errSilent {
		t.Fatalf("status with a disconnected adapter: err %v, want exit 1\n%s", err, out)
	}
	host, _ := os.Hostname()
	mustContain(t, "status", out, "ROLE", "turn-worker", "tool-worker", "egress", "ingest", host, fmt.Sprint(os.Getpid()), p.Turn.ID(),
		"telegram/tg1 on "+host, "disconnected", "Consumers (", "SESSION_IN", "Dead letters in the last 1h: 1", "egress/rejected: 1",
		"PROBLEM: adapter telegram/tg1")
	// The sessions a turn worker owns are as of its last worker-lease renewal (a third of the
	// lease's TTL): wait for one after the turn.
	testwait.Eventually(t, 0, func() error {
		var st Status
		jsonOut, _ := runCmd(t, cmdStatus, "--data", dir, "--json")
		if err := json.Unmarshal([]byte(jsonOut), &st); err != nil {
			t.Fatalf("status --json: %v\n%s", err, jsonOut)
		}
		for _, r := range st.Replicas {
			if r.Role == events.RoleTurnWorker {
				return testwait.Want(r.ID == p.Turn.ID() && r.Sessions == 1, "status --json to show the turn worker owning 1 session")
			}
		}
		return testwait.Want(false, "status --json to show the turn worker owning 1 session")
	})

	// dlq list and show: the letter with its reason, session and what to do.
	out, err = runCmd(t, cmdDLQ, "list", "--data", dir)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "dlq list", out, "ID", id, "egress", "rejected", sk)
	out, err = runCmd(t, cmdDLQ, "show", "--data", dir, id)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "dlq show", out, "dead letter "+id, "reason:     rejected", "400", "session:    "+sk, "from:       im.out.", "(IM_OUT seq",
		"retry:      agentbus dlq retry "+id, "echo: hello ops")

	// replay: the turn committed, but its reply was dead-lettered; each line at its own time.
	out, err = runCmd(t, cmdReplay, "--data", dir, sk)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "replay", out, "user: hello ops", "assistant: echo: hello ops", "reply NOT delivered: dead letter "+id,
		"✗ reply dead-lettered, NOT delivered by egress (rejected)", "[agentbus dlq show "+id+"]")
	checkReplayTimes(t, out, started)

	// sessions: the last activity is the reply's dead letter's time at the earliest... at least
	// the latest event the streams hold for the session (the turn's commit), not its start.
	out, err = runCmd(t, cmdSessions, "--data", dir, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var sess struct {
		SessionKey   string `json:"sessionKey"`
		LastActivity int64  `json:"lastActivity"`
	}
	if err := json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &sess); err != nil {
		t.Fatalf("sessions --json: %v\n%s", err, out)
	}
	commit := lastCommit(t, ctx, p, sk)
	if sess.SessionKey != sk || sess.LastActivity < commit.UnixMilli() {
		t.Fatalf("sessions: %+v, want last activity at or after the commit %s", sess, commit)
	}

	// The callback is fixed: retry delivers the reply, and the letter is gone.
	cb.broken.Store(false)
	out, err = runCmd(t, cmdDLQ, "retry", "--data", dir, id)
	if err != nil {
		t.Fatalf("dlq retry: %v\n%s", err, out)
	}
	mustContain(t, "dlq retry", out, "dead letter "+id+" put back on im.out.", "IM_OUT seq")
	testwait.Eventually(t, 0, func() error {
		got := cb.accepted()
		return testwait.Want(len(got) == 1 && strings.Contains(got[0], "echo: hello ops"), "the retried reply is not at the callback: %q", got)
	})
	if out, _ = runCmd(t, cmdDLQ, "list", "--data", dir); !strings.Contains(out, "no dead letters") {
		t.Fatalf("dlq list after the retry:\n%s", out)
	}

	// Two more refused replies; purge removes them.
	cb.broken.Store(true)
	for _, m := range []string{"m2", "m3"} {
		in.ID, in.Time = m, time.Now().UnixMilli()
		in.Content = []webhook.Segment{events.TextSeg("again " + m)}
		postWebhook(t, p.WebhookURL, in)
	}
	testwait.Eventually(t, 0, func() error {
		letters, _ = store.List(ctx, dlq.Filter{})
		return testwait.Want(len(letters) == 2, "%d new dead letters, want 2", len(letters))
	})
	out, err = runCmd(t, cmdDLQ, "purge", "--data", dir, "--role", "egress")
	if err != nil || !strings.Contains(out, "2 dead letters purged") {
		t.Fatalf("dlq purge: %v\n%s", err, out)
	}
	if out, _ = runCmd(t, cmdDLQ, "list", "--data", dir); !strings.Contains(out, "no dead letters") {
		t.Fatalf("dlq list after the purge:\n%s", out)
	}
}

// checkReplayTimes: every stamped line of a replay is within the test, in order of the turn's
// story (the user's message, the answer, the commit, the dead letter).
func checkReplayTimes(t *testing.T, out string, started time.Time) {
	t.Helper()
	re := regexp.MustCompile(`(?m)^(\d\d:\d\d:\d\d\.\d\d\d)  (user:|assistant:|✓ committed|✗ reply)`)
	var prev time.Time
	var seen []string
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		ts, err := time.ParseInLocation("15:04:05.000", m[1], time.Local)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		ts = time.Date(now.Year(), now.Month(), now.Day(), ts.Hour(), ts.Minute(), ts.Second(), ts.Nanosecond(), time.Local)
		if ts.Before(started.Add(-time.Second)) || ts.After(now.Add(time.Second)) {
			t.Fatalf("replay line %q is stamped outside the test (%s..%s):\n%s", m[0], started, now, out)
		}
		if ts.Before(prev) {
			t.Fatalf("replay line %q is stamped before the line above it:\n%s", m[0], out)
		}
		prev = ts
		seen = append(seen, m[2])
	}
	if want := []string{"user:", "assistant:", "✓ committed", "✗ reply"}; strings.Join(seen, "|") != strings.Join(want, "|") {
		t.Fatalf("replay lines %q, want %q:\n%s", seen, want, out)
	}
}

// lastCommit is the time of the last context commit of the session's first epoch.
func lastCommit(t *testing.T, ctx context.Context, p *app.Process, sk string) time.Time {
	t.Helper()
	k, err := events.ParseSessionKey(sk)
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.JS.Stream(ctx, events.StreamAgentCtx)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, events.AgentCtxSubject(events.SessionID{Key: k, Epoch: 1}))
	if err != nil {
		t.Fatal(err)
	}
	return m.Time
}

func postWebhook(t *testing.T, base string, in webhook.Inbound) {
	t.Helper()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, base+"/webhook/b1", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(webhook.SignatureHeader, webhook.Sign("s3cret-for-tests", b))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		rb, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST webhook: %d %s", resp.StatusCode, rb)
	}
}

// The doctor passes a good configuration against a running bus, and fails a broken one with
// one line per problem: a provider without its key, an endpoint nobody answers, a data
// directory that cannot be written.
func TestDoctor(t *testing.T) {
	dir := t.TempDir()
	model := fakeopenai.New(t, fakeopenai.Echo)
	cb := newOpsCallback(t)
	good := filepath.Join(dir, "agentbus.yml")
	if err := os.WriteFile(good, []byte(opsConfig(dir, model.BaseURL(), cb.srv.URL, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(good)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := app.Start(ctx, cfg, app.Options{Roles: app.AllRoles, Out: io.Discard, NoProbe: true, Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(context.Background()) })

	out, err := runCmd(t, cmdDoctor, "--config", good, "--data", dir)
	if err != nil {
		t.Fatalf("doctor on a good config: %v\n%s", err, out)
	}
	mustContain(t, "doctor", out, "ok    config: "+good, "ok    bus: connected", "ok    jetstream:", "ok    streams: all",
		"ok    provider fake key: present", "ok    provider fake endpoint: ", "models listed (m1", "ok    adapter webhook/b1 callback:",
		"sandbox:", "ok    data dir: "+dir+" writable", "disk:", "checks passed")
	if strings.Contains(out, "FAIL") {
		t.Fatalf("doctor on a good config:\n%s", out)
	}

	// Broken: the key comes from an unset variable, the endpoint is closed, the data directory
	// lies under a file.
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(t.TempDir(), "broken.yml")
	yml := fmt.Sprintf(`dataDir: %s/data
ai:
  providers:
    remote: {api: anthropic-messages, baseUrl: "http://%s"}
  agents:
    zhin: {provider: remote, model: m1}
`, file, closedAddr(t))
	if err := os.WriteFile(broken, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("REMOTE_API_KEY", "")
	out, err = runCmd(t, cmdDoctor, "--config", broken, "--data", dir)
	if err != errSilent {
		t.Fatalf("doctor on a broken config: err %v, want exit 1\n%s", err, out)
	}
	mustContain(t, "doctor", out,
		"FAIL  provider remote key: no API key — set ai.providers.remote.apiKey (e.g. ${REMOTE_API_KEY}) or export REMOTE_API_KEY",
		"FAIL  provider remote endpoint: ", "connection refused", "— check baseUrl/host",
		"FAIL  data dir: "+file+"/data is not usable: not a directory", "— point dataDir at a directory",
		"checks failed")
}

// quietLog discards the pipeline's logs unless -v.
func quietLog() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// Every command of docs/operations.md's ops block runs, in order, against a running pipeline
// whose webhook callback refuses every reply (so there are dead letters to list, show, retry,
// discard and purge), and exits 0.
func TestOperationsDocCommands(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	block := string(doc)
	start, end := strings.Index(block, "<!-- ops-commands -->"), strings.Index(block, "<!-- /ops-commands -->")
	if start < 0 || end < start {
		t.Fatal("docs/operations.md has no <!-- ops-commands --> block")
	}
	var commands [][]string
	for _, line := range strings.Split(block[start:end], "\n") {
		if strings.HasPrefix(line, "agentbus ") {
			commands = append(commands, strings.Fields(line)[1:])
		}
	}
	if len(commands) < 10 {
		t.Fatalf("only %d commands in the ops block", len(commands))
	}

	dir := t.TempDir()
	model := fakeopenai.New(t, fakeopenai.Echo)
	cb := newOpsCallback(t)
	cfgPath := filepath.Join(dir, "agentbus.yml")
	if err := os.WriteFile(cfgPath, []byte(opsConfig(dir, model.BaseURL(), cb.srv.URL, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	p, err := app.Start(ctx, cfg, app.Options{Roles: app.AllRoles, Out: io.Discard, NoProbe: true, Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	store, err := dlq.Open(ctx, p.JS)
	if err != nil {
		t.Fatal(err)
	}
	postWebhook(t, p.WebhookURL, webhook.Inbound{ID: "m1", Scene: webhook.Scene{Type: "private", ID: "u1"},
		Sender: webhook.Sender{ID: "u1", Name: "U"}, Content: []webhook.Segment{events.TextSeg("hello docs")}, Time: time.Now().UnixMilli()})

	used := map[string]bool{} // retried or discarded
	freshID := func() string {
		var id string
		testwait.Eventually(t, 0, func() error {
			ls, _ := store.List(ctx, dlq.Filter{})
			for i := len(ls) - 1; i >= 0; i-- {
				if !used[ls[i].ID] {
					id = ls[i].ID
					return nil
				}
			}
			return testwait.Want(false, "a dead letter")
		})
		return id
	}
	health := strings.TrimSuffix(p.HealthURL, "/healthz")
	for _, c := range commands {
		args := append([]string(nil), c...)
		id := ""
		for i, a := range args {
			switch {
			case a == "ID":
				id = freshID()
				args[i] = id
			case strings.HasPrefix(a, "http://127.0.0.1:8081"):
				args[i] = health + strings.TrimPrefix(a, "http://127.0.0.1:8081")
			}
		}
		// The connection flags go right after the command words (before any argument).
		at := 1
		if args[0] == "dlq" {
			at = 2
		}
		var extra []string
		switch args[0] {
		case "health":
		case "doctor":
			extra = []string{"--config", cfgPath, "--data", dir}
		default:
			extra = []string{"--data", dir}
		}
		args = append(append(append([]string(nil), args[:at]...), extra...), args[at:]...)
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 0 {
			t.Fatalf("agentbus %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
		}
		if len(args) > 1 && args[0] == "dlq" && (args[1] == "retry" || args[1] == "discard") {
			used[id] = true
		}
		t.Logf("agentbus %s\n%s", strings.Join(c, " "), stdout.String())
	}
}
