package turn

import (
	"bytes"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/faux"
	"github.com/agentbus/agentbus/pkg/turn/ownership"
)

// A doorbell answer says whether the rung replica ran the session: empty from the owner, a
// "not the owner" answer from a replica without an actor for it (which claims the session
// then). A ringer that hears the latter forgets who it thought owned the session, so a hint
// is trusted only while the owner confirms it, without expiring every LeaseTTL/2.
func TestDoorbellAnswerSaysNotOwner(t *testing.T) {
	h := newHarness(t, nil, faux.WithResponder(func(c *llm.Context) faux.Response {
		return faux.Response{Text: "ok"}
	}))
	a := h.worker("wA")
	owned := sk
	owned.Scene = "bell-owned"
	h.send(owned, "m0", "warm up")
	h.replies(owned, 1)
	b := h.worker("wB")
	other := sk
	other.Scene = "bell-other"
	hinted := sk
	hinted.Scene = "bell-hinted"

	ring := func(k events.SessionKey) []byte {
		t.Helper()
		resp, err := h.ns.NC.Request(events.AgentWakeSubject("wA"), events.WakeBody(k, 0), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Data
	}
	cases := []struct {
		name string
		k    events.SessionKey
		want []byte
	}{
		{"session the replica runs", owned, nil},
		{"session it does not run", other, ownership.WakeNotOwner},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ring(c.k); !bytes.Equal(got, c.want) {
				t.Fatalf("answer %q, want %q", got, c.want)
			}
		})
	}
	// The replica that said "not the owner" claims the session it was rung for.
	testwait.Eventually(t, 0, func() error {
		return testwait.Want(a.own.Session(other.String()) != nil, "A has not adopted the other session")
	})

	// B believes A owns a session A does not run; its ring is answered "not the owner" and
	// B forgets the hint.
	epoch := a.own.WorkerLease().Token
	b.own.Internals().Hint(hinted, "wA", epoch)
	b.own.Internals().Ring("wA", epoch, 0, false, hinted)
	testwait.Eventually(t, 0, func() error { // rings go out from the bell's own goroutine
		return testwait.Want(!b.own.Internals().Hinted(hinted), "B still holds the hint (no ring went out)")
	})
}

// A ring may hand over several deliveries at once (those queued while the ringer's bell was
// busy). The owner holds the ones of sessions it runs and claims the others; asked by a request
// it answers with exactly those, rung by a replica's bell it sends them back in a notice.
func TestBatchedRingNamesSessionsNotOwned(t *testing.T) {
	h := newHarness(t, nil, faux.WithResponder(func(c *llm.Context) faux.Response {
		return faux.Response{Text: "ok"}
	}))
	a := h.worker("wA")
	owned := sk
	owned.Scene = "batch-owned"
	h.send(owned, "m0", "warm up")
	h.replies(owned, 1)
	free1, free2 := sk, sk
	free1.Scene, free2.Scene = "batch-free-1", "batch-free-2"

	var body []byte
	for _, k := range []events.SessionKey{owned, free1, owned, free2} {
		body = events.AppendWake(body, events.WakeEntry{Session: k, Seq: 1})
	}
	resp, err := h.ns.NC.Request(events.AgentWakeSubject("wA"), body, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := free1.Token() + "\n" + free2.Token()
	if string(resp.Data) != want {
		t.Fatalf("answer %q, want %q", resp.Data, want)
	}
	testwait.Eventually(t, 0, func() error {
		return testwait.Want(a.own.Session(free1.String()) != nil && a.own.Session(free2.String()) != nil, "A has not adopted both free sessions")
	})

	// The ringer's side: a ring goes out without waiting for an answer, and the rung replica
	// sends a notice back only for the sessions it did not run, so the ringer forgets only
	// their hints. (wA runs free1 and free2 by now; "gone" it has never seen.)
	b := h.worker("wB")
	epoch := a.own.WorkerLease().Token
	gone := sk
	gone.Scene = "batch-gone"
	in := b.own.Internals()
	for _, k := range []events.SessionKey{owned, gone} {
		in.Hint(k, "wA", epoch)
	}
	in.Ring("wA", epoch, 1, true, owned, gone)
	testwait.Eventually(t, 0, func() error { return testwait.Want(!in.Hinted(gone), "the gone session is still hinted") })
	if !in.Hinted(owned) {
		t.Fatal("the ringer forgot the hint of the session the rung replica runs")
	}
}
