package egress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agentbus/agentbus/pkg/im"
	"github.com/agentbus/agentbus/pkg/im/console"
	imwebhook "github.com/agentbus/agentbus/pkg/im/webhook"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
	"github.com/agentbus/agentbus/pkg/webhook"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const testSecret = "s3cret"

// callback is a webhook receiver (the remote IM platform): it records every POST and answers
// with the status reply(n) gives for the n-th request (1-based).
type callback struct {
	t     testing.TB
	srv   *httptest.Server
	reply func(n int) (status int, header http.Header, body string)

	mu    sync.Mutex
	posts []post
	seen  chan struct{}
}

type post struct {
	body   []byte
	sig    string
	at     time.Time
	header http.Header
}

func newCallback(t testing.TB, reply func(n int) (int, http.Header, string)) *callback {
	c := &callback{t: t, reply: reply, seen: make(chan struct{}, 1<<16)}
	if c.reply == nil {
		c.reply = func(int) (int, http.Header, string) { return 200, nil, "" }
	}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		c.mu.Lock()
		c.posts = append(c.posts, post{body: body, sig: r.Header.Get(webhook.SignatureHeader), at: time.Now(), header: r.Header.Clone()})
		n := len(c.posts)
		c.mu.Unlock()
		status, h, b := c.reply(n)
		for k, v := range h {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
		io.WriteString(w, b)
		c.seen <- struct{}{}
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *callback) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.posts)
}

func (c *callback) get(i int) post {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.posts[i]
}

func testConfig(cb *callback) *config.Config {
	cfg := &config.Config{}
	url := ""
	if cb != nil {
		url = cb.srv.URL + "/hook"
	}
	cfg.IM.Webhook.Bots = []config.WebhookBot{{ID: "b1", Secret: testSecret, Callback: url}}
	return cfg
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: testLevel}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// fastOptions shortens every delay so failure paths run in milliseconds.
func fastOptions(srv *natstest.Server, cfg *config.Config, t testing.TB) Options {
	wh := imwebhook.NewSender(nil, cfg.IM.Webhook.Bots)
	if media, err := srv.JS.ObjectStore(context.Background(), events.ObjectMedia); err == nil {
		wh.WithMedia(media)
	}
	return Options{
		NC: srv.NC,
		JS: srv.JS,
		// The built-in platforms, as the composition root registers them.
		Senders:         map[string]im.Sender{imwebhook.Platform: wh, console.Platform: console.NewSender(srv.NC)},
		Log:             testLogger(t),
		AckWait:         time.Second,
		RetryInitial:    5 * time.Millisecond,
		RetryMax:        20 * time.Millisecond,
		RedeliveryDelay: 20 * time.Millisecond,
		SendTimeout:     5 * time.Second,
	}
}

func start(t testing.TB, o Options) *Handle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := Run(ctx, o)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Cleanup(func() { _ = h.Stop(context.Background()) })
	return h
}

func outbound(id string) events.Outbound {
	return events.Outbound{
		OutID:    id,
		Turn:     "t1",
		Part:     0,
		Platform: imwebhook.Platform,
		Bot:      "b1",
		Scene:    events.Scene{Type: "group", ID: "g1"},
		ReplyTo:  "m1",
		Content:  events.Segments{events.TextSeg("hello " + id), events.ImageSeg("https://x/y.png")},
	}
}

const testTrace = "0af7651916cd43dd8448eb211c80319c"

// publish puts out on IM_OUT; msgID overrides the Nats-Msg-Id (to get a second copy of the
// same out id past the stream's dedupe).
func publish(t testing.TB, js jetstream.JetStream, out events.Outbound, msgID string) {
	t.Helper()
	ev := events.New(out, events.WithTurn(out.Turn), events.WithTrace(testTrace),
		events.WithSession(events.NewSessionID(out.SessionKey(), 1).String()))
	m, err := events.NewMsg(events.IMOutSubject(out.SessionKey()), ev)
	if err != nil {
		t.Fatalf("NewMsg: %v", err)
	}
	if msgID != "" {
		m.Header.Set(events.HeaderMsgID, msgID)
	}
	if _, err := js.PublishMsg(context.Background(), m); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

func publishRaw(t testing.TB, js jetstream.JetStream, subject string, data []byte) {
	t.Helper()
	if _, err := js.Publish(context.Background(), subject, data); err != nil {
		t.Fatalf("publish raw: %v", err)
	}
}

// streamMsgs returns how many messages stream holds on subject filter.
func streamMsgs(t testing.TB, js jetstream.JetStream, stream, filter string) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(filter))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

func lastMsg(t testing.TB, js jetstream.JetStream, stream, subject string) *jetstream.RawStreamMsg {
	t.Helper()
	s, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(context.Background(), subject)
	if err != nil {
		t.Fatalf("last message on %s: %v", subject, err)
	}
	return m
}

func deadLetter(t testing.TB, js jetstream.JetStream, reason string) *events.Event[events.DeadLetter] {
	t.Helper()
	subj := events.DeadLetterSubject(events.RoleEgress, reason)
	testwait.Eventually(t, 0, func() error {
		return testwait.Want(streamMsgs(t, js, events.StreamDeadLetters, subj) > 0, "a dead letter on %s", subj)
	})
	m := lastMsg(t, js, events.StreamDeadLetters, subj)
	ev := new(events.Event[events.DeadLetter])
	if err := events.Unmarshal(m.Data, ev); err != nil {
		t.Fatalf("dead letter: %v", err)
	}
	return ev
}

func TestDeliverWebhook(t *testing.T) {
	srv := natstest.New(t)
	cb := newCallback(t, func(int) (int, http.Header, string) { return 200, nil, `{"id":"plat-42"}` })
	h := start(t, fastOptions(srv, testConfig(cb), t))

	out := outbound("turnA-0")
	publish(t, srv.JS, out, "")
	testwait.Eventually(t, 0, func() error {
		return testwait.Want(streamMsgs(t, srv.JS, events.StreamIMSent, events.PrefixIMSent+".>") == 1, "receipt")
	})

	if n := cb.count(); n != 1 {
		t.Fatalf("callback got %d posts, want 1", n)
	}
	p := cb.get(0)
	if err := webhook.Verify(testSecret, p.body, p.sig); err != nil {
		t.Fatalf("signature: %v", err)
	}
	if got := p.header.Get("Idempotency-Key"); got != out.OutID {
		t.Errorf("Idempotency-Key = %q", got)
	}
	var body webhook.Outbound
	if err := json.Unmarshal(p.body, &body); err != nil {
		t.Fatal(err)
	}
	want := webhook.Outbound{ID: out.OutID, ReplyTo: "m1", Bot: "b1", Scene: webhook.Scene{Type: "group", ID: "g1"}, Content: out.Content}
	if gotJ, wantJ := mustJSON(t, body), mustJSON(t, want); gotJ != wantJ {
		t.Fatalf("body\n got %s\nwant %s", gotJ, wantJ)
	}

	// Receipt on IM_SENT, with the platform message id and the outbound's correlation.
	m := lastMsg(t, srv.JS, events.StreamIMSent, events.IMSentSubject(out.SessionKey()))
	rev := new(events.Event[events.Receipt])
	if err := events.Unmarshal(m.Data, rev); err != nil {
		t.Fatal(err)
	}
	if rev.Data.MessageID != "plat-42" || rev.Data.OutID != out.OutID || rev.Trace != testTrace || rev.Turn != "t1" {
		t.Fatalf("receipt = %+v (trace %q turn %q)", rev.Data, rev.Trace, rev.Turn)
	}
	if m.Header.Get(events.HeaderMsgID) != "sent/"+out.OutID {
		t.Errorf("receipt Nats-Msg-Id = %q", m.Header.Get(events.HeaderMsgID))
	}

	// The receipt is the one delivery record: KV delivered is not written.
	kv, err := srv.JS.KeyValue(context.Background(), events.BucketDelivered)
	if err != nil {
		t.Fatal(err)
	}
	if ent, err := kv.Get(context.Background(), events.EncodeToken(out.OutID)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("KV delivered has %v (%v), want no entry", ent, err)
	}
	if s := h.Stats(); s.Delivered != 1 || s.DeadLettered != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

func mustJSON(t testing.TB, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSameOutIDTwiceSentOnce(t *testing.T) {
	srv := natstest.New(t)
	cb := newCallback(t, nil)
	h := start(t, fastOptions(srv, testConfig(cb), t))

	out := outbound("turnB-0")
	// Two stream messages with the same out id: different Nats-Msg-Id gets past the stream's
	// dedupe, as a republish after the duplicate window would.
	publish(t, srv.JS, out, "copy-1")
	publish(t, srv.JS, out, "copy-2")
	testwait.Eventually(t, 0, func() error {
		s := h.Stats()
		return testwait.Want(s.Delivered+s.Skipped == 2, "both copies handled: stats %+v", s)
	})
	if n := cb.count(); n != 1 {
		t.Fatalf("callback got %d posts, want 1", n)
	}
	if s := h.Stats(); s.Delivered != 1 || s.Skipped != 1 {
		t.Fatalf("stats = %+v", s)
	}
	if n := streamMsgs(t, srv.JS, events.StreamIMSent, events.PrefixIMSent+".>"); n != 1 {
		t.Fatalf("%d receipts, want 1", n)
	}
}

// TestLegacyDeliveredRecord: a part an older version delivered has an entry in KV delivered
// and maybe no receipt on its subject. Its redelivery is not sent again, and its receipt is
// written once.
func TestLegacyDeliveredRecord(t *testing.T) {
	srv := natstest.New(t)
	cb := newCallback(t, nil)
	h := start(t, fastOptions(srv, testConfig(cb), t))
	out := outbound("turnL-0")
	kv, err := srv.JS.KeyValue(context.Background(), events.BucketDelivered)
	if err != nil {
		t.Fatal(err)
	}
	val := mustJSON(t, record{OutID: out.OutID, MessageID: "plat-old", Time: 1767225600000})
	if _, err := kv.Create(context.Background(), events.EncodeToken(out.OutID), []byte(val)); err != nil {
		t.Fatal(err)
	}
	publish(t, srv.JS, out, "old-1")
	publish(t, srv.JS, out, "old-2")
	testwait.Eventually(t, 0, func() error {
		return testwait.Want(h.Stats().Skipped == 2, "both copies skipped: stats %+v", h.Stats())
	})
	if n := cb.count(); n != 0 {
		t.Fatalf("callback got %d posts, want 0 (delivered by the older version)", n)
	}
	if n := streamMsgs(t, srv.JS, events.StreamIMSent, events.PrefixIMSent+".>"); n != 1 {
		t.Fatalf("%d receipts, want 1", n)
	}
	m := lastMsg(t, srv.JS, events.StreamIMSent, events.IMSentSubject(out.SessionKey()))
	rev := new(events.Event[events.Receipt])
	if err := events.Unmarshal(m.Data, rev); err != nil || rev.Data.MessageID != "plat-old" {
		t.Fatalf("receipt %+v (%v), want the older record's platform message id", rev.Data, err)
	}
}

// TestStoppedAfterSendBeforeAck: egress dies after the platform took the part and the
// delivery was recorded, but before the ack reached the server. The part is redelivered to the
// next egress, which must not send it again.
func TestStoppedAfterSendBeforeAck(t *testing.T) {
	srv := natstest.New(t)
	cb := newCallback(t, nil)

	o := fastOptions(srv, testConfig(cb), t)
	var first *Handle
	crashed := make(chan struct{})
	o.afterRecord = func(events.Outbound) {
		// Cut the subscription's connection: the ack that follows this return is lost, as in
		// a process killed at this point.
		first.subConn.Close()
		close(crashed)
	}
	first = start(t, o)

	out := outbound("turnC-0")
	publish(t, srv.JS, out, "")
	select {
	case <-crashed:
	case <-time.After(10 * time.Second):
		t.Fatal("first egress never delivered")
	}
	_ = first.Stop(context.Background())
	if n := cb.count(); n != 1 {
		t.Fatalf("callback got %d posts before restart, want 1", n)
	}

	o2 := fastOptions(srv, testConfig(cb), t)
	second := start(t, o2)
	// The unacked part comes back after AckWait (1 s) and is skipped.
	testwait.Eventually(t, 0, func() error {
		return testwait.Want(second.Stats().Skipped == 1, "redelivery to be skipped: stats %+v", second.Stats())
	})
	if n := cb.count(); n != 1 {
		t.Fatalf("callback got %d posts, want exactly 1", n)
	}
	if s := second.Stats(); s.Delivered != 0 {
		t.Fatalf("second egress delivered again: %+v", s)
	}
	if n := streamMsgs(t, srv.JS, events.StreamIMSent, events.PrefixIMSent+".>"); n != 1 {
		t.Fatalf("%d receipts, want 1", n)
	}
	// Acked now: nothing comes back (a window to wait out, longer than AckWait).
	time.Sleep(1500 * time.Millisecond)
	if s := second.Stats(); s.Skipped != 1 || cb.count() != 1 {
		t.Fatalf("after ack: stats %+v, posts %d", s, cb.count())
	}
}

func TestRetries(t *testing.T) {
	tests := []struct {
		name      string
		reply     func(n int) (int, http.Header, string)
		maxRetry  int
		maxDeliv  int
		wantPosts int
		wantDLQ   string // reason, "" = delivered
	}{
		{
			name: "500 twice then 200",
			reply: func(n int) (int, http.Header, string) {
				if n <= 2 {
					return 500, nil, "boom"
				}
				return 200, nil, ""
			},
			wantPosts: 3,
		},
		{
			name:      "400 is permanent",
			reply:     func(int) (int, http.Header, string) { return 400, nil, `{"error":"bad scene"}` },
			wantPosts: 1,
			wantDLQ:   ReasonRejected,
		},
		{
			name:      "503 on every delivery",
			reply:     func(int) (int, http.Header, string) { return 503, nil, "" },
			maxRetry:  1,
			maxDeliv:  2,
			wantPosts: 4, // 2 deliveries × (1 try + 1 retry)
			wantDLQ:   ReasonMaxDeliveries,
		},
		{
			name: "429 then 200",
			reply: func(n int) (int, http.Header, string) {
				if n == 1 {
					return 429, nil, ""
				}
				return 200, nil, ""
			},
			wantPosts: 2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := natstest.New(t)
			cb := newCallback(t, tc.reply)
			o := fastOptions(srv, testConfig(cb), t)
			o.MaxRetries, o.MaxDeliveries = tc.maxRetry, tc.maxDeliv
			h := start(t, o)
			out := outbound("turnR-0")
			publish(t, srv.JS, out, "")
			if tc.wantDLQ == "" {
				testwait.Eventually(t, 0, func() error { return testwait.Want(h.Stats().Delivered == 1, "delivery: stats %+v", h.Stats()) })
			} else {
				dl := deadLetter(t, srv.JS, tc.wantDLQ)
				if dl.Data.Role != events.RoleEgress || dl.Data.Subject != events.IMOutSubject(out.SessionKey()) || dl.Data.Seq == 0 {
					t.Fatalf("dead letter = %+v", dl.Data)
				}
				var back events.Event[events.Outbound]
				if err := events.Unmarshal(dl.Data.Body(), &back); err != nil || back.Data.OutID != out.OutID {
					t.Fatalf("dead letter body: %v %+v", err, back.Data)
				}
				if dl.Trace != testTrace {
					t.Errorf("dead letter trace = %q", dl.Trace)
				}
				t.Logf("dead letter error: %s", dl.Data.Error)
			}
			// Nothing is retried forever: the count stays put (a window to wait out).
			time.Sleep(200 * time.Millisecond)
			if n := cb.count(); n != tc.wantPosts {
				t.Fatalf("callback got %d posts, want %d", n, tc.wantPosts)
			}
		})
	}
}

func TestRetryAfterPausesPlatform(t *testing.T) {
	srv := natstest.New(t)
	cb := newCallback(t, func(n int) (int, http.Header, string) {
		if n == 1 {
			return 429, http.Header{"Retry-After": {"1"}}, ""
		}
		return 200, nil, ""
	})
	h := start(t, fastOptions(srv, testConfig(cb), t))
	publish(t, srv.JS, outbound("turnRA-0"), "")
	testwait.Eventually(t, 0, func() error { return testwait.Want(h.Stats().Delivered == 1, "delivery: stats %+v", h.Stats()) })
	if gap := cb.get(1).at.Sub(cb.get(0).at); gap < 900*time.Millisecond {
		t.Fatalf("retried %v after a 429 with Retry-After: 1", gap)
	}
}

func TestDeadLetters(t *testing.T) {
	tests := []struct {
		name    string
		publish func(t *testing.T, js jetstream.JetStream)
		reason  string
		errText string
	}{
		{
			name: "malformed JSON",
			publish: func(t *testing.T, js jetstream.JetStream) {
				publishRaw(t, js, "im.out.webhook.b1.group.g1", []byte("{not json"))
			},
			reason:  ReasonInvalid,
			errText: "malformed JSON",
		},
		{
			name: "valid JSON, missing outId",
			publish: func(t *testing.T, js jetstream.JetStream) {
				publishRaw(t, js, "im.out.webhook.b1.group.g1",
					[]byte(`{"type":"im.out","v":1,"id":"x","time":1,"data":{"platform":"webhook","bot":"b1","scene":{"type":"group","id":"g1"},"content":[{"type":"text","data":{"text":"hi"}}]}}`))
			},
			reason:  ReasonInvalid,
			errText: "outId is required",
		},
		{
			name: "unknown platform",
			publish: func(t *testing.T, js jetstream.JetStream) {
				o := outbound("turnU-0")
				o.Platform = "carrier-pigeon"
				publish(t, js, o, "")
			},
			reason:  ReasonNoSender,
			errText: `no sender for platform "carrier-pigeon"`,
		},
		{
			name: "unknown bot",
			publish: func(t *testing.T, js jetstream.JetStream) {
				o := outbound("turnK-0")
				o.Bot = "ghost"
				publish(t, js, o, "")
			},
			reason:  ReasonUnknownBot,
			errText: `"ghost" is not configured`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := natstest.New(t)
			cb := newCallback(t, nil)
			h := start(t, fastOptions(srv, testConfig(cb), t))
			tc.publish(t, srv.JS)
			dl := deadLetter(t, srv.JS, tc.reason)
			if !strings.Contains(dl.Data.Error, tc.errText) {
				t.Fatalf("dead letter error %q, want it to mention %q", dl.Data.Error, tc.errText)
			}
			if len(dl.Data.Body()) == 0 {
				t.Fatal("dead letter lost the original body")
			}
			testwait.Eventually(t, 0, func() error { return testwait.Want(h.Stats().DeadLettered == 1, "ack: stats %+v", h.Stats()) })
			if cb.count() != 0 {
				t.Fatalf("callback got %d posts", cb.count())
			}
		})
	}
}

func TestConsole(t *testing.T) {
	srv := natstest.New(t)
	h := start(t, fastOptions(srv, testConfig(nil), t))
	sub, err := srv.NC.SubscribeSync(console.Subject("local", "me"))
	if err != nil {
		t.Fatal(err)
	}
	out := outbound("turnT-0")
	out.Platform, out.Bot, out.Scene = console.Platform, "local", events.Scene{Type: "private", ID: "me"}
	publish(t, srv.JS, out, "")
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("console message: %v", err)
	}
	ev := new(events.Event[events.Outbound])
	if err := events.UnmarshalMsg(m, ev); err != nil {
		t.Fatal(err)
	}
	if ev.Data.OutID != out.OutID || ev.Data.Content.PlainText() != out.Content.PlainText() || ev.Trace != testTrace {
		t.Fatalf("console got %+v trace %q", ev.Data, ev.Trace)
	}
	// The receipt (the delivery record) is written before the delivery is counted.
	testwait.Eventually(t, 0, func() error { return testwait.Want(h.Stats().Delivered == 1, "receipt: stats %+v", h.Stats()) })
	rm := lastMsg(t, srv.JS, events.StreamIMSent, events.IMSentSubject(out.SessionKey()))
	var rev events.Event[events.Receipt]
	if err := events.Unmarshal(rm.Data, &rev); err != nil || rev.Data.MessageID != out.OutID {
		t.Fatalf("receipt %v %+v", err, rev.Data)
	}
}

func TestSenderOverride(t *testing.T) {
	srv := natstest.New(t)
	got := make(chan events.Outbound, 1)
	o := fastOptions(srv, testConfig(nil), t)
	o.Senders["pigeon"] = im.SenderFunc(func(ctx context.Context, out events.Outbound) (string, error) {
		got <- out
		return "coo-1", nil
	})
	start(t, o)
	out := outbound("turnP-0")
	out.Platform = "pigeon"
	publish(t, srv.JS, out, "")
	select {
	case g := <-got:
		if g.OutID != out.OutID {
			t.Fatalf("got %+v", g)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("custom sender not called")
	}
}

// A send that outlasts AckWait is kept alive by in-progress acks, and so are the parts waiting
// in its lane behind it: the server does not hand a part out again meanwhile (a second copy
// would wait behind the first and then be skipped), however short AckWait is.
func TestSlowSendNotRedelivered(t *testing.T) {
	for _, tc := range []struct {
		name  string
		parts int // parts of one scene: all but the first wait in the lane
	}{
		{"the part being sent", 1},
		{"parts waiting in the lane behind it", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := natstest.New(t)
			var calls atomic.Int32
			o := fastOptions(srv, testConfig(nil), t) // AckWait 1 s
			o.Concurrency = 1
			o.Senders["slow"] = im.SenderFunc(func(ctx context.Context, out events.Outbound) (string, error) {
				n := calls.Add(1)
				if n == 1 {
					// The send outlasts AckWait: the point of the test.
					time.Sleep(2500 * time.Millisecond)
				}
				return fmt.Sprint("slow-", n), nil
			})
			h := start(t, o)
			for i := range tc.parts {
				out := outbound(fmt.Sprintf("turnS-%d", i))
				out.Platform = "slow"
				publish(t, srv.JS, out, "")
			}
			testwait.Eventually(t, 0, func() error {
				return testwait.Want(h.Stats().Delivered == uint64(tc.parts), "the slow parts: stats %+v", h.Stats())
			})
			time.Sleep(1500 * time.Millisecond) // a redelivery after AckWait would show up here
			if s := h.Stats(); calls.Load() != int32(tc.parts) || s.Skipped != 0 {
				t.Fatalf("%d sends, stats %+v: a part was redelivered while it was in hand", calls.Load(), s)
			}
			cons, err := srv.JS.Consumer(context.Background(), events.StreamIMOut, DefaultDurable)
			if err != nil {
				t.Fatal(err)
			}
			if ci, err := cons.Info(context.Background()); err != nil || ci.NumRedelivered != 0 || ci.NumAckPending != 0 {
				t.Fatalf("consumer %+v %v", ci, err)
			}
		})
	}
}

func TestRunRequiresProvisionedStreams(t *testing.T) {
	srv := natstest.New(t, natstest.WithoutProvision())
	_, err := Run(context.Background(), Options{NC: srv.NC, JS: srv.JS, Log: testLogger(t)})
	if err == nil || !strings.Contains(err.Error(), "provisioned") {
		t.Fatalf("Run on an empty server: %v", err)
	}
	// And it did not create anything.
	names := srv.JS.StreamNames(context.Background())
	for n := range names.Name() {
		t.Fatalf("egress created stream %s", n)
	}
	if _, err := Run(context.Background(), Options{}); err == nil {
		t.Fatal("Run without NC succeeded")
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		err    error
		reason string
		perm   bool
	}{
		{statusErr(400), ReasonRejected, true},
		{statusErr(404), ReasonRejected, true},
		{statusErr(408), "", false},
		{statusErr(429), "", false},
		{statusErr(502), "", false},
		{errors.New("connection refused"), "", false},
		{im.ErrUnknownBot, ReasonUnknownBot, true},
		{im.ErrRejected, ReasonRejected, true},
		// An adapter's unknown bot, which it also marks permanent, is an unknown bot
		// (issue 38: it used to be dead-lettered as "rejected").
		{im.Permanent(fmt.Errorf("%w: telegram bot %q is not configured", im.ErrUnknownBot, "ghost")), ReasonUnknownBot, true},
		{ErrNoSender, ReasonNoSender, true},
		{events.ErrInvalid, ReasonInvalid, true},
		{permanent("custom", errors.New("x")), "custom", true},
		{context.DeadlineExceeded, "", false},
		{nats.ErrTimeout, "", false},
		// Errors of the pkg/im adapters say Permanent() themselves.
		{fmt.Errorf("send: %w", selfPermanentErr(true)), ReasonRejected, true},
		{selfPermanentErr(false), "", false},
	}
	for _, tc := range tests {
		reason, perm := classify(tc.err)
		if reason != tc.reason || perm != tc.perm {
			t.Errorf("classify(%v) = %q, %v; want %q, %v", tc.err, reason, perm, tc.reason, tc.perm)
		}
	}
}

// statusErr is a platform's HTTP answer with code, as pkg/im classifies it.
func statusErr(code int) error {
	return im.HTTPError("webhook", "callback", &http.Response{StatusCode: code, Header: http.Header{}}, nil)
}

func TestRedeliveryDelay(t *testing.T) {
	d := redeliveryDelay{base: time.Second, max: 5 * time.Second}
	for n, want := range map[uint64]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 5 * time.Second, 100: 5 * time.Second} {
		if got := d.WaitTime(n); got != want {
			t.Errorf("WaitTime(%d) = %v, want %v", n, got, want)
		}
	}
}

var testLevel = func() slog.Level {
	if os.Getenv("EGRESS_DEBUG") != "" {
		return slog.LevelDebug
	}
	return slog.LevelWarn
}()

// TestSceneOrder: parts for one scene reach the platform in the order they were published,
// while several scenes are in flight at once.
func TestSceneOrder(t *testing.T) {
	srv := natstest.New(t)
	var mu sync.Mutex
	got := map[string][]string{} // scene -> out ids in arrival order
	cb := newCallback(t, func(n int) (int, http.Header, string) {
		// Uneven latency, so that a later part would overtake an earlier one if it could.
		time.Sleep(time.Duration(n%4) * time.Millisecond)
		return 200, nil, ""
	})
	o := fastOptions(srv, testConfig(cb), t)
	o.Concurrency = 8
	h := start(t, o)
	const scenes, parts = 5, 30
	var want = map[string][]string{}
	for p := 0; p < parts; p++ {
		for s := 0; s < scenes; s++ {
			out := outbound(fmt.Sprintf("t%d-s%d", p, s))
			out.Scene.ID = fmt.Sprintf("g%d", s)
			want[out.Scene.ID] = append(want[out.Scene.ID], out.OutID)
			publish(t, srv.JS, out, "")
		}
	}
	testwait.Eventually(t, 0, func() error {
		return testwait.Want(h.Stats().Delivered == scenes*parts, "all parts: stats %+v", h.Stats())
	})
	for i := 0; i < cb.count(); i++ {
		var body webhook.Outbound
		if err := json.Unmarshal(cb.get(i).body, &body); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		got[body.Scene.ID] = append(got[body.Scene.ID], body.ID)
		mu.Unlock()
	}
	for scene, ids := range want {
		if fmt.Sprint(got[scene]) != fmt.Sprint(ids) {
			t.Fatalf("scene %s order\n got %v\nwant %v", scene, got[scene], ids)
		}
	}
}

func TestPanickingSenderDeadLettered(t *testing.T) {
	srv := natstest.New(t)
	o := fastOptions(srv, testConfig(nil), t)
	var calls atomic.Int32
	o.Senders["boom"] = im.SenderFunc(func(context.Context, events.Outbound) (string, error) {
		calls.Add(1)
		panic("sender bug")
	})
	h := start(t, o)
	out := outbound("turnX-0")
	out.Platform = "boom"
	publish(t, srv.JS, out, "")
	dl := deadLetter(t, srv.JS, ReasonPoison)
	if !strings.Contains(dl.Data.Error, "sender bug") {
		t.Fatalf("dead letter error %q", dl.Data.Error)
	}
	testwait.Eventually(t, 0, func() error { return testwait.Want(h.Stats().DeadLettered == 1, "ack: stats %+v", h.Stats()) })
	if n := calls.Load(); n != 1 {
		t.Fatalf("panicking sender called %d times, want 1 (no retries)", n)
	}
}

// TestStopFinishesSendInFlight: Stop during a slow send lets the send finish, records it and
// acks it, instead of abandoning a request the platform may have accepted.
func TestStopFinishesSendInFlight(t *testing.T) {
	srv := natstest.New(t)
	cb := newCallback(t, func(int) (int, http.Header, string) {
		time.Sleep(300 * time.Millisecond) // a slow platform: the send is in flight when Stop comes
		return 200, nil, ""
	})
	h := start(t, fastOptions(srv, testConfig(cb), t))
	publish(t, srv.JS, outbound("turnS-0"), "")
	testwait.Eventually(t, 0, func() error { return testwait.Want(cb.count() == 1, "the send to start") })
	if err := h.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if s := h.Stats(); s.Delivered != 1 {
		t.Fatalf("stats after Stop: %+v", s)
	}
	info, err := srv.JS.Consumer(context.Background(), events.StreamIMOut, DefaultDurable)
	if err != nil {
		t.Fatal(err)
	}
	ci, err := info.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ci.NumAckPending != 0 || ci.NumPending != 0 || ci.AckFloor.Stream != 1 {
		t.Fatalf("consumer after Stop: ack pending %d, pending %d, ack floor %d", ci.NumAckPending, ci.NumPending, ci.AckFloor.Stream)
	}
}

func TestPlatformRateLimit(t *testing.T) {
	srv := natstest.New(t)
	cb := newCallback(t, nil)
	o := fastOptions(srv, testConfig(cb), t)
	o.RateLimits = map[string]RateLimit{imwebhook.Platform: {PerSecond: 20, Burst: 1}}
	h := start(t, o)
	const n = 10
	for i := 0; i < n; i++ {
		out := outbound(fmt.Sprintf("turnL%d-0", i))
		out.Scene.ID = fmt.Sprintf("g%d", i) // different scenes: only the platform limit serializes them
		publish(t, srv.JS, out, "")
	}
	testwait.Eventually(t, 0, func() error { return testwait.Want(h.Stats().Delivered == n, "all parts: stats %+v", h.Stats()) })
	// 10 sends at 20/s with a burst of 1 take at least 9 intervals of 50 ms.
	if span := cb.get(n - 1).at.Sub(cb.get(0).at); span < 400*time.Millisecond {
		t.Fatalf("10 sends at 20/s took only %v", span)
	}
}

func TestToMessageKeepsHeaders(t *testing.T) {
	srv := natstest.New(t)
	out := outbound("turnM-0")
	publish(t, srv.JS, out, "")
	cons, err := srv.JS.OrderedConsumer(context.Background(), events.StreamIMOut, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	wm := toMessage(context.Background(), m)
	for k, want := range map[string]string{
		events.HeaderMsgID: out.OutID,
		events.HeaderTrace: testTrace,
		events.HeaderTurn:  "t1",
		events.HeaderType:  events.TypeIMOut,
		MetaSubject:        events.IMOutSubject(out.SessionKey()),
		MetaStream:         events.StreamIMOut,
		MetaStreamSeq:      "1",
		MetaDelivered:      "1",
	} {
		if got := wm.Metadata.Get(k); got != want {
			t.Errorf("metadata %s = %q, want %q", k, got, want)
		}
	}
	if jsMsgFrom(wm.Context()) == nil || string(wm.Payload) != string(m.Data()) || wm.UUID == "" {
		t.Fatal("watermill message lost the JetStream message, payload or uuid")
	}
}

type selfPermanentErr bool

func (e selfPermanentErr) Error() string   { return "platform said no" }
func (e selfPermanentErr) Permanent() bool { return bool(e) }

// TestRecreatedConsumerSendsNothingTwice: parts delivered through one consumer are delivered
// "for the first time" again by a recreated consumer (same durable, deleted and made anew) and
// by a new durable; both find every receipt and send nothing twice, Fresh or not.
func TestRecreatedConsumerSendsNothingTwice(t *testing.T) {
	const n = 20
	for _, tc := range []struct {
		name    string
		durable string // of the second egress; "" = the same, with its consumer deleted first
	}{
		{"recreated consumer", ""},
		{"new durable", "egress-standby"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := natstest.New(t)
			cb := newCallback(t, nil)
			o := fastOptions(srv, testConfig(cb), t)
			h := start(t, o)
			for i := range n {
				out := outbound(fmt.Sprintf("turnR%d-0", i))
				out.Fresh = true
				publish(t, srv.JS, out, "")
			}
			testwait.Eventually(t, 0, func() error { return testwait.Want(h.Stats().Delivered == n, "first delivery: stats %+v", h.Stats()) })
			if err := h.Stop(context.Background()); err != nil {
				t.Fatalf("stop: %v", err)
			}
			if tc.durable == "" {
				if err := srv.JS.DeleteConsumer(context.Background(), events.StreamIMOut, DefaultDurable); err != nil {
					t.Fatalf("delete consumer: %v", err)
				}
			}
			o2 := fastOptions(srv, testConfig(cb), t)
			o2.Durable = tc.durable
			h2 := start(t, o2)
			testwait.Eventually(t, 0, func() error { return testwait.Want(h2.Stats().Skipped == n, "second delivery: stats %+v", h2.Stats()) })
			if s := h2.Stats(); s.Delivered != 0 || s.DeadLettered != 0 {
				t.Fatalf("second egress stats = %+v, want %d skipped and nothing sent", s, n)
			}
			if got := cb.count(); got != n {
				t.Fatalf("callback got %d posts, want %d (each part once)", got, n)
			}
		})
	}
}

// TestReceiptsShareTheChatSubject: receipts of many parts of one chat are on one subject (the
// out id in a header), and a receipt an older version wrote on the part's own subject still
// keeps its part from being sent again.
func TestReceiptsShareTheChatSubject(t *testing.T) {
	srv := natstest.New(t)
	cb := newCallback(t, nil)
	// An older version's receipt for part turnOld-0, on its own subject.
	old := outbound("turnOld-0")
	rec := events.New(events.Receipt{OutID: old.OutID, Platform: old.Platform, Bot: old.Bot, Scene: old.Scene, MessageID: "p-old", Time: time.Now().UnixMilli(), Sender: events.Sender{ID: old.Bot}})
	m, err := events.NewMsg(events.IMSentPartSubject(old.SessionKey(), old.OutID), rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.JS.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	h := start(t, fastOptions(srv, testConfig(cb), t))
	const n = 10
	for i := range n {
		publish(t, srv.JS, outbound(fmt.Sprintf("turnS%d-0", i)), "")
	}
	publish(t, srv.JS, old, "")
	testwait.Eventually(t, 0, func() error {
		s := h.Stats()
		return testwait.Want(s.Delivered+s.Skipped == n+1, "every part handled: stats %+v", s)
	})
	if s := h.Stats(); s.Delivered != n || s.Skipped != 1 || cb.count() != n {
		t.Fatalf("stats %+v, %d posts; want %d sent and the old part skipped", s, cb.count(), n)
	}
	st, err := srv.JS.Stream(context.Background(), events.StreamIMSent)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(events.PrefixIMSent+".>"))
	if err != nil {
		t.Fatal(err)
	}
	// The chat's subject (n receipts) and the old part's subject.
	if len(info.State.Subjects) != 2 || info.State.Subjects[events.IMSentSubject(old.SessionKey())] != n {
		t.Fatalf("receipt subjects %v, want the chat's with %d and the old part's", info.State.Subjects, n)
	}
}
