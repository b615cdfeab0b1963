package natsutil_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
	"github.com/nats-io/nats.go/jetstream"
)

func TestProvisionTwice(t *testing.T) {
	srv := natstest.New(t) // provisions once
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := natsutil.Provision(ctx, srv.JS, srv.Spec); err != nil {
		t.Fatalf("second provision: %v", err)
	}
	checkProvisioned(t, ctx, srv.JS, srv.Spec)
}

func TestProvisionConcurrent(t *testing.T) {
	srv := natstest.New(t, natstest.WithoutProvision())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 4
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		_, js := srv.Connect(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = natsutil.Provision(ctx, js, srv.Spec)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("provisioner %d: %v", i, err)
		}
	}
	checkProvisioned(t, ctx, srv.JS, srv.Spec)
}

func checkProvisioned(t *testing.T, ctx context.Context, js jetstream.JetStream, spec events.Spec) {
	t.Helper()
	for _, c := range spec.Streams() {
		s, err := js.Stream(ctx, c.Name)
		if err != nil {
			t.Errorf("stream %s: %v", c.Name, err)
			continue
		}
		got := s.CachedInfo().Config
		if got.Retention != c.Retention || got.MaxAge != c.MaxAge || got.Storage != c.Storage ||
			got.AllowAtomicPublish != c.AllowAtomicPublish || got.AllowMsgSchedules != c.AllowMsgSchedules {
			t.Errorf("stream %s: config %+v, want %+v", c.Name, got, c)
		}
	}
	for _, c := range spec.KeyValues() {
		if _, err := js.KeyValue(ctx, c.Bucket); err != nil {
			t.Errorf("kv %s: %v", c.Bucket, err)
		}
	}
	for _, c := range spec.ObjectStores() {
		if _, err := js.ObjectStore(ctx, c.Bucket); err != nil {
			t.Errorf("object store %s: %v", c.Bucket, err)
		}
	}
}

func TestProvisionImpossibleChangeFailsClearly(t *testing.T) {
	srv := natstest.New(t) // file storage
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mem := srv.Spec
	mem.Storage = jetstream.MemoryStorage
	start := time.Now()
	err := natsutil.Provision(ctx, srv.JS, mem)
	if !errors.Is(err, natsutil.ErrProvision) || !strings.Contains(err.Error(), "stream IM_IN") ||
		!strings.Contains(err.Error(), "storage") {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("a permanent error was retried for %s", time.Since(start))
	}

	t.Logf("storage change: %v", err)
	three := srv.Spec
	three.Replicas = 3
	err = natsutil.Provision(ctx, srv.JS, three)
	t.Logf("replicas change: %v", err)
	if !errors.Is(err, natsutil.ErrProvision) {
		t.Fatalf("3 replicas on one server: %v", err)
	}
}

func TestProvisionUpdatesAges(t *testing.T) {
	srv := natstest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := srv.Spec
	s.IMInMaxAge = time.Hour
	if err := natsutil.Provision(ctx, srv.JS, s); err != nil {
		t.Fatal(err)
	}
	st, err := srv.JS.Stream(ctx, events.StreamIMIn)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config.MaxAge; got != time.Hour {
		t.Errorf("IM_IN max age %s after update, want 1h", got)
	}
}
