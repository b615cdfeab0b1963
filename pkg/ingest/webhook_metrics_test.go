package ingest

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/agentbus/agentbus/pkg/metrics"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// counts reads agentbus_ingest_messages_total by outcome and agentbus_webhook_requests_total
// by code from r.
func counts(t *testing.T, r *metrics.Registry) (outcomes, codes map[string]float64) {
	t.Helper()
	mfs, err := r.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	outcomes, codes = map[string]float64{}, map[string]float64{}
	label := func(m *dto.Metric, name string) string {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == name {
				return lp.GetValue()
			}
		}
		return ""
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "agentbus_ingest_messages_total":
				if label(m, "platform") != PlatformWebhook || label(m, "bot") != "b1" {
					t.Errorf("series with labels %v", m.GetLabel())
				}
				outcomes[label(m, "outcome")] += m.GetCounter().GetValue()
			case "agentbus_webhook_requests_total":
				codes[label(m, "code")] += m.GetCounter().GetValue()
			}
		}
	}
	return outcomes, codes
}

// Every answer of the webhook moves a counter, and the refusals for load (429, and 503 when
// too many requests are in flight) are logged with the bot, platform and status.
func TestWebhookOutcomesCountedAndLogged(t *testing.T) {
	ns := natstest.New(t, natstest.WithMemoryStorage())
	wh := WebhookOptions{MaxInFlight: 1}
	wh.PerSender = RateLimit{PerSecond: 0.001, Burst: 2}
	wh.Secrets = map[string]string{"b1": secret}
	if err := CheckReplayWindow(context.Background(), ns.JS, wh.Tolerance); err != nil {
		t.Fatal(err)
	}
	reg := metrics.New()
	in := New(ns.JS, Options{})
	in.WithMetrics(metrics.NewIngest(reg))
	var logs lockedBuf
	h := NewWebhookHandler(in, wh, slog.New(slog.NewJSONHandler(&logs, nil)))
	mux := http.NewServeMux()
	h.Routes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	url := srv.URL + "/webhook/b1"
	now := time.Now()

	steps := []struct {
		name string
		send func() int
		want int
	}{
		{"accepted", func() int { b := body("o1", "u1", now); return send(t, url, legacy(b), b).code }, 202},
		{"duplicate", func() int { b := body("o1", "u1", now); return send(t, url, legacy(b), b).code }, 202},
		{"rate limited", func() int { b := body("o2", "u1", now); return send(t, url, legacy(b), b).code }, 429},
		{"bad signature", func() int { b := body("o3", "u2", now); return send(t, url, legacy([]byte("x")), b).code }, 401},
		{"malformed", func() int { b := []byte(`{"id":`); return send(t, url, legacy(b), b).code }, 400},
		{"unknown bot", func() int { b := body("o4", "u2", now); return send(t, srv.URL+"/webhook/nope", legacy(b), b).code }, 404},
		{"too many in flight", func() int {
			if !h.flight.acquire(1) { // one request in flight already
				t.Fatal("the in-flight bound is full before the test filled it")
			}
			defer h.flight.release(1)
			b := body("o5", "u3", now)
			return send(t, url, legacy(b), b).code
		}, 503},
	}
	for _, s := range steps {
		if got := s.send(); got != s.want {
			t.Fatalf("%s: %d, want %d", s.name, got, s.want)
		}
	}
	outcomes, codes := counts(t, reg)
	wantOutcomes := map[string]float64{"accepted": 1, "duplicate": 1, "rate_limited": 2, "rejected": 2}
	for k, v := range wantOutcomes {
		if outcomes[k] != v {
			t.Errorf("outcome %s = %v, want %v (all: %v)", k, outcomes[k], v, outcomes)
		}
	}
	if codes["2xx"] != 2 || codes["4xx"] != 4 || codes["5xx"] != 1 {
		t.Errorf("codes %v, want 2xx 2, 4xx 4, 5xx 1", codes)
	}
	out := logs.String()
	for _, want := range []string{
		`"msg":"webhook refused: sender over its rate limit","bot":"b1","platform":"webhook","status":429`,
		`"msg":"webhook refused: too many requests at once","bot":"b1","platform":"webhook","status":503`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
}
