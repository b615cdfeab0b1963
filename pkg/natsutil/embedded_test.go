package natsutil_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestEmbeddedRestartKeepsData(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	k := events.SessionKey{Platform: "qq", Bot: "b", Scope: events.ScopeGroup, Scene: "g"}

	emb, err := natsutil.StartEmbedded(natsutil.EmbeddedOptions{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if emb.ClientURL() != "" {
		t.Errorf("in-process server has client URL %q", emb.ClientURL())
	}
	nc, err := emb.Connect()
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	if err := natsutil.Provision(ctx, js, events.DefaultSpec()); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, events.AgentInSubject(k), []byte(`x`)); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	if err := emb.Close(); err != nil {
		t.Fatal(err)
	}
	if err := emb.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "jetstream")); err != nil {
		t.Fatalf("store dir not used: %v", err)
	}

	// Same directory again: the stream and its message are still there.
	emb2, err := natsutil.StartEmbedded(natsutil.EmbeddedOptions{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer emb2.Close()
	nc2, err := emb2.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	js2, _ := jetstream.New(nc2)
	s, err := js2.Stream(ctx, events.StreamSessionIn)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, events.AgentInSubject(k))
	if err != nil || string(m.Data) != "x" {
		t.Fatalf("after restart: %v %v", m, err)
	}
}

func TestStartEmbeddedErrors(t *testing.T) {
	if _, err := natsutil.StartEmbedded(natsutil.EmbeddedOptions{}); !errors.Is(err, natsutil.ErrConfig) {
		t.Errorf("no store dir: %v", err)
	}
	if _, err := natsutil.StartEmbedded(natsutil.EmbeddedOptions{StoreDir: t.TempDir(), Listen: "nope"}); !errors.Is(err, natsutil.ErrConfig) {
		t.Errorf("bad listen: %v", err)
	}
}

func TestConnectLoopback(t *testing.T) {
	srv := natstest.New(t, natstest.WithListen())
	if !strings.HasPrefix(srv.URL, "nats://127.0.0.1:") {
		t.Fatalf("URL %q", srv.URL)
	}
	ctx := ctxT(t)
	nc, err := natsutil.Connect(ctx, config.NATS{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if !nc.IsConnected() || nc.Opts.MaxReconnect != -1 {
		t.Errorf("connected=%v maxReconnect=%d", nc.IsConnected(), nc.Opts.MaxReconnect)
	}
	js, _ := jetstream.New(nc)
	k := events.SessionKey{Platform: "webhook", Bot: "demo", Scope: events.ScopePrivate, Scene: "alice"}
	msg, err := events.NewMsg(events.AgentInSubject(k), events.New(events.Abort{Sender: events.Sender{ID: "alice"}}))
	if err != nil {
		t.Fatal(err)
	}
	ack, err := js.PublishMsg(ctx, msg)
	if err != nil || ack.Stream != events.StreamSessionIn {
		t.Fatalf("publish over TCP: %v %v", ack, err)
	}
	// The same message again is deduplicated on its Nats-Msg-Id.
	ack, err = js.PublishMsg(ctx, msg)
	if err != nil || !ack.Duplicate {
		t.Fatalf("republish: %+v %v", ack, err)
	}
}

func TestConnectConfigErrors(t *testing.T) {
	ctx := ctxT(t)
	tests := []struct {
		name string
		cfg  config.NATS
		want string
	}{
		{"no url", config.NATS{}, "nats.url is required"},
		{"missing seed", config.NATS{URL: "nats://127.0.0.1:1", NKeySeed: filepath.Join(t.TempDir(), "none.nk")}, "nats.nkeySeed"},
		{"cert without key", config.NATS{URL: "nats://127.0.0.1:1", TLS: config.TLS{Cert: "c.pem"}}, "must be set together"},
	}
	for _, tt := range tests {
		_, err := natsutil.Connect(ctx, tt.cfg)
		if !errors.Is(err, natsutil.ErrConfig) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
	// Unreachable server: the error names the URL without its password.
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	_, err := natsutil.Connect(short, config.NATS{URL: "nats://bob:s3cret@127.0.0.1:1"})
	if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "[REDACTED]@127.0.0.1:1") {
		t.Errorf("unreachable: %v", err)
	}
}

func TestOpenEmbedded(t *testing.T) {
	ctx := ctxT(t)
	bus, err := natsutil.Open(ctx, config.NATS{Embedded: true, StoreDir: t.TempDir(), Listen: "127.0.0.1:0", Replicas: 1, Storage: "file"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bus.Embedded.ClientURL() == "" {
		t.Error("listen address ignored")
	}
	if _, err := bus.JS.KeyValue(ctx, events.BucketSessions); err != nil {
		t.Errorf("not provisioned: %v", err)
	}
	if err := bus.Close(); err != nil {
		t.Fatal(err)
	}
}

// The spec's promises about the server, checked on the real thing.

func TestScheduleFiresIntoInbox(t *testing.T) {
	srv := natstest.New(t)
	ctx := ctxT(t)
	k := events.SessionKey{Platform: "qq", Bot: "b", Scope: events.ScopeGroup, Scene: "g"}
	ev := events.New(events.Scheduled{ScheduleID: "s1", Text: "standup", CreatedBy: events.Sender{ID: "u"}})
	msg, err := events.NewMsg(events.ScheduleSubject(k, "s1"), ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.JS.PublishMsg(ctx, msg,
		jetstream.WithScheduleAt(time.Now().Add(time.Second)),
		jetstream.WithScheduleTarget(events.AgentInSubject(k))); err != nil {
		t.Fatalf("schedule: %v", err)
	}
	c, err := srv.JS.OrderedConsumer(ctx, events.StreamSessionIn, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.AgentInSubject(k)}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatalf("schedule did not fire: %v", err)
	}
	any, err := events.DecodeMsg(&nats.Msg{Data: got.Data(), Header: got.Headers()})
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := any.(*events.Event[events.Scheduled]); !ok || s.Data.Text != "standup" {
		t.Fatalf("fired %T %+v", any, any)
	}
}

func TestAtomicFencedBatchOnAgentCtx(t *testing.T) {
	srv := natstest.New(t)
	ctx := ctxT(t)
	k := events.SessionKey{Platform: "qq", Bot: "b", Scope: events.ScopeGroup, Scene: "g"}
	subj := events.AgentCtxSubject(events.NewSessionID(k, 1))
	batch := func(n int) []*nats.Msg {
		msgs := make([]*nats.Msg, n)
		for i := range msgs {
			msgs[i] = nats.NewMsg(subj)
			msgs[i].Data = []byte("m")
		}
		return msgs
	}
	// First commit expects an empty subject (last subject sequence 0).
	msgs := batch(4)
	msgs[0].Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	ack, err := jetstreamext.PublishMsgBatch(ctx, srv.JS, msgs)
	if err != nil || ack.BatchSize != 4 {
		t.Fatalf("atomic batch: %+v %v", ack, err)
	}
	// A stale writer (still expecting 0) gets nothing in.
	stale := batch(4)
	stale[0].Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	if _, err := jetstreamext.PublishMsgBatch(ctx, srv.JS, stale); err == nil {
		t.Fatal("stale batch accepted")
	}
	s, _ := srv.JS.Stream(ctx, events.StreamAgentCtx)
	info, _ := s.Info(ctx)
	if info.State.Msgs != 4 {
		t.Fatalf("stream holds %d messages, want 4", info.State.Msgs)
	}
}

func TestLeasesPerKeyTTL(t *testing.T) {
	srv := natstest.New(t)
	ctx := ctxT(t)
	kv, err := srv.JS.KeyValue(ctx, events.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "k", []byte("w1"), jetstream.KeyTTL(time.Second)); err != nil {
		t.Fatalf("per-key TTL refused: %v", err)
	}
	testwait.Eventually(t, 0, func() error {
		_, err := kv.Get(ctx, "k")
		return testwait.Want(errors.Is(err, jetstream.ErrKeyNotFound), "lease did not expire: %v", err)
	})
}

func TestBaselinePublish(t *testing.T) {
	srv := natstest.New(t)
	rate, err := natsutil.BaselinePublish(ctxT(t), srv.JS, 2000, 256)
	if err != nil || rate <= 0 {
		t.Fatalf("baseline: %v %v", rate, err)
	}
	if _, err := natsutil.BaselinePublish(ctxT(t), srv.JS, 0, 1); err == nil {
		t.Error("n=0 accepted")
	}
}

func BenchmarkBaselinePublish(b *testing.B) {
	srv := natstest.New(b)
	ctx := context.Background()
	var rate float64
	for b.Loop() {
		r, err := natsutil.BaselinePublish(ctx, srv.JS, 20000, 256)
		if err != nil {
			b.Fatal(err)
		}
		rate = r
	}
	b.ReportMetric(rate, "msgs/s")
}

func BenchmarkNewServer(b *testing.B) {
	for b.Loop() {
		natstest.New(b)
	}
}

func TestEmbeddedAuth(t *testing.T) {
	ctx := ctxT(t)
	emb, err := natsutil.StartEmbedded(natsutil.EmbeddedOptions{StoreDir: t.TempDir(), Listen: "127.0.0.1:0", Token: "s3cret-token"})
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	// In-process clients present the token themselves.
	nc, err := emb.Connect()
	if err != nil {
		t.Fatalf("in-process: %v", err)
	}
	nc.Close()
	// TCP clients need it.
	if nc, err := natsutil.Connect(ctx, config.NATS{URL: emb.ClientURL()}); err == nil {
		nc.Close()
		t.Fatal("connected without the token")
	} else if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error leaks the token: %v", err)
	}
	nc, err = natsutil.Connect(ctx, config.NATS{URL: emb.ClientURL(), Token: "s3cret-token"})
	if err != nil {
		t.Fatalf("with token: %v", err)
	}
	nc.Close()

	if _, err := natsutil.StartEmbedded(natsutil.EmbeddedOptions{StoreDir: t.TempDir(), Token: "a", User: "b"}); !errors.Is(err, natsutil.ErrConfig) {
		t.Errorf("token and user: %v", err)
	}
}
