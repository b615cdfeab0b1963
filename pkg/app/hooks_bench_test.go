package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/webhook"
)

// BenchmarkHookLatency is what hooks cost a turn: one message after the other through the
// whole pipeline (webhook in, turn worker, the real openai-completions provider against
// fakeopenai answering at once, egress, callback out), ten messages per chat, without hooks and
// with one HTTP hook (a local server answering continue, signed requests) on message.received
// and context.transform. ns/op is the latency of one turn; hook-calls/op how many hook
// requests a turn made.
//
//	go test -run '^$' -bench BenchmarkHookLatency -benchtime 200x ./pkg/app
func BenchmarkHookLatency(b *testing.B) {
	for _, c := range []struct{ name, events string }{
		{"none", ""},
		{"http-received", "message.received"},
		{"http-transform", "context.transform"},
		{"http-received+transform", "message.received, context.transform"},
	} {
		b.Run(c.name, func(b *testing.B) { benchHookTurns(b, c.events) })
	}
}

func benchHookTurns(b *testing.B, events string) {
	model := fakeopenai.New(b, fakeopenai.Echo)
	var calls atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if _, _, err := webhook.VerifyStandard(hookSecret, body, r.Header, time.Now(), 0); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"action":"continue"}`))
	}))
	defer hook.Close()
	replies := make(chan string, 16)
	cb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var out webhook.Outbound
		_ = json.NewDecoder(r.Body).Decode(&out)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"p"}`))
		replies <- out.Scene.ID
	}))
	defer cb.Close()
	dir := b.TempDir()
	hooksBlock := ""
	if events != "" {
		hooksBlock = fmt.Sprintf(`  hooks:
    - name: bench
      events: [%s]
      url: %s/hook
      secret: %s
`, events, hook.URL, hookSecret)
	}
	yml := fmt.Sprintf(`
dataDir: %[1]s
nats:
  embedded: true
  storeDir: %[2]s
  listen: "127.0.0.1:0"
  storage: memory
im:
  webhook:
    listen: "127.0.0.1:0"
    rateLimit: {perSender: {perSecond: 1000, burst: 1000}}
    bots:
      - id: %[3]s
        secret: %[4]s
        callback: %[5]s/callback
ai:
  providers:
    fake: {api: openai-completions, baseUrl: "%[6]s", apiKey: test}
  agents:
    zhin: {provider: fake, model: m1}
%[7]s`, dir, filepath.Join(dir, "nats"), botID, botSecret, cb.URL, model.BaseURL(), hooksBlock)
	cfg, err := config.Parse([]byte(yml))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, err := app.Start(ctx, cfg, app.Options{Roles: app.AllRoles, Out: io.Discard, Log: testLogger(), NoProbe: true})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = p.Stop(context.Background()) }()
	turn := func(i int) {
		sender := fmt.Sprintf("u%d", i/10)
		body := private(fmt.Sprintf("m%d", i), sender, fmt.Sprintf("message %d", i)).body()
		req, _ := http.NewRequest(http.MethodPost, p.WebhookURL+"/webhook/"+botID, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(webhook.SignatureHeader, webhook.Sign(botSecret, body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			b.Fatalf("POST: %d", resp.StatusCode)
		}
		select {
		case <-replies:
		case <-time.After(waitMargin):
			b.Fatalf("no reply to message %d", i)
		}
	}
	for i := range 20 { // warm up: connections, consumers, the first sessions
		turn(1_000_000 + i)
	}
	calls.Store(0)
	b.ResetTimer()
	for i := range b.N {
		turn(i)
	}
	b.StopTimer()
	b.ReportMetric(float64(calls.Load())/float64(b.N), "hook-calls/op")
}
