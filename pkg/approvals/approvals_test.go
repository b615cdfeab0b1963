package approvals

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/execpolicy"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

// TestConcurrentUpdates races writers on one endpoint's approvals. Each lost race must be
// retried, never returned: on one server the conflict is code 10071, on a 3-node cluster with
// a replicated bucket it is 10164 (which the store once did not recognise).
func TestConcurrentUpdates(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	single := natstest.New(t)
	cluster := natstest.NewCluster(t, 3)
	_, cjs := cluster.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	spec := events.DefaultSpec()
	spec.Replicas = 3
	if err := natsutil.Provision(ctx, cjs, spec); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		js   jetstream.JetStream
	}{{"one server", single.JS}, {"cluster R3", cjs}} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(ctx, tc.js)
			if err != nil {
				t.Fatal(err)
			}
			const writers = 6
			var wg sync.WaitGroup
			errs := make(chan error, writers)
			for i := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- s.Update(ctx, "webhook", "b1", func(a *execpolicy.Approvals) (bool, error) {
						_, err := a.AddRule(fmt.Sprintf("^echo w%d$", i), "test", time.Now())
						return err == nil, err
					})
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Errorf("update: %v", err)
				}
			}
			a, _, err := s.Get(ctx, "webhook", "b1")
			if err != nil {
				t.Fatal(err)
			}
			if len(a.Rules) != writers {
				t.Fatalf("%d rules stored, want %d: %+v", len(a.Rules), writers, a.Rules)
			}
		})
	}
}
