package jsconflict_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/internal/jsconflict"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

// TestIsOnOneServerAndOnACluster loses every kind of compare-and-set agentbus relies on, on a
// single server (code 10071) and on a 3-node cluster with R3 streams (code 10164), and checks
// Is recognises each one and nothing else.
func TestIsOnOneServerAndOnACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	single := natstest.New(t, natstest.WithoutProvision())
	cluster := natstest.NewCluster(t, 3)
	_, clusterJS := cluster.Connect(t)
	for _, tc := range []struct {
		name     string
		js       jetstream.JetStream
		replicas int
	}{
		{"one server R1", single.JS, 1},
		{"cluster R3", clusterJS, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			kv, err := tc.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: fmt.Sprintf("cas%d", tc.replicas), Replicas: tc.replicas, History: 2})
			if err != nil {
				t.Fatal(err)
			}
			rev, err := kv.Create(ctx, "k", []byte("a"))
			if err != nil {
				t.Fatal(err)
			}
			_, createErr := kv.Create(ctx, "k", []byte("b"))
			_, updateErr := kv.Update(ctx, "k", []byte("c"), rev+10)
			deleteErr := kv.Delete(ctx, "k", jetstream.LastRevision(rev+10))
			purgeErr := kv.Purge(ctx, "k", jetstream.LastRevision(rev+10))

			stream := fmt.Sprintf("S%d", tc.replicas)
			if _, err := tc.js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{stream + ".>"}, Replicas: tc.replicas}); err != nil {
				t.Fatal(err)
			}
			subj := stream + ".x"
			if _, err := tc.js.Publish(ctx, subj, []byte("1")); err != nil {
				t.Fatal(err)
			}
			_, publishErr := tc.js.Publish(ctx, subj, []byte("2"), jetstream.WithExpectLastSequencePerSubject(0))
			_, streamSeqErr := tc.js.Publish(ctx, subj, []byte("3"), jetstream.WithExpectLastSequence(99))
			_, notFound := kv.Get(ctx, "missing")

			cases := []struct {
				what string
				err  error
				want bool
			}{
				{"kv create of an existing key", createErr, true},
				{"kv update at a stale revision", updateErr, true},
				{"kv delete at a stale revision", deleteErr, true},
				{"kv purge at a stale revision", purgeErr, true},
				{"publish with a stale subject sequence", publishErr, true},
				{"publish with a stale stream sequence", streamSeqErr, true},
				{"wrapped", fmt.Errorf("store: %w", updateErr), true},
				{"key not found", notFound, false},
				{"other error", errors.New("timeout"), false},
				{"nil", nil, false},
			}
			for _, c := range cases {
				if c.want && c.err == nil {
					t.Errorf("%s: the server accepted it", c.what)
					continue
				}
				if got := jsconflict.Is(c.err); got != c.want {
					t.Errorf("%s: Is(%v) = %v, want %v", c.what, c.err, got, c.want)
				}
			}
		})
	}
}

// Retry tries again after lost compare-and-sets only: it ends at the first success, returns
// any other error as it is, and stops when ctx ends.
func TestRetry(t *testing.T) {
	other := errors.New("bucket gone")
	conflict := fmt.Errorf("update: %w", jetstream.ErrKeyRevisionMismatch)
	cases := []struct {
		name      string
		results   []error // what each attempt returns; the last one repeats
		cancel    bool
		wantCalls int
		want      error
	}{
		{"first try", []error{nil}, false, 1, nil},
		{"after conflicts", []error{conflict, conflict, conflict, nil}, false, 4, nil},
		{"other error", []error{conflict, other}, false, 2, other},
		{"ctx ends", []error{conflict}, true, 1, context.Canceled},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			calls := 0
			err := jsconflict.Retry(ctx, func() error {
				calls++
				if c.cancel {
					cancel()
				}
				return c.results[min(calls, len(c.results))-1]
			})
			if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Fatalf("Retry = %v, want %v", err, c.want)
			}
			if calls != c.wantCalls {
				t.Fatalf("%d attempts, want %d", calls, c.wantCalls)
			}
		})
	}
}
