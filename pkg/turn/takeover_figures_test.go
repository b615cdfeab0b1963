package turn

import (
	"flag"
	"fmt"
	"github.com/agentbus/agentbus/internal/testwait"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/faux"
)

var takeoverSessions = flag.Int("turn.takeover", 0, "TestTakeoverFigures: sessions with a turn in flight on the killed worker (0: skip; issue 40 measures 500)")

// TestTakeoverFigures measures a takeover of many sessions at once, and nothing else: worker A
// runs -turn.takeover sessions, each with its turn in its first model call, when it is
// killed (no lease released, nothing acked, as kill -9); worker B finds A's doorbell silent,
// takes every session over and answers each. It prints kill → reply p50/p90/p99/max (the
// reply's publish on IM_OUT, heard as core NATS). Opt-in (a measurement, not a check):
//
//	go test ./pkg/turn -run 'TestTakeoverFigures$' -v -turn.takeover=500
func TestTakeoverFigures(t *testing.T) {
	n := *takeoverSessions
	if n <= 0 {
		t.Skip("a measurement: set -turn.takeover=N")
	}
	hold := make(chan struct{}) // closed once A is dead: the model calls it left blocked end
	var blocked atomic.Int32
	h := newHarness(t, nil, faux.WithResponder(func(c *llm.Context) faux.Response {
		select {
		case <-hold:
		default:
			blocked.Add(1)
			<-hold
		}
		return faux.Response{Text: "ok " + c.Messages[len(c.Messages)-1].TextContent()}
	}))
	keep := func(o *Options) { o.IdleRelease = 10 * time.Minute }
	a := h.workerWith("wA", keep)
	keys := make([]events.SessionKey, n)
	for i := range keys {
		keys[i] = sk
		keys[i].Scene = fmt.Sprintf("takeover-%04d", i)
		h.send(keys[i], "m1", "hello")
	}
	testwait.Eventually(t, time.Minute, func() error {
		return testwait.Want(int(blocked.Load()) >= n, "%d of %d sessions blocked in their model call", blocked.Load(), n)
	})
	if got := a.own.Running(); got != n {
		t.Fatalf("A runs %d sessions, want %d", got, n)
	}
	b := h.workerWith("wB", keep)
	testwait.Eventually(t, 0, func() error { return testwait.Want(b.own.Internals().Sees("wA"), "B does not see A yet") })

	var mu sync.Mutex
	replied := map[string]time.Time{}
	sub, err := h.ns.NC.Subscribe(events.PrefixIMOut+".>", func(m *nats.Msg) {
		at := time.Now()
		mu.Lock()
		if _, ok := replied[m.Subject]; !ok {
			replied[m.Subject] = at
		}
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()

	killed := time.Now()
	go a.Kill()
	testwait.Eventually(t, 0, func() error { return testwait.Want(a.ctx.Err() != nil, "A's actor still running") })
	close(hold)
	testwait.Eventually(t, 2*time.Minute, func() error {
		mu.Lock()
		defer mu.Unlock()
		return testwait.Want(len(replied) >= n, "%d of %d sessions answered after the kill", len(replied), n)
	})
	took := make([]time.Duration, 0, n)
	mu.Lock()
	for subj, at := range replied {
		if strings.Contains(subj, "takeover-") {
			took = append(took, at.Sub(killed))
		}
	}
	mu.Unlock()
	slices.Sort(took)
	q := func(p int) time.Duration { return took[(len(took)*p+99)/100-1].Round(time.Millisecond) }
	t.Logf("takeover of %d sessions with a turn in flight: kill → reply p50 %v, p90 %v, p99 %v, max %v (B runs %d)",
		len(took), q(50), q(90), q(99), took[len(took)-1].Round(time.Millisecond), b.own.Running())
}
