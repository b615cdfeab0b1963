package turn

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/faux"
	"github.com/agentbus/agentbus/pkg/turn/ownership"
)

// Replicas that join a busy cluster take their share of the sessions already running, while
// the sessions keep talking: every message is answered once, in order, and no session runs on
// two replicas.
func TestJoiningReplicasTakeTheirShare(t *testing.T) {
	h := newHarness(t, nil, faux.WithResponder(func(c *llm.Context) faux.Response {
		return faux.Response{Text: "ok " + c.Messages[len(c.Messages)-1].TextContent()}
	}))
	const sessions = 18
	keep := func(o *Options) { o.IdleRelease = time.Hour } // only rebalancing moves a session
	workers := []*Worker{h.workerWith("wA", keep)}
	keys := make([]events.SessionKey, sessions)
	for i := range keys {
		keys[i] = sk
		keys[i].Scene = fmt.Sprintf("share-%02d", i)
	}
	balanced := func() bool {
		for _, w := range workers {
			if n := w.own.Running(); n < sessions/3-ownership.ShedSlack || n > sessions/3+ownership.ShedSlack {
				return false
			}
		}
		return true
	}
	// The sessions talk, round after round, until the moves have settled: a session moves
	// between its reply and its next message, or its next message races the move.
	want := map[string][]string{}
	for round := 0; round < 6 || !balanced(); round++ {
		if round == 200 {
			t.Fatal("the replicas did not balance their sessions")
		}
		switch round {
		case 1:
			workers = append(workers, h.workerWith("wB", keep))
		case 3:
			workers = append(workers, h.workerWith("wC", keep))
		}
		for _, k := range keys {
			text := fmt.Sprintf("r%d", round)
			h.send(k, "m"+text, text)
			want[k.Scene] = append(want[k.Scene], "ok "+text)
		}
		for _, k := range keys {
			h.replies(k, round+1)
		}
	}
	// Each replica runs a third of the sessions, give or take the slack, and each session
	// runs on one replica.
	seen := map[string]string{}
	for _, w := range workers {
		for _, k := range keys {
			key := k.String()
			if w.own.Session(key) == nil {
				continue
			}
			if other, ok := seen[key]; ok {
				t.Errorf("session %s runs on %s and %s", key, other, w.ID())
			}
			seen[key] = w.ID()
		}
	}
	time.Sleep(time.Second) // a reply sent twice would be stored by now
	for _, k := range keys {
		if got := h.outbound(k); !slices.Equal(got, want[k.Scene]) {
			t.Errorf("%s: replies %q, want %q", k.Scene, got, want[k.Scene])
		}
	}
	for _, w := range workers {
		t.Logf("%s runs %d sessions", w.ID(), w.own.Running())
	}
	t.Logf("%d rounds", len(want[keys[0].Scene]))
}
