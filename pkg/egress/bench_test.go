package egress

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/cputime"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

// BenchmarkDeliver measures deliveries per second through egress: IM_OUT -> KV check ->
// signed POST to an httptest callback -> receipt on IM_SENT (the delivery record) -> ack. cpu-ns/op is
// the whole process (embedded server and callback included) per delivery.
func BenchmarkDeliver(b *testing.B) {
	for _, bc := range []struct {
		conc  int
		fresh bool // as a turn's first publication of its reply marks its parts
	}{{16, false}, {64, false}, {64, true}} {
		conc := bc.conc
		name := fmt.Sprintf("concurrency=%d", conc)
		if bc.fresh {
			name += "/fresh"
		}
		b.Run(name, func(b *testing.B) {
			srv := natstest.New(b, natstest.WithMemoryStorage())
			cb := newCallback(b, nil)
			o := fastOptions(srv, testConfig(cb), b)
			o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
			o.Concurrency = conc
			o.AckWait = 30 * time.Second
			// Publish every part first, then start egress: the figure is egress alone.
			for i := 0; i < b.N; i++ {
				out := outbound(fmt.Sprintf("bench%d-%d", conc, i))
				out.Scene.ID = fmt.Sprintf("g%d", i%50)
				out.Fresh = bc.fresh
				publish(b, srv.JS, out, "")
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu := cputime.Process()
			t0 := time.Now()
			h := start(b, o)
			deadline := time.Now().Add(time.Minute)
			for h.Stats().Delivered < uint64(b.N) {
				if time.Now().After(deadline) {
					b.Fatalf("delivered %d of %d", h.Stats().Delivered, b.N)
				}
				time.Sleep(time.Millisecond) // a fine step: the timer measures up to the last delivery
			}
			el := time.Since(t0)
			b.StopTimer()
			cputime.Report(b, cpu)
			b.ReportMetric(float64(b.N)/el.Seconds(), "deliveries/s")
			if n := cb.count(); n != b.N {
				b.Fatalf("callback got %d posts for %d parts", n, b.N)
			}
		})
	}
}
