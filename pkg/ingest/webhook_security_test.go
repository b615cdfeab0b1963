package ingest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
	"github.com/agentbus/agentbus/pkg/webhook"
)

// body is a private message from sender with id, its time at ts.
func body(id, sender string, ts time.Time) []byte {
	return fmt.Appendf(nil, `{"id":%q,"scene":{"type":"private","id":%q},"sender":{"id":%q},"content":[{"type":"text","data":{"text":"hi"}}],"time":%d}`,
		id, sender, sender, ts.UnixMilli())
}

type response struct {
	code       int
	body       string
	retryAfter string
}

func send(t *testing.T, url string, h http.Header, b []byte) response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	for k, vs := range h {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, string(rb), resp.Header.Get("Retry-After")}
}

func legacy(b []byte) http.Header {
	return http.Header{webhook.SignatureHeader: {webhook.Sign(secret, b)}}
}

func standard(t *testing.T, id string, ts time.Time, b []byte) http.Header {
	t.Helper()
	h, err := webhook.SignStandard(secret, id, ts, b)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestWebhookSignatureSchemes(t *testing.T) {
	ns := natstest.New(t, natstest.WithMemoryStorage())
	srv, _ := serveWebhook(t, ns, WebhookOptions{})
	url := srv.URL + "/webhook/b1"
	now := time.Now()
	tests := []struct {
		name    string
		headers func(b []byte) http.Header
		body    []byte
		want    int
	}{
		{"standard", func(b []byte) http.Header { return standard(t, "w1", now, b) }, body("s1", "u1", now), 202},
		{"standard, two signatures (rotation)", func(b []byte) http.Header {
			h := standard(t, "w2", now, b)
			h.Set(webhook.HeaderSignature, "v1,AAAA "+h.Get(webhook.HeaderSignature))
			return h
		}, body("s2", "u1", now), 202},
		{"standard, wrong secret", func(b []byte) http.Header {
			h, _ := webhook.SignStandard("other", "w3", now, b)
			return h
		}, body("s3", "u1", now), 401},
		{"standard, signed id differs", func(b []byte) http.Header {
			h := standard(t, "w4", now, b)
			h.Set(webhook.HeaderID, "w4-other")
			return h
		}, body("s4", "u1", now), 401},
		{"standard, timestamp header changed", func(b []byte) http.Header {
			h := standard(t, "w5", now, b)
			h.Set(webhook.HeaderTimestamp, strconv.FormatInt(now.Unix()+1, 10))
			return h
		}, body("s5", "u1", now), 401},
		{"standard, old timestamp", func(b []byte) http.Header { return standard(t, "w6", now.Add(-6*time.Minute), b) }, body("s6", "u1", now), 401},
		{"standard, far future", func(b []byte) http.Header { return standard(t, "w7", now.Add(6*time.Minute), b) }, body("s7", "u1", now), 401},
		{"standard, no id", func(b []byte) http.Header {
			h := standard(t, "w8", now, b)
			h.Del(webhook.HeaderID)
			return h
		}, body("s8", "u1", now), 401},
		{"standard, v2 only", func(b []byte) http.Header {
			h := standard(t, "w9", now, b)
			h.Set(webhook.HeaderSignature, strings.Replace(h.Get(webhook.HeaderSignature), "v1,", "v2,", 1))
			return h
		}, body("s9", "u1", now), 401},
		{"legacy", legacy, body("l1", "u1", now), 202},
		{"legacy, old time", legacy, body("l2", "u1", now.Add(-10*time.Minute)), 401},
		{"legacy, time in the future", legacy, body("l3", "u1", now.Add(10*time.Minute)), 401},
		{"legacy, no time", legacy, []byte(`{"id":"l4","scene":{"type":"private","id":"u1"},"sender":{"id":"u1"},"content":[{"type":"text","data":{"text":"hi"}}]}`), 401},
		{"legacy, header of standard and legacy mixed", func(b []byte) http.Header {
			h := legacy(b)
			h.Set(webhook.HeaderID, "w10") // claims Standard Webhooks: its signature is required
			return h
		}, body("l5", "u1", now), 401},
	}
	accepted := 0
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := send(t, url, tt.headers(tt.body), tt.body)
			if got.code != tt.want {
				t.Fatalf("status = %d (%s), want %d", got.code, got.body, tt.want)
			}
		})
		if tt.want == 202 {
			accepted++
		}
	}
	if n := inboundMsgs(t, ns.JS); n != uint64(accepted) {
		t.Errorf("the bus holds %d inbound messages, want %d (rejected requests publish nothing)", n, accepted)
	}
}

// TestWebhookReplayInsideTolerance: a signed body accepted once is answered as a duplicate, and
// nothing is stored again, when it is replayed while its signature is still valid, across a
// server restart. The guard is the dedupe window of IM_IN and SESSION_IN (no KV write per
// request): the control shrinks both windows, which CheckReplayWindow then refuses, and shows
// that without them the replay would be taken as a new message.
func TestWebhookReplayInsideTolerance(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	b := body("r1", "u1", now)
	h := standard(t, "wr1", now, b)

	ns1 := natstest.New(t, natstest.WithStoreDir(dir))
	srv1, _ := serveWebhook(t, ns1, WebhookOptions{})
	if got := send(t, srv1.URL+"/webhook/b1", h, b); got.code != 202 || strings.Contains(got.body, `"duplicate":true`) {
		t.Fatalf("first post: %d %s", got.code, got.body)
	}
	inbox := streamMsgs(t, ns1.JS, events.StreamSessionIn)
	if inbox == 0 {
		t.Fatal("the first post put nothing into SESSION_IN")
	}
	srv1.Close()
	ns1.NC.Close()
	ns1.Embedded.Close()

	ns2 := natstest.New(t, natstest.WithStoreDir(dir))
	srv2, _ := serveWebhook(t, ns2, WebhookOptions{})
	got := send(t, srv2.URL+"/webhook/b1", h, b)
	if got.code != 202 || !strings.Contains(got.body, `"duplicate":true`) {
		t.Fatalf("replay: %d %s, want 202 duplicate", got.code, got.body)
	}
	if n := inboundMsgs(t, ns2.JS); n != 1 {
		t.Fatalf("the bus holds %d inbound messages after the replay, want 1", n)
	}
	if n := streamMsgs(t, ns2.JS, events.StreamSessionIn); n != inbox {
		t.Fatalf("SESSION_IN has %d messages after the replay, want %d", n, inbox)
	}

	// Control: with the windows shrunk below the tolerance the start check refuses, and the
	// same replay (once the server has forgotten the ids) is taken as a new message.
	ctx := context.Background()
	// Shrunk twice: an update of the window fires the server's purge timer at once, but the
	// new window is set only later in the same update, and a purge that runs in between
	// (likelier on a loaded machine) uses the old window and re-arms the timer for what is left
	// of it, minutes. The second update's purge runs with the first one's window in force.
	for _, window := range []time.Duration{500 * time.Millisecond, 400 * time.Millisecond} {
		for _, name := range []string{events.StreamIMIn, events.StreamSessionIn} {
			st, err := ns2.JS.Stream(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			sc := st.CachedInfo().Config
			sc.Duplicates = window
			if _, err := ns2.JS.UpdateStream(ctx, sc); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := CheckReplayWindow(ctx, ns2.JS, 0); !errors.Is(err, ErrReplayWindow) {
		t.Fatalf("CheckReplayWindow with a 400 ms window = %v, want ErrReplayWindow", err)
	}
	// The server forgets message ids on a timer after the window, later on a loaded machine; a
	// "duplicate" answer publishes nothing, so asking again until it is forgotten is harmless.
	testwait.Eventually(t, 0, func() error {
		got := send(t, srv2.URL+"/webhook/b1", h, b)
		return testwait.Want(got.code == 202 && !strings.Contains(got.body, `"duplicate":true`),
			"control replay: %d %s, want a fresh accept once the dedupe window is over", got.code, got.body)
	})
	if n := inboundMsgs(t, ns2.JS); n != 2 {
		t.Errorf("control: the bus holds %d inbound messages, want 2 (dedupe window over)", n)
	}
}

func TestWebhookRateLimits(t *testing.T) {
	ns := natstest.New(t, natstest.WithMemoryStorage())
	wh := WebhookOptions{}
	wh.PerSender = RateLimit{PerSecond: 0.01, Burst: 3}
	wh.PerBot = RateLimit{PerSecond: 0.01, Burst: 5}
	srv, _ := serveWebhook(t, ns, wh)
	url := srv.URL + "/webhook/b1"
	now := time.Now()
	steps := []struct {
		sender string
		want   int
	}{
		{"u1", 202}, {"u1", 202}, {"u1", 202}, {"u1", 429}, // u1's burst is 3
		{"u2", 202}, {"u2", 202}, // the bot's burst of 5 is used up
		{"u3", 429},
	}
	for i, s := range steps {
		b := body("rl"+strconv.Itoa(i), s.sender, now)
		got := send(t, url, legacy(b), b)
		if got.code != s.want {
			t.Fatalf("step %d (%s): %d %s, want %d", i, s.sender, got.code, got.body, s.want)
		}
		if got.code == 429 {
			if ra, err := strconv.Atoi(got.retryAfter); err != nil || ra < 1 {
				t.Errorf("step %d: Retry-After %q, want whole seconds >= 1", i, got.retryAfter)
			}
		}
	}
	if n := inboundMsgs(t, ns.JS); n != 5 {
		t.Errorf("the bus holds %d inbound messages, want 5", n)
	}
}

// TestWebhookFloodBounded: distinct senders cannot grow the limiter map past maxSenders, and a
// body over maxBodyBytes is refused without being read whole.
func TestWebhookFloodBounded(t *testing.T) {
	ns := natstest.New(t, natstest.WithMemoryStorage())
	wh := WebhookOptions{MaxBodyBytes: 4096}
	wh.PerBot.PerSecond = -1
	wh.PerSender = RateLimit{PerSecond: 0.001, Burst: 1}
	wh.MaxSenders = 10
	srv, h := serveWebhook(t, ns, wh)
	url := srv.URL + "/webhook/b1"
	now := time.Now()
	codes := map[int]int{}
	for i := 0; i < 60; i++ {
		b := body("f"+strconv.Itoa(i), "flood-"+strconv.Itoa(i), now)
		codes[send(t, url, legacy(b), b).code]++
	}
	if codes[202] != 10 || codes[429] != 50 {
		t.Errorf("codes %v, want 10×202 and 50×429", codes)
	}
	if n := h.perSender.size(); n > 10 {
		t.Errorf("%d sender buckets kept, want <= 10", n)
	}
	big := bytes.Repeat([]byte("x"), 8192)
	if got := send(t, url, legacy(big), big); got.code != http.StatusRequestEntityTooLarge {
		t.Errorf("big body: %d, want 413", got.code)
	}
}

func TestKeyedLimiterEvictsIdle(t *testing.T) {
	l := newKeyedLimiter(1000, 1, 2)
	t0 := time.Now()
	for _, k := range []string{"a", "b"} {
		if _, ok := l.allow(k, t0); !ok {
			t.Fatalf("%s refused", k)
		}
	}
	if _, ok := l.allow("c", t0); ok {
		t.Fatal("c accepted while a and b are busy and the map is full")
	}
	// A millisecond later both buckets are full again, so they are idle and evicted.
	if _, ok := l.allow("c", t0.Add(10*time.Millisecond)); !ok {
		t.Fatal("c refused though a and b are idle")
	}
	if l.size() > 2 {
		t.Errorf("size %d", l.size())
	}
}
