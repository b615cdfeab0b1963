package ownership

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/store"
)

// idleSession is a Session with nothing to do: rebalancing may move it. It records where.
type idleSession struct {
	ctx    context.Context
	claim  *Claim
	shedTo atomic.Pointer[string]
}

func (s *idleSession) Run()                          {}
func (s *idleSession) Alive() bool                   { return true }
func (s *idleSession) Deliver(jetstream.Msg, uint64) {}
func (s *idleSession) Know(uint64)                   {}
func (s *idleSession) LeaseLost(error)               {}
func (s *idleSession) Kill()                         {}
func (s *idleSession) Claim() *Claim                 { return s.claim }
func (s *idleSession) Context() context.Context      { return s.ctx }
func (s *idleSession) Shed(target string) bool       { return s.shedTo.CompareAndSwap(nil, &target) }

// While a peer has just gone, the loads the watch shows are stale (its sessions are being
// claimed): rebalance moves nothing for a lease TTL, then moves as before.
func TestNoRebalanceRightAfterAPeerWent(t *testing.T) {
	o := New(Config{ID: "wA", LeaseTTL: time.Minute, Log: slog.New(slog.DiscardHandler)})
	o.ctx = t.Context()
	o.viewReady = true
	o.view = map[string]workerSeen{"wB": {epoch: 7, sessions: 0}, "wGone": {epoch: 3, sessions: 5}}
	var held []*idleSession
	for i := range 6 {
		k := events.SessionKey{Platform: "webhook", Bot: "b", Scope: "private", Scene: fmt.Sprintf("hold-%d", i)}
		s := &idleSession{ctx: t.Context(), claim: NewClaim(store.Claim{}, 0)}
		held = append(held, s)
		o.sess[k.String()] = s
	}
	moving := func() int {
		n := 0
		for _, s := range held {
			if to := s.shedTo.Load(); to != nil {
				if *to != "wB" {
					t.Errorf("a session moves to %s, want wB (the least loaded)", *to)
				}
				n++
			}
		}
		return n
	}
	// wGone's lease ends, as the watch shows it.
	o.seeWorker(store.WorkerLeaseEvent{Worker: "wGone"})
	o.rebalance()
	if n := moving(); n != 0 {
		t.Fatalf("%d sessions moved right after a peer went", n)
	}
	o.mu.Lock()
	o.shedPause = time.Time{} // a lease TTL later
	o.mu.Unlock()
	o.rebalance()
	if n := moving(); n != 3 { // 6 here, 0 on wB: fair share 3
		t.Fatalf("%d sessions moved, want 3", n)
	}
}
