package turn

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/llm/providers/faux"
)

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// ai.agent.phaseTrace logs the seed's stable phase sequence of a turn, each line prefixed
// [AGENT_PHASE]; without it a turn logs none.
func TestPhaseTrace(t *testing.T) {
	for _, on := range []bool{true, false} {
		h := newHarness(t, func(o *Options) { o.PhaseTrace = on }, faux.WithResponder(faux.Echo))
		var buf syncBuffer
		o := h.options("w1")
		o.LeaseTTL, o.AckWait, o.IdleRelease = 2*time.Second, 2*time.Second, 5*time.Second
		o.Log = slog.New(slog.NewTextHandler(&buf, nil))
		w, err := New(context.Background(), h.ns.NC, h.ns.JS, o)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Stop(context.Background()) })
		h.send(sk, "m1", "hello there")
		h.replies(sk, 1)
		want := []string{"turn.start", "tools.collected", "path.agent_loop", "agent_loop.turn.start", "agent_loop.turn.end", "turn.end"}
		var got []string
		testwait.Eventually(t, 0, func() error {
			got = got[:0]
			for _, line := range strings.Split(buf.String(), "\n") {
				if i := strings.Index(line, PhasePrefix+" "); i >= 0 {
					got = append(got, strings.Trim(strings.Fields(line[i+len(PhasePrefix)+1:])[0], `"`))
				}
			}
			return testwait.Want(!on || len(got) >= len(want), "phase lines %v, want %v", got, want)
		})
		if !on {
			if len(got) != 0 {
				t.Errorf("phaseTrace off: %d phase lines: %v", len(got), got)
			}
			continue
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("phases %v, want %v", got, want)
		}
		if !strings.Contains(buf.String(), "turn="+turnID(1)) {
			t.Errorf("phase lines do not name the turn:\n%s", buf.String())
		}
	}
}
