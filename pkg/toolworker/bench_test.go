package toolworker

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/internal/cputime"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/tools"
)

// BenchmarkToolCalls measures calls/s through one worker with a trivial tool: requests are
// published asynchronously to TOOL_CALLS (as turn workers do), the worker checks for an
// existing result, runs the tool, records the result on TOOL_RESULTS and acks; the benchmark
// counts results on a core subscription. Per call that is 1 request publish + 1 direct get +
// 1 result publish + 1 ack.
func BenchmarkToolCalls(b *testing.B) {
	for _, conc := range []int{8, 64} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) { benchCalls(b, conc, false) })
	}
	b.Run("concurrency=64/non-idempotent", func(b *testing.B) { benchCalls(b, 64, true) })
}

func benchCalls(b *testing.B, conc int, marker bool) {
	srv := newServer(b)
	var opts []tools.Option
	if !marker {
		opts = append(opts, tools.Idempotent())
	}
	noop := tools.MustRaw("noop", "does nothing", nil, func(ctx context.Context, c tools.Call) (tools.Result, error) {
		return tools.TextResult("ok"), nil
	}, opts...)
	o := fastOpts(srv, mustRegistry(b, noop), "bench")
	o.Concurrency = conc
	o.AckWait = 30 * time.Second
	h, err := Run(context.Background(), o)
	if err != nil {
		b.Fatal(err)
	}
	defer h.Stop(context.Background())

	nc, js := srv.Connect(b)
	var got atomic.Int64
	done := make(chan struct{})
	target := int64(b.N)
	sub, err := nc.Subscribe(events.PrefixToolResult+".>", func(*nats.Msg) {
		if got.Add(1) == target {
			close(done)
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()
	_ = nc.Flush()

	run := fmt.Sprintf("%d", time.Now().UnixNano())
	msgs := make([]*nats.Msg, b.N)
	for i := range msgs {
		tc := newCall("noop", run+"-"+itoa(int64(i)), nil)
		m, err := events.NewMsg(events.ToolCallSubject("noop"), events.New(tc, events.WithTurn("t1")))
		if err != nil {
			b.Fatal(err)
		}
		msgs[i] = m
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	cpu := cputime.Process()
	for _, m := range msgs {
		if _, err := js.PublishMsgAsync(m); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("publish acks timed out")
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		b.Fatalf("only %d of %d results", got.Load(), b.N)
	}
	el := time.Since(start)
	b.StopTimer()
	cputime.Report(b, cpu) // the embedded server's CPU included
	b.ReportMetric(float64(b.N)/el.Seconds(), "calls/s")
	var _ jetstream.JetStream = js
}
