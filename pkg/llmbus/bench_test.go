package llmbus_test

import (
	"context"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/faux"
)

// BenchmarkStream prints what the bus adds to one model call: the faux provider streaming a
// 1 KB reply in 16-byte deltas (64 deltas), called directly and through llmbus on an
// in-process nats-server (request, heartbeat, ~70 events, JSON both ways).
func BenchmarkStream(b *testing.B) {
	reply := strings.Repeat("0123456789abcdef", 64)
	p := faux.New(faux.WithResponder(func(*llm.Context) faux.Response { return faux.Response{Text: reply} }))
	run := func(b *testing.B, prov llm.Provider) {
		b.ReportAllocs()
		events := 0
		for b.Loop() {
			for ev := range llm.StreamProvider(context.Background(), prov, model(), hello(), nil) {
				events++
				if ev.Type == llm.EventError {
					b.Fatal(ev.Message.ErrorMessage)
				}
			}
		}
		b.ReportMetric(float64(events)/float64(b.N), "events/op")
	}
	b.Run("direct", func(b *testing.B) { run(b, p) })
	b.Run("bus", func(b *testing.B) {
		srv := newServer(b)
		run(b, serve(b, srv, "llm.bench", p))
	})
}
