package ingest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
	"github.com/agentbus/agentbus/pkg/webhook"
)

// TestWebhookTimestampOverflow: signed timestamps beyond time.Duration's range, or in the wrong
// unit, are refused (401) and publish nothing, in both signature schemes (issue 36: "time":
// 1e18 and a Standard Webhooks timestamp in milliseconds passed the window and stayed
// replayable for good).
func TestWebhookTimestampOverflow(t *testing.T) {
	ns := natstest.New(t, natstest.WithMemoryStorage())
	srv, _ := serveWebhook(t, ns, WebhookOptions{})
	url := srv.URL + "/webhook/b1"
	now := time.Now()
	legacyAt := func(id string, ms string) []byte {
		return fmt.Appendf(nil, `{"id":%q,"scene":{"type":"private","id":"u1"},"sender":{"id":"u1"},"content":[{"type":"text","data":{"text":"hi"}}],"time":%s}`, id, ms)
	}
	tests := []struct {
		name    string
		body    []byte
		headers func(b []byte) http.Header
	}{
		{"legacy time 1e18 ms", legacyAt("o1", "1000000000000000000"), legacyH},
		{"legacy time max int64", legacyAt("o2", strconv.FormatInt(1<<63-1, 10)), legacyH},
		{"legacy time min int64", legacyAt("o3", strconv.FormatInt(-1<<63, 10)), legacyH},
		{"legacy time in seconds", legacyAt("o4", strconv.FormatInt(now.Unix(), 10)), legacyH},
		{"legacy time in microseconds", legacyAt("o5", strconv.FormatInt(now.UnixMicro(), 10)), legacyH},
		{"standard timestamp in ms", body("o6", "u1", now), func(b []byte) http.Header { return standard(t, "wo6", time.Unix(now.UnixMilli(), 0), b) }},
		{"standard timestamp 1e18", body("o7", "u1", now), func(b []byte) http.Header { return standard(t, "wo7", time.Unix(1e18, 0), b) }},
		{"standard timestamp negative", body("o8", "u1", now), func(b []byte) http.Header { return standard(t, "wo8", time.Unix(-1e18, 0), b) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := send(t, url, tt.headers(tt.body), tt.body)
			if got.code != 401 {
				t.Fatalf("status = %d (%s), want 401", got.code, got.body)
			}
		})
	}
	if n := inboundMsgs(t, ns.JS); n != 0 {
		t.Errorf("the bus holds %d inbound messages, want 0", n)
	}
}

func legacyH(b []byte) http.Header { return legacy(b) }

// TestWebhookBodyOverBusLimit: a body the webhook accepts (under maxBodyBytes) but the bus
// cannot carry (over the server's max_payload) is answered 413 naming the limit, never 503
// "retry later", publishes nothing to IM_IN or SESSION_IN, and is dead-lettered; inline media of
// the same size goes to the media store and is accepted.
func TestWebhookBodyOverBusLimit(t *testing.T) {
	ns := natstest.New(t, natstest.WithMemoryStorage())
	wh := WebhookOptions{Secrets: map[string]string{"b1": secret}}
	in := New(ns.JS, Options{})
	media, err := ns.JS.ObjectStore(context.Background(), events.ObjectMedia)
	if err != nil {
		t.Fatal(err)
	}
	in.WithMedia(media)
	srv := serveHandler(t, NewWebhookHandler(in, wh, nil))
	url := srv.URL + "/webhook/b1"
	limit := ns.NC.MaxPayload()
	now := time.Now()
	mk := func(id string, content []events.Segment) []byte {
		b, err := json.Marshal(webhook.Inbound{ID: id, Scene: webhook.Scene{Type: "private", ID: "u1"},
			Sender: webhook.Sender{ID: "u1"}, Content: content, Time: now.UnixMilli()})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name string
		body []byte
		want int
	}{
		{"text twice the bus limit", mk("big1", []events.Segment{events.TextSeg(strings.Repeat("a", int(2*limit)))}), 413},
		// Under the limit itself, but its inbox event (the message and its text again) is over.
		{"text whose inbox event is over", mk("big2", []events.Segment{events.TextSeg(strings.Repeat("<", int(limit/2)))}), 413},
		{"file name over the limit", mk("big3", []events.Segment{events.TextSeg("see file"),
			{Type: events.SegFile, Data: map[string]any{"url": "https://example.org/f", "name": strings.Repeat("n", int(limit))}}}), 413},
		{"inline image over the limit goes to the media store", mk("img1", []events.Segment{events.TextSeg("look"),
			{Type: events.SegImage, Data: map[string]any{"base64": base64.StdEncoding.EncodeToString(pngOf(int(2 * limit)))}}}), 202},
		{"small text", mk("ok1", []events.Segment{events.TextSeg("hi")}), 202},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := send(t, url, legacy(tt.body), tt.body)
			if got.code != tt.want {
				t.Fatalf("status = %d (%.300s), want %d", got.code, got.body, tt.want)
			}
			if tt.want == 413 && !strings.Contains(got.body, strconv.FormatInt(limit, 10)) {
				t.Errorf("413 answer %q does not state the limit %d", got.body, limit)
			}
		})
	}
	if n := inboundMsgs(t, ns.JS); n != 2 {
		t.Errorf("the bus holds %d inbound messages, want 2 (the accepted ones)", n)
	}
	if n := streamMsgs(t, ns.JS, events.StreamSessionIn); n != 2 {
		t.Errorf("SESSION_IN has %d messages, want 2", n)
	}
	if n := streamMsgs(t, ns.JS, events.StreamDeadLetters); n != 3 {
		t.Errorf("DEAD_LETTERS has %d messages, want 3 (one per refused message)", n)
	}
}

func serveHandler(t *testing.T, h *WebhookHandler) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	h.Routes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// pngOf is n bytes that start like a PNG.
func pngOf(n int) []byte {
	b := make([]byte, n)
	copy(b, "\x89PNG\r\n\x1a\n")
	for i := 8; i < n; i++ {
		b[i] = byte(i)
	}
	return b
}
