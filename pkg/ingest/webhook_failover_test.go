package ingest

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
	"github.com/agentbus/agentbus/pkg/webhook"
)

// While SESSION_IN (where a message that reaches its session is stored) has no leader (here: the stream is gone for a while, so publishes find no
// responders, as during a NATS node's failover) the webhook retries within the request's
// deadline and answers 202 once the stream is back (issue 37: 891 POSTs answered 503 during an
// election); a bus that stays away past the deadline gets 503 with Retry-After.
func TestWebhookWaitsOutALeaderElection(t *testing.T) {
	ns := natstest.New(t, natstest.WithMemoryStorage())
	srv, _ := serveWebhook(t, ns, WebhookOptions{})
	ctx := context.Background()
	s, err := ns.JS.Stream(ctx, events.StreamSessionIn)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	body := func(id string) []byte {
		return []byte(`{"id":"` + id + `","scene":{"type":"private","id":"u1"},"sender":{"id":"u1","name":"Ann"},"content":[{"type":"text","data":{"text":"hello"}}],"time":` + strconv.FormatInt(nowMs(), 10) + `}`)
	}
	send := func(b []byte) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/webhook/b1", bytes.NewReader(b))
		req.Header.Set(webhook.SignatureHeader, webhook.Sign(secret, b))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}

	if err := ns.JS.DeleteStream(ctx, events.StreamSessionIn); err != nil {
		t.Fatal(err)
	}
	back := make(chan error, 1)
	go func() {
		time.Sleep(time.Second) // IM_IN stays away a while: the request must retry through the gap
		_, err := ns.JS.CreateStream(ctx, cfg)
		back <- err
	}()
	if resp := send(body("m1")); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d while SESSION_IN came back within the request's deadline, want 202", resp.StatusCode)
	}
	if err := <-back; err != nil {
		t.Fatal(err)
	}
	if n := inboundMsgs(t, ns.JS); n != 1 {
		t.Fatalf("the bus holds %d inbound messages, want 1", n)
	}

	if err := ns.JS.DeleteStream(ctx, events.StreamSessionIn); err != nil {
		t.Fatal(err)
	}
	resp := send(body("m2"))
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d, Retry-After %q with SESSION_IN gone; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}
