package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
	"github.com/agentbus/agentbus/pkg/webhook"
)

const secret = "s3cret"

func newWebhook(t *testing.T) (*httptest.Server, *natstest.Server) {
	t.Helper()
	ns := natstest.New(t, natstest.WithMemoryStorage())
	srv, _ := serveWebhook(t, ns, WebhookOptions{})
	return srv, ns
}

// serveWebhook serves bot b1 (secret, master boss) with wh's limits on ns, after checking the
// streams' replay window as the ingest role does.
func serveWebhook(t *testing.T, ns *natstest.Server, wh WebhookOptions) (*httptest.Server, *WebhookHandler) {
	t.Helper()
	wh.Secrets = map[string]string{"b1": secret}
	in := New(ns.JS, Options{Bots: map[string]BotRoles{"webhook/b1": {Masters: []string{"boss"}}}})
	if err := CheckReplayWindow(context.Background(), ns.JS, wh.Tolerance); err != nil {
		t.Fatal(err)
	}
	h := NewWebhookHandler(in, wh, nil)
	mux := http.NewServeMux()
	h.Routes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, h
}

// nowMs is the current time in Unix ms, for bodies signed with X-Agentbus-Signature.
func nowMs() int64 { return time.Now().UnixMilli() }

func post(t *testing.T, url, sig string, body []byte) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if sig != "" {
		req.Header.Set(webhook.SignatureHeader, sig)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func streamMsgs(t *testing.T, js jetstream.JetStream, stream string) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// inboundMsgs is how many inbound messages the bus stores: since issue 40 ingest stores a
// message in IM_IN, or, when it reaches its session, in the session's inbox (SESSION_IN,
// agent.in.>) only; each message of these tests causes one inbox event at most.
func inboundMsgs(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), events.StreamSessionIn)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(events.PrefixAgentIn+".>"))
	if err != nil {
		t.Fatal(err)
	}
	var inbox uint64
	for _, n := range info.State.Subjects {
		inbox += n
	}
	return streamMsgs(t, js, events.StreamIMIn) + inbox
}

func TestWebhookRequests(t *testing.T) {
	srv, ns := newWebhook(t)
	good := []byte(`{"id":"m1","scene":{"type":"group","id":"g1"},"sender":{"id":"u1","name":"Ann"},"content":[{"type":"text","data":{"text":"hello"}},{"type":"at","data":{"id":"b1"}}],"time":` + strconv.FormatInt(nowMs(), 10) + `}`)
	tests := []struct {
		name string
		path string
		body []byte
		sig  string
		want int
	}{
		{"malformed json", "/webhook/b1", []byte(`{"id":`), "", 400},
		{"missing fields", "/webhook/b1", []byte(`{"id":"x","scene":{"type":"group"},"content":[]}`), "", 400},
		{"bad scene type", "/webhook/b1", []byte(`{"id":"x","scene":{"type":"room","id":"r"},"sender":{"id":"u"},"content":[{"type":"text","data":{"text":"a"}}]}`), "", 400},
		{"bad text segment", "/webhook/b1", fmt.Appendf(nil, `{"id":"x","scene":{"type":"group","id":"r"},"sender":{"id":"u"},"content":[{"type":"text","data":{}}],"time":%d}`, nowMs()), "", 400},
		{"bad signature", "/webhook/b1", good, "sha256=00", 401},
		{"missing signature", "/webhook/b1", good, "-", 401},
		{"unknown bot", "/webhook/nope", good, "", 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sig := tt.sig
			switch sig {
			case "":
				sig = webhook.Sign(secret, tt.body)
			case "-":
				sig = ""
			}
			if got := post(t, srv.URL+tt.path, sig, tt.body); got != tt.want {
				t.Fatalf("status = %d, want %d", got, tt.want)
			}
		})
	}
	for _, s := range []string{events.StreamIMIn, events.StreamSessionIn, events.StreamIMOut} {
		if n := streamMsgs(t, ns.JS, s); n != 0 {
			t.Errorf("%s has %d messages after rejected requests, want 0", s, n)
		}
	}

	// Accepted twice, published once.
	for i := 0; i < 2; i++ {
		if got := post(t, srv.URL+"/webhook/b1", webhook.Sign(secret, good), good); got != 202 {
			t.Fatalf("status = %d, want 202", got)
		}
	}
	if n := inboundMsgs(t, ns.JS); n != 1 {
		t.Errorf("the bus holds %d inbound messages, want 1", n)
	}
	if n := streamMsgs(t, ns.JS, events.StreamSessionIn); n != 1 {
		t.Errorf("SESSION_IN has %d messages, want 1", n)
	}
	sk := events.SessionKey{Platform: "webhook", Bot: "b1", Scope: "group", Scene: "g1"}
	s, _ := ns.JS.Stream(context.Background(), events.StreamSessionIn)
	raw, err := s.GetLastMsgForSubject(context.Background(), events.AgentInSubject(sk))
	if err != nil {
		t.Fatal(err)
	}
	ev, err := events.Decode(raw.Data)
	if err != nil {
		t.Fatal(err)
	}
	um, ok := ev.(*events.Event[events.UserMessage])
	if !ok {
		t.Fatalf("inbox event %T, want user message", ev)
	}
	if um.Data.Text != "hello" || !um.Data.Message.MentionsBot || um.Data.Message.Sender.Name != "Ann" {
		t.Errorf("user message = %+v", um.Data)
	}
}

func TestSteerRefusedForNonMaster(t *testing.T) {
	srv, ns := newWebhook(t)
	body := fmt.Appendf(nil, `{"id":"m2","scene":{"type":"private","id":"u1"},"sender":{"id":"u1"},"content":[{"type":"text","data":{"text":"/steer stop"}}],"time":%d}`, nowMs())
	if got := post(t, srv.URL+"/webhook/b1", webhook.Sign(secret, body), body); got != 202 {
		t.Fatalf("status %d", got)
	}
	if n := streamMsgs(t, ns.JS, events.StreamSessionIn); n != 0 {
		t.Errorf("non-master steer reached the session inbox")
	}
	if n := streamMsgs(t, ns.JS, events.StreamIMOut); n != 1 {
		t.Errorf("IM_OUT has %d messages, want the refusal", n)
	}
	body = fmt.Appendf(nil, `{"id":"m3","scene":{"type":"private","id":"boss"},"sender":{"id":"boss"},"content":[{"type":"text","data":{"text":"/steer stop"}}],"time":%d}`, nowMs())
	if got := post(t, srv.URL+"/webhook/b1", webhook.Sign(secret, body), body); got != 202 {
		t.Fatalf("status %d", got)
	}
	if n := streamMsgs(t, ns.JS, events.StreamSessionIn); n != 1 {
		t.Errorf("master steer did not reach the inbox")
	}
}

func TestAcceptedBody(t *testing.T) {
	for _, res := range []Result{
		{},
		{Duplicate: true, Decision: Decision{Routes: []Route{RouteAI}}},
		{Decision: Decision{Routes: []Route{RouteCommand, RouteAI}}},
		{Decision: Decision{Routes: []Route{RouteIgnore, RouteListen}}},
	} {
		names := make([]string, len(res.Decision.Routes))
		for i, r := range res.Decision.Routes {
			names[i] = r.String()
		}
		var want bytes.Buffer
		_ = json.NewEncoder(&want).Encode(map[string]any{"accepted": true, "duplicate": res.Duplicate, "route": names})
		if got := acceptedBody(res); string(got) != want.String() {
			t.Errorf("body %q, want %q", got, want.String())
		}
	}
}
