package presence_test

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/buildinfo"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
	"github.com/agentbus/agentbus/pkg/presence"
	"github.com/agentbus/agentbus/pkg/store"
)

func TestAnnounceListStop(t *testing.T) {
	srv := natstest.New(t)
	_, js := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A turn worker's liveness lease says how many sessions it runs; List joins it in.
	leases, err := store.NewLeases(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	wl, err := leases.AcquireWorker(ctx, "tw-1", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wl.Sessions = 3
	if _, err := leases.Renew(ctx, wl); err != nil {
		t.Fatal(err)
	}

	var state atomic.Value
	state.Store(presence.StateConnecting)
	tw, err := presence.Announce(ctx, js, presence.NewRecord(events.RoleTurnWorker, "tw-1"), presence.Options{Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	in, err := presence.Announce(ctx, js, presence.NewRecord(events.RoleIngest, "ingest-1"), presence.Options{
		Interval: 100 * time.Millisecond,
		Adapters: func() []presence.Adapter {
			return []presence.Adapter{{Platform: "telegram", Bot: "b1", Part: "inbound", State: state.Load().(string)}}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := presence.List(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("List: %+v", recs)
	}
	host, _ := os.Hostname()
	r := recs[1] // sorted by role: ingest, turn-worker
	if r.Role != events.RoleTurnWorker || r.ID != "tw-1" || r.Host != host || r.PID != os.Getpid() ||
		r.Version != buildinfo.Get().Version || r.Sessions != 3 || r.Started.IsZero() || r.Uptime() < 0 {
		t.Fatalf("turn worker record: %+v", r)
	}
	if a := recs[0].Adapters; len(a) != 1 || a[0].State != presence.StateConnecting || a[0].Healthy() {
		t.Fatalf("ingest adapters: %+v", a)
	}

	// A change of state reaches the bus at the next refresh (Refresh asks for it now).
	state.Store(presence.StateConnected)
	in.Refresh()
	testwait.Eventually(t, 0, func() error {
		recs, err = presence.List(ctx, js)
		if err != nil {
			t.Fatal(err)
		}
		return testwait.Want(len(recs) > 0 && len(recs[0].Adapters) == 1 && recs[0].Adapters[0].Healthy(), "adapter state not connected: %+v", recs)
	})

	// Stop removes the entry at once.
	if err := tw.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := in.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if recs, err = presence.List(ctx, js); err != nil || len(recs) != 0 {
		t.Fatalf("after Stop: %+v, %v", recs, err)
	}
}
