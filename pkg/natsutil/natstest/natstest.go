// Package natstest gives tests a real, provisioned JetStream server: natstest.New(t) starts
// an embedded nats-server in t.TempDir(), provisions every stream and bucket of pkg/events,
// connects in-process and registers cleanup with t.Cleanup. Use it from any package's tests.
package natstest

import (
	"context"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Server is a running test server with a connected client.
type Server struct {
	Embedded *natsutil.Embedded
	NC       *nats.Conn
	JS       jetstream.JetStream
	Spec     events.Spec
	// URL is nats://127.0.0.1:port when started WithListen, else "".
	URL string
	// StoreDir is the JetStream directory (inside t.TempDir()).
	StoreDir string
}

type options struct {
	listen    bool
	memory    bool
	provision bool
	storeDir  string
}

// Option adjusts New.
type Option func(*options)

// WithListen also listens on a random loopback TCP port (Server.URL), for tests of code that
// dials a URL.
func WithListen() Option { return func(o *options) { o.listen = true } }

// WithMemoryStorage provisions with memory storage (faster, nothing on disk).
func WithMemoryStorage() Option { return func(o *options) { o.memory = true } }

// WithoutProvision starts an empty server (for tests of provisioning itself).
func WithoutProvision() Option { return func(o *options) { o.provision = false } }

// WithStoreDir uses dir instead of a fresh t.TempDir() (to restart a server on the same data).
func WithStoreDir(dir string) Option { return func(o *options) { o.storeDir = dir } }

// New starts a provisioned embedded JetStream server for t. It fails the test on error and
// stops everything in t.Cleanup.
func New(t testing.TB, opts ...Option) *Server {
	t.Helper()
	o := options{provision: true}
	for _, f := range opts {
		f(&o)
	}
	if o.storeDir == "" {
		o.storeDir = t.TempDir()
	}
	eo := natsutil.EmbeddedOptions{StoreDir: o.storeDir}
	if o.listen {
		eo.Listen = "127.0.0.1:0"
	}
	emb, err := natsutil.StartEmbedded(eo)
	if err != nil {
		t.Fatalf("natstest: start server: %v", err)
	}
	nc, err := emb.Connect()
	if err != nil {
		emb.Close()
		t.Fatalf("natstest: connect: %v", err)
	}
	t.Cleanup(func() {
		nc.Close()
		emb.Close()
	})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	spec := events.DefaultSpec()
	if o.memory {
		spec.Storage = jetstream.MemoryStorage
	}
	if o.provision {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := natsutil.Provision(ctx, js, spec); err != nil {
			t.Fatalf("natstest: provision: %v", err)
		}
	}
	return &Server{Embedded: emb, NC: nc, JS: js, Spec: spec, URL: emb.ClientURL(), StoreDir: o.storeDir}
}

// Connect opens another in-process client (closed in t.Cleanup).
func (s *Server) Connect(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := s.Embedded.Connect()
	if err != nil {
		t.Fatalf("natstest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	return nc, js
}
