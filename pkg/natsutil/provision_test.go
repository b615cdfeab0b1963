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

// flakyLookups answers the first fail lookups with the error an unanswered request gives, then
// passes them to the real server; calls counts every lookup.
type flakyLookups struct {
	jetstream.JetStream
	fail, calls int
}

func (f *flakyLookups) next() error {
	f.calls++
	if f.calls <= f.fail {
		return context.DeadlineExceeded
	}
	return nil
}

func (f *flakyLookups) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	if err := f.next(); err != nil {
		return nil, err
	}
	return f.JetStream.Stream(ctx, name)
}

func (f *flakyLookups) KeyValue(ctx context.Context, name string) (jetstream.KeyValue, error) {
	if err := f.next(); err != nil {
		return nil, err
	}
	return f.JetStream.KeyValue(ctx, name)
}

func (f *flakyLookups) CreateOrUpdateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	if err := f.next(); err != nil {
		return nil, err
	}
	return f.JetStream.CreateOrUpdateConsumer(ctx, stream, cfg)
}

func TestLookupsRetryUnansweredAndFailOnMissing(t *testing.T) {
	srv := natstest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tests := []struct {
		name      string
		fail      int
		lookup    func(context.Context, *flakyLookups) error
		want      error // nil: found
		wantCalls int
	}{
		{"stream after two unanswered", 2, func(ctx context.Context, js *flakyLookups) error {
			_, err := natsutil.Stream(ctx, js, events.StreamSessionIn)
			return err
		}, nil, 3},
		{"bucket after two unanswered", 2, func(ctx context.Context, js *flakyLookups) error {
			_, err := natsutil.KeyValue(ctx, js, events.BucketSessions)
			return err
		}, nil, 3},
		{"missing stream fails at once", 0, func(ctx context.Context, js *flakyLookups) error {
			_, err := natsutil.Stream(ctx, js, "NOT_PROVISIONED")
			return err
		}, jetstream.ErrStreamNotFound, 1},
		{"missing bucket fails at once", 0, func(ctx context.Context, js *flakyLookups) error {
			_, err := natsutil.KeyValue(ctx, js, "not-provisioned")
			return err
		}, jetstream.ErrBucketNotFound, 1},
		{"consumer after two unanswered", 2, func(ctx context.Context, js *flakyLookups) error {
			_, err := natsutil.Consumer(ctx, js, events.StreamSessionIn, jetstream.ConsumerConfig{Durable: "lookup-test"})
			return err
		}, nil, 3},
		{"consumer on a missing stream fails at once", 0, func(ctx context.Context, js *flakyLookups) error {
			_, err := natsutil.Consumer(ctx, js, "NOT_PROVISIONED", jetstream.ConsumerConfig{Durable: "lookup-test"})
			return err
		}, jetstream.ErrStreamNotFound, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			js := &flakyLookups{JetStream: srv.JS, fail: tt.fail}
			err := tt.lookup(ctx, js)
			switch {
			case tt.want == nil && err != nil:
				t.Fatalf("lookup: %v", err)
			case tt.want != nil && !errors.Is(err, tt.want):
				t.Fatalf("lookup error = %v, want %v", err, tt.want)
			}
			if js.calls != tt.wantCalls {
				t.Fatalf("%d lookups, want %d", js.calls, tt.wantCalls)
			}
		})
	}
}

// Streams and buckets made by a version before the stream flags (deletes and purges allowed,
// KV roll-ups on, approvals with delete markers) get them from the next Provision, with their
// messages; a stream that denies what agentbus needs is reported by name, since the server
// cannot allow it again.
func TestProvisionHardensOldStreams(t *testing.T) {
	srv := natstest.New(t, natstest.WithoutProvision())
	_, js := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := events.DefaultSpec()
	for _, c := range spec.Streams() {
		c.DenyDelete, c.DenyPurge = false, false
		if _, err := js.CreateStream(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range spec.KeyValues() {
		if c.Bucket == events.BucketApprovals {
			c.LimitMarkerTTL = time.Minute // as the old spec had it
		}
		if _, err := js.CreateKeyValue(ctx, c); err != nil { // nats.go's defaults: roll-ups on, purges allowed
			t.Fatal(err)
		}
	}
	kv, err := js.KeyValue(ctx, events.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "webhook_b1", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := natsutil.Provision(ctx, js, spec); err != nil {
		t.Fatal(err)
	}
	check := func(name string, rollup, denyPurge, denyDelete bool) {
		t.Helper()
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		c := st.CachedInfo().Config
		if c.AllowRollup != rollup || c.DenyPurge != denyPurge || c.DenyDelete != denyDelete {
			t.Errorf("%s: roll-ups %v, purges denied %v, deletes denied %v; want %v %v %v", name,
				c.AllowRollup, c.DenyPurge, c.DenyDelete, rollup, denyPurge, denyDelete)
		}
	}
	check(events.StreamIMIn, false, true, true)
	check(events.StreamSessionIn, true, false, true)
	check(events.StreamAgentCtx, false, false, true)
	check(events.StreamToolCalls, false, true, false)
	check("KV_"+events.BucketApprovals, false, true, true)
	check("KV_"+events.BucketTasks, false, true, true)
	check("KV_"+events.BucketLeases, true, false, true)
	if e, err := kv.Get(ctx, "webhook_b1"); err != nil || string(e.Value()) != "{}" {
		t.Errorf("approval after provisioning: %v, %v", e, err)
	}
	// Provisioning again changes nothing and succeeds.
	if err := natsutil.Provision(ctx, js, spec); err != nil {
		t.Fatal(err)
	}
	// AGENT_CTX purges denied by someone: /reset could not work, and the server cannot undo it.
	st, err := js.Stream(ctx, events.StreamAgentCtx)
	if err != nil {
		t.Fatal(err)
	}
	c := st.CachedInfo().Config
	c.DenyPurge = true
	if _, err := js.UpdateStream(ctx, c); err != nil {
		t.Fatal(err)
	}
	err = natsutil.Provision(ctx, js, spec)
	if !errors.Is(err, natsutil.ErrProvision) || !strings.Contains(err.Error(), events.StreamAgentCtx) || !strings.Contains(err.Error(), "recreate") {
		t.Errorf("provisioning over a stream that denies what agentbus needs: %v", err)
	}
}
