package llmbus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/faux"
	"github.com/agentbus/agentbus/pkg/llmbus"
	"github.com/agentbus/agentbus/pkg/models"
	"github.com/agentbus/agentbus/pkg/natsutil"
)

// margin bounds waits that succeed quickly unless something is broken.
const margin = 20 * time.Second

func model() *llm.Model {
	return &llm.Model{ID: "m1", API: llmbus.API, Provider: "remote", Cost: testCost}
}

func hello() *llm.Context {
	return &llm.Context{Messages: []llm.Message{llm.UserText("hello", time.Now().UnixMilli())}}
}

func final(t *testing.T, ctx context.Context, c llm.Provider) (*llm.Message, []llm.EventType) {
	t.Helper()
	var types []llm.EventType
	var m *llm.Message
	for ev := range c.Stream(ctx, model(), hello(), nil) {
		types = append(types, ev.Type)
		if ev.Message != nil {
			m = ev.Message
		}
	}
	if m == nil {
		t.Fatalf("no terminal event: %v", types)
	}
	return m, types
}

// TestNoResponders: nobody serves the subject. The client tries DefaultAttempts times,
// telling the retry hook of each wait, and then fails with an error pkg/models' fallback
// treats as an unreachable provider. A server that comes up during the waits is found.
func TestNoResponders(t *testing.T) {
	srv := newServer(t)
	nc, _ := srv.Connect(t)
	c, err := llmbus.NewClient(nc, "llm.nobody", llmbus.WithAttempts(3, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var retries []llm.Retry
	ctx := llm.WithRetryHook(context.Background(), func(r llm.Retry) { retries = append(retries, r) })
	m, _ := final(t, ctx, c)
	if m.StopReason != llm.StopReasonError || !strings.Contains(m.ErrorMessage, "no responders") {
		t.Fatalf("stop %s, error %q; want an error naming no responders", m.StopReason, m.ErrorMessage)
	}
	if len(retries) != 2 || retries[0].Reason != llm.RetryTransport || retries[1].Wait != 20*time.Millisecond {
		t.Errorf("retries %+v, want two transport retries waiting 10ms then 20ms", retries)
	}
	if reason, ok := models.FallbackReason(m); !ok || reason != models.ReasonUnreachable {
		t.Errorf("FallbackReason = %q, %v; want %q: another model may answer", reason, ok, models.ReasonUnreachable)
	}

	// The service starts while the client waits between attempts.
	late, err := llmbus.NewClient(nc, "llm.late", llmbus.WithAttempts(10, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	ctx = llm.WithRetryHook(context.Background(), func(r llm.Retry) {
		if r.Attempt == 1 {
			close(started)
		}
	})
	go func() {
		<-started
		snc, _ := srv.Connect(t)
		if _, err := llmbus.Serve(context.Background(), snc, "llm.late", faux.New(faux.WithResponder(func(*llm.Context) faux.Response { return faux.Response{Text: "up"} }))); err != nil {
			t.Error(err)
		}
	}()
	if m, _ := final(t, ctx, late); m.StopReason != llm.StopReasonStop || m.TextContent() != "up" {
		t.Fatalf("late service: %s %q %q", m.StopReason, m.TextContent(), m.ErrorMessage)
	}
}

// blocking is a provider that streams one delta and then waits for its context; it records
// when it saw the cancellation.
type blocking struct {
	cancelled chan struct{}
	once      sync.Once
}

func (b *blocking) Stream(ctx context.Context, m *llm.Model, _ *llm.Context, _ *llm.StreamOptions) iter.Seq[llm.Event] {
	return func(yield func(llm.Event) bool) {
		msg := llm.NewAssistant(m)
		if !yield(llm.Event{Type: llm.EventStart, Partial: msg}) {
			return
		}
		msg.Content = append(msg.Content, llm.Text("partial"))
		if !yield(llm.Event{Type: llm.EventTextStart, Partial: msg}) ||
			!yield(llm.Event{Type: llm.EventTextDelta, Delta: "partial", Partial: msg}) {
			return
		}
		<-ctx.Done()
		b.once.Do(func() { close(b.cancelled) })
		yield(llm.ErrorEvent(m, msg, llm.StopReasonAborted, ctx.Err()))
	}
}

// TestCancellationReachesServer: the three ways a call ends early each stop the provider
// behind the bus: the caller's ctx is cancelled (a cancel message), the consumer breaks out
// of the range (a cancel message), and the client vanishes without a word (its inbox is gone,
// so the server's next heartbeat gets a no-responders status on its control subject).
func TestCancellationReachesServer(t *testing.T) {
	srv := newServer(t)
	for _, how := range []string{"ctx", "break", "vanish"} {
		t.Run(how, func(t *testing.T) {
			b := &blocking{cancelled: make(chan struct{})}
			subject := "llm.cancel." + how
			c := serve(t, srv, subject, b, llmbus.WithHeartbeat(50*time.Millisecond))
			switch how {
			case "ctx":
				ctx, cancel := context.WithCancel(context.Background())
				var last llm.Event
				for ev := range c.Stream(ctx, model(), hello(), nil) {
					if ev.Type == llm.EventTextDelta {
						cancel()
					}
					last = ev
				}
				cancel()
				if last.Type != llm.EventError || last.Message.StopReason != llm.StopReasonAborted || last.Message.TextContent() != "partial" {
					t.Fatalf("last event %s %+v, want aborted keeping the partial text", last.Type, last.Message)
				}
			case "break":
				for ev := range c.Stream(context.Background(), model(), hello(), nil) {
					if ev.Type == llm.EventTextDelta {
						break
					}
				}
			case "vanish":
				nc, _ := srv.Connect(t)
				inbox := nc.NewInbox()
				sub, err := nc.SubscribeSync(inbox)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := json.Marshal(llmbus.Request{V: llmbus.Version, Model: *model(), Context: *hello()})
				if err := nc.PublishRequest(subject, inbox, body); err != nil {
					t.Fatal(err)
				}
				for seen := 0; seen < 4; seen++ { // heartbeat, start, text_start, text_delta
					if _, err := sub.NextMsg(margin); err != nil {
						t.Fatal(err)
					}
				}
				_ = sub.Unsubscribe() // no cancel message: the client is simply gone
			}
			select {
			case <-b.cancelled:
			case <-time.After(margin):
				t.Fatal("the provider behind the bus never saw the cancellation")
			}
		})
	}
}

// TestHeartbeatsAndIdleTimeout: a model that takes longer than the client's idle timeout to
// start is fine while the server sends heartbeats; a server that goes silent is given up on
// after the idle timeout.
func TestHeartbeatsAndIdleTimeout(t *testing.T) {
	srv := newServer(t)
	slow := faux.New(faux.WithLatency(800*time.Millisecond, 0), faux.WithResponder(func(*llm.Context) faux.Response { return faux.Response{Text: "slow but alive"} }))
	snc, _ := srv.Connect(t)
	if _, err := llmbus.Serve(context.Background(), snc, "llm.slow", slow, llmbus.WithHeartbeat(50*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	nc, _ := srv.Connect(t)
	c, err := llmbus.NewClient(nc, "llm.slow", llmbus.WithIdleTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := final(t, context.Background(), c); m.StopReason != llm.StopReasonStop || m.TextContent() != "slow but alive" {
		t.Fatalf("slow model with heartbeats: %s %q", m.StopReason, m.ErrorMessage)
	}

	// A service that accepts (one heartbeat) and then says nothing.
	if _, err := snc.Subscribe("llm.silent", func(m *nats.Msg) {
		b, _ := json.Marshal(llmbus.Event{V: 1, Seq: 1, Type: llmbus.TypeHeartbeat})
		_ = m.Respond(b)
	}); err != nil {
		t.Fatal(err)
	}
	c, err = llmbus.NewClient(nc, "llm.silent", llmbus.WithIdleTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := final(t, context.Background(), c)
	if m.StopReason != llm.StopReasonError || !strings.Contains(m.ErrorMessage, "timed out") {
		t.Fatalf("silent service: %s %q, want a timeout error", m.StopReason, m.ErrorMessage)
	}
	if reason, ok := models.FallbackReason(m); !ok || reason != models.ReasonUnavailable {
		t.Errorf("FallbackReason = %q, %v; want %q", reason, ok, models.ReasonUnavailable)
	}
}

// TestProtocolErrors: a server that breaks the contract gets a clear, permanent error (no
// fallback: another attempt would meet the same server).
func TestProtocolErrors(t *testing.T) {
	srv := newServer(t)
	snc, _ := srv.Connect(t)
	nc, _ := srv.Connect(t)
	ev := func(seq int, typ string, extra string) string {
		return fmt.Sprintf(`{"v":1,"seq":%d,"type":%q%s}`, seq, typ, extra)
	}
	for _, tc := range []struct {
		name string
		msgs []string
		want string
	}{
		{"not json", []string{`hello`}, "undecodable event"},
		{"other version", []string{`{"v":2,"seq":1,"type":"start"}`}, "event version 2"},
		{"lost event", []string{ev(1, "start", ""), ev(3, "text_start", "")}, "seq 3 after 1"},
		{"delta of no block", []string{ev(1, "start", ""), ev(2, "text_delta", `,"contentIndex":4,"delta":"x"`)}, "not open"},
		{"block out of order", []string{ev(1, "start", ""), ev(2, "text_start", `,"contentIndex":1`)}, "want 0"},
		{"wrong kind", []string{ev(1, "text_start", ""), ev(2, "toolcall_delta", `,"delta":"{"`)}, "a text block"},
		{"done without message", []string{ev(1, "start", ""), ev(2, "done", `,"reason":"stop"`)}, "done without a message"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			subject := "llm.proto." + strings.ReplaceAll(tc.name, " ", "_")
			if _, err := snc.Subscribe(subject, func(m *nats.Msg) {
				for _, s := range tc.msgs {
					_ = snc.Publish(m.Reply, []byte(s))
				}
			}); err != nil {
				t.Fatal(err)
			}
			c, err := llmbus.NewClient(nc, subject, llmbus.WithIdleTimeout(margin))
			if err != nil {
				t.Fatal(err)
			}
			m, _ := final(t, context.Background(), c)
			if m.StopReason != llm.StopReasonError || !strings.Contains(m.ErrorMessage, "protocol error") || !strings.Contains(m.ErrorMessage, tc.want) {
				t.Fatalf("error %q, want a protocol error containing %q", m.ErrorMessage, tc.want)
			}
			if reason, ok := models.FallbackReason(m); ok {
				t.Errorf("FallbackReason %q: a protocol error must not fall back", reason)
			}
		})
	}

	// A server refuses a request it cannot read, as one error event (and counts it in its
	// micro stats).
	s, err := llmbus.Serve(context.Background(), snc, "llm.refuse", faux.New())
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{`{"v":7}`, `not json`} {
		reply, err := nc.Request("llm.refuse", []byte(body), margin)
		if err != nil {
			t.Fatal(err)
		}
		var e llmbus.Event
		if err := json.Unmarshal(reply.Data, &e); err != nil || e.Type != "error" || e.Seq != 1 || e.Message == nil {
			t.Fatalf("refusal %q: %v %+v", reply.Data, err, e)
		}
		if want := map[string]string{`{"v":7}`: "unsupported version 7", `not json`: "bad request"}[body]; !strings.Contains(e.Message.ErrorMessage, want) {
			t.Errorf("refusal of %s: %q, want %q", body, e.Message.ErrorMessage, want)
		}
	}
	// The service counts an error after its reply is sent, so the count may trail the reply.
	testwait.Eventually(t, 0, func() error {
		st := s.Stats()
		return testwait.Want(len(st.Endpoints) == 1 && st.Endpoints[0].NumErrors == 2, "micro stats %+v, want 2 errors on the endpoint", st.Endpoints)
	})
}

// TestQueueGroupSharesLoad: two servers of one subject share its requests, and a stopped
// server takes no more while the other goes on answering.
func TestQueueGroupSharesLoad(t *testing.T) {
	srv := newServer(t)
	var counts [2]atomic.Int64
	var servers [2]*llmbus.Server
	for i := range servers {
		p := faux.New(faux.WithResponder(func(*llm.Context) faux.Response {
			counts[i].Add(1)
			return faux.Response{Text: fmt.Sprint("server ", i)}
		}))
		snc, _ := srv.Connect(t)
		s, err := llmbus.Serve(context.Background(), snc, "llm.shared", p)
		if err != nil {
			t.Fatal(err)
		}
		servers[i] = s
	}
	nc, _ := srv.Connect(t)
	c, err := llmbus.NewClient(nc, "llm.shared")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev := range llm.StreamProvider(context.Background(), c, model(), hello(), nil) {
				if ev.Type == llm.EventError {
					t.Errorf("error: %s", ev.Message.ErrorMessage)
				}
			}
		}()
	}
	wg.Wait()
	if counts[0].Load() == 0 || counts[1].Load() == 0 || counts[0].Load()+counts[1].Load() != 40 {
		t.Errorf("requests per server %d and %d, want both > 0 and 40 in all", counts[0].Load(), counts[1].Load())
	}
	ctx, cancel := context.WithTimeout(context.Background(), margin)
	defer cancel()
	if err := servers[0].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-servers[0].Done():
	default:
		t.Error("Done not closed after Stop")
	}
	before := counts[0].Load()
	for range 5 {
		if m, _ := final(t, context.Background(), c); m.TextContent() != "server 1" {
			t.Errorf("after server 0 stopped: %q %q", m.TextContent(), m.ErrorMessage)
		}
	}
	if counts[0].Load() != before {
		t.Errorf("a stopped server answered")
	}
}

// TestRolePermissions: with agentbus's role users, the turn worker may call a provider below
// llm. and cancel it, and a service user that may publish into the turn worker's inbox can
// answer.
func TestRolePermissions(t *testing.T) {
	emb, err := natsutil.StartEmbedded(natsutil.EmbeddedOptions{StoreDir: t.TempDir(), User: "root", Password: "admin-pw-123456", RoleUsers: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = emb.Close() })
	snc, err := emb.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(snc.Close)
	b := &blocking{cancelled: make(chan struct{})}
	if _, err := llmbus.Serve(context.Background(), snc, "llm.perm", b); err != nil {
		t.Fatal(err)
	}
	nc, err := emb.ConnectRole(natsutil.RoleTurnWorker)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := llmbus.NewClient(nc, "llm.perm")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var last llm.Event
	for ev := range c.Stream(ctx, model(), hello(), nil) {
		if ev.Type == llm.EventTextDelta {
			cancel()
		}
		last = ev
	}
	if last.Message == nil || last.Message.StopReason != llm.StopReasonAborted {
		t.Fatalf("last event %s %+v", last.Type, last.Message)
	}
	select {
	case <-b.cancelled:
	case <-time.After(margin):
		t.Fatal("the cancel message did not reach the server (turn-worker permissions?)")
	}
	if err := nc.LastError(); err != nil {
		t.Errorf("turn-worker connection error: %v", err)
	}
}

// TestTraceContextCrosses: a call made inside a span carries its W3C trace context, and the
// served provider's ctx continues that trace.
func TestTraceContextCrosses(t *testing.T) {
	got := make(chan trace.SpanContext, 1)
	p := llm.ProviderFunc(func(ctx context.Context, m *llm.Model, _ *llm.Context, _ *llm.StreamOptions) iter.Seq[llm.Event] {
		got <- trace.SpanContextFromContext(ctx)
		return faux.New(faux.WithResponder(func(*llm.Context) faux.Response { return faux.Response{Text: "ok"} })).Stream(ctx, m, nil, nil)
	})
	c := serve(t, newServer(t), "llm.traced", p)
	want := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(context.Background(), want)
	if m, _ := final(t, ctx, c); m.StopReason != llm.StopReasonStop {
		t.Fatalf("%s %s", m.StopReason, m.ErrorMessage)
	}
	sc := <-got
	if sc.TraceID() != want.TraceID() || sc.SpanID() != want.SpanID() || !sc.IsRemote() {
		t.Errorf("provider's span context %v, want the caller's %v (remote)", sc, want)
	}
}

// TestEventOverMaxPayload: a final message larger than the NATS server's max payload cannot
// be sent; the client hears why at once instead of waiting for its idle timeout.
func TestEventOverMaxPayload(t *testing.T) {
	huge := strings.Repeat("x", 2<<20)
	p := llm.ProviderFunc(func(ctx context.Context, m *llm.Model, _ *llm.Context, _ *llm.StreamOptions) iter.Seq[llm.Event] {
		return func(yield func(llm.Event) bool) {
			msg := llm.NewAssistant(m)
			if !yield(llm.Event{Type: llm.EventStart, Partial: msg}) {
				return
			}
			msg.Content = append(msg.Content, llm.Text(huge))
			msg.StopReason = llm.StopReasonStop
			yield(llm.Event{Type: llm.EventDone, Reason: llm.StopReasonStop, Message: msg})
		}
	})
	srv := newServer(t)
	snc, _ := srv.Connect(t)
	if _, err := llmbus.Serve(context.Background(), snc, "llm.huge", p); err != nil {
		t.Fatal(err)
	}
	nc, _ := srv.Connect(t)
	c, err := llmbus.NewClient(nc, "llm.huge", llmbus.WithIdleTimeout(margin))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := final(t, context.Background(), c) // a "timed out" error would mean it waited the idle timeout
	if m.StopReason != llm.StopReasonError || !strings.Contains(m.ErrorMessage, "could not send an event") || !strings.Contains(m.ErrorMessage, "maximum payload") {
		t.Fatalf("%s %q, want the server's report of the payload limit", m.StopReason, m.ErrorMessage)
	}
}
