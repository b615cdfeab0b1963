package store

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
)

// startJS starts an embedded JetStream server with a file store under a temp dir, connects
// in-process and provisions what the store needs.
// TODO(natsutil): use natstest once it provisions these specs.
func startJS(t testing.TB) jetstream.JetStream {
	t.Helper()
	opts := &server.Options{
		ServerName: "store-test",
		Host:       "127.0.0.1",
		Port:       -1,
		JetStream:  true,
		StoreDir:   t.TempDir(),
		NoLog:      true,
		NoSigs:     true,
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		nc.Close()
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	provision(t, js)
	return js
}

func provision(t testing.TB, js jetstream.JetStream) {
	t.Helper()
	ctx := context.Background()
	for _, cfg := range []jetstream.StreamConfig{
		{Name: streamAgentCtx, Subjects: []string{"agent.ctx.>"}, AllowDirect: true, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute},
		{Name: streamAgentEvents, Subjects: []string{"agent.evt.>"}, AllowDirect: true, Storage: jetstream.FileStorage},
		{Name: streamIMIn, Subjects: []string{"im.in.>"}, AllowDirect: true, Storage: jetstream.FileStorage},
		{Name: streamIMSent, Subjects: []string{"im.sent.>"}, AllowDirect: true, Storage: jetstream.FileStorage},
	} {
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			t.Fatalf("stream %s: %v", cfg.Name, err)
		}
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucketSessions, History: 8, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucketLeases, History: 1, Storage: jetstream.FileStorage, LimitMarkerTTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
}

func testKey(scene string) events.SessionKey {
	return events.SessionKey{Platform: "qq", Bot: "bot1", Scope: events.ScopeGroup, Scene: scene}
}
