package tracing

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/llm"
)

// countingExporter records the size of every export.
type countingExporter struct {
	mu      sync.Mutex
	batches []int
	names   map[string]int
	down    bool
}

func (e *countingExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.batches = append(e.batches, len(spans))
	for _, s := range spans {
		e.names[s.Name()]++
	}
	return nil
}

func (e *countingExporter) Shutdown(context.Context) error {
	e.mu.Lock()
	e.down = true
	e.mu.Unlock()
	return nil
}

func (e *countingExporter) total() (n int, batches []int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, b := range e.batches {
		n += b
	}
	return n, append([]int(nil), e.batches...)
}

func TestBatcher(t *testing.T) {
	tests := []struct {
		name        string
		batch, q    int
		delay       time.Duration
		spans       int
		exported    bool // all spans are exported before Shutdown
		wantDropped int64
	}{
		{name: "full batches go out without waiting for the delay", batch: 10, q: 1000, delay: time.Hour, spans: 30, exported: true},
		{name: "the delay sends a part batch", batch: 100, q: 1000, delay: 20 * time.Millisecond, spans: 7, exported: true},
		{name: "a full queue drops", batch: 1000, q: 5, delay: time.Hour, spans: 8, wantDropped: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exp := &countingExporter{names: map[string]int{}}
			b := newBatcher(exp, tt.batch, tt.q, tt.delay, time.Second)
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b))
			tr := tp.Tracer("t")
			for range tt.spans {
				_, s := tr.Start(context.Background(), "s")
				s.End()
			}
			if tt.exported {
				var got []int
				testwait.Eventually(t, 0, func() error {
					var n int
					n, got = exp.total()
					return testwait.Want(n == tt.spans, "exported %d of %d spans (batches %v)", n, tt.spans, got)
				})
				for _, size := range got {
					if size > tt.batch {
						t.Errorf("batches %v: larger than %d", got, tt.batch)
					}
				}
			}
			if got := b.Dropped(); got != tt.wantDropped {
				t.Errorf("dropped %d, want %d", got, tt.wantDropped)
			}
			if err := tp.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			n, _ := exp.total()
			if want := tt.spans - int(tt.wantDropped); n != want || !exp.down {
				t.Errorf("after Shutdown: %d spans exported, want %d; exporter shut down: %v", n, want, exp.down)
			}
			_, s := tr.Start(context.Background(), "late")
			s.End()
			if n2, _ := exp.total(); n2 != n {
				t.Errorf("a span ended after Shutdown was exported")
			}
		})
	}
}

// TestBatcherForceFlush: ForceFlush returns once every span ended before it is exported, and
// unsampled spans are not.
func TestBatcherForceFlush(t *testing.T) {
	exp := &countingExporter{names: map[string]int{}}
	b := newBatcher(exp, 512, 2048, time.Hour, time.Second)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tp.Tracer("t")
	unsampled := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, Remote: true}))
	for range 3 {
		_, s := tr.Start(context.Background(), "sampled")
		s.End()
		_, u := tr.Start(unsampled, "unsampled")
		u.End()
	}
	if err := tp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	exp.mu.Lock()
	defer exp.mu.Unlock()
	if exp.names["sampled"] != 3 || exp.names["unsampled"] != 0 {
		t.Fatalf("exported %v", exp.names)
	}
}

func TestBatcherOptions(t *testing.T) {
	batch, queue, delay, timeout, err := batcherOptions(env(nil))
	if err != nil || batch != DefaultBatchSize || queue != DefaultQueueSize || delay != DefaultScheduleDelay || timeout != DefaultExportTimeout {
		t.Fatalf("defaults: %d %d %v %v %v", batch, queue, delay, timeout, err)
	}
	batch, queue, delay, timeout, err = batcherOptions(env(map[string]string{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "512",
		"OTEL_BSP_MAX_QUEUE_SIZE": "256", "OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_BSP_EXPORT_TIMEOUT": "2000"}))
	if err != nil || batch != 256 || queue != 256 || delay != 100*time.Millisecond || timeout != 2*time.Second {
		t.Fatalf("set: %d %d %v %v %v", batch, queue, delay, timeout, err)
	}
	if _, _, _, _, err := batcherOptions(env(map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "5s"})); err == nil {
		t.Fatal("OTEL_BSP_SCHEDULE_DELAY=5s accepted")
	}
}

// discard is an exporter that drops every span.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkProcessorOnEnd is the cost of ending a span, from goroutines on every P, with the
// SDK's BatchSpanProcessor against batcher (both with agentbus's batch and queue sizes and a
// discarding exporter). The figure includes the processor's export goroutine's share of the
// CPU: with the SDK's, a wake-up per span. The figure includes the 2 µs of work between spans.
func BenchmarkProcessorOnEnd(b *testing.B) {
	spans := turnSpans(b, 64)
	for _, bc := range []struct {
		name string
		p    func() sdktrace.SpanProcessor
	}{
		{"sdk", func() sdktrace.SpanProcessor {
			return sdktrace.NewBatchSpanProcessor(discard{}, sdktrace.WithMaxExportBatchSize(DefaultBatchSize), sdktrace.WithMaxQueueSize(DefaultQueueSize))
		}},
		{"batcher", func() sdktrace.SpanProcessor {
			return newBatcher(discard{}, DefaultBatchSize, DefaultQueueSize, DefaultScheduleDelay, DefaultExportTimeout)
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p := bc.p()
			b.ReportAllocs()
			var sink atomic.Uint64
			b.RunParallel(func(pb *testing.PB) {
				i, x := 0, uint64(1)
				for pb.Next() {
					p.OnEnd(spans[i%len(spans)])
					i++
					// A turn's spans end apart, between other work (about 2 µs of it here), so
					// that a processor's goroutine that waits for spans parks between them.
					for j := range uint64(2000) {
						x = x*31 + j
					}
				}
				sink.Add(x)
			})
			b.StopTimer()
			_ = p.Shutdown(context.Background())
		})
	}
}

// BenchmarkTracedTurn is the whole cost of tracing one tool turn at 100 %: its 7 spans started,
// given their attributes, ended, carried across a header, batched and exported to a discarding
// OTLP/HTTP receiver, with the SDK's BatchSpanProcessor and otlptracehttp against batcher and
// otlpExporter. cpu-µs/turn is the process's CPU time (all goroutines: the export ones too)
// per turn, the figure to hold against the bench's CPU per turn.
func BenchmarkTracedTurn(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	ctx := context.Background()
	c, _ := otlpConfigFrom(env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL}))
	for _, bc := range []struct {
		name string
		p    func() sdktrace.SpanProcessor
	}{
		{"sdk", func() sdktrace.SpanProcessor {
			exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(srv.URL+"/v1/traces"))
			if err != nil {
				b.Fatal(err)
			}
			return sdktrace.NewBatchSpanProcessor(exp, sdktrace.WithMaxExportBatchSize(DefaultBatchSize), sdktrace.WithMaxQueueSize(DefaultQueueSize))
		}},
		{"agentbus", func() sdktrace.SpanProcessor {
			return newBatcher(newOTLPExporter(c), DefaultBatchSize, DefaultQueueSize, DefaultScheduleDelay, DefaultExportTimeout)
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p, err := newSDK(ctx, Settings{Enabled: true}, "turn-worker", sdktrace.WithSpanProcessor(bc.p()))
			if err != nil {
				b.Fatal(err)
			}
			model := &llm.Model{ID: "gpt-4o-mini", API: llm.APIOpenAICompletions, Provider: "openai"}
			final := &llm.Message{Model: "gpt-4o-mini", StopReason: llm.StopReasonStop, Usage: &llm.Usage{Input: 812, Output: 37}}
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				h := nats.Header{}
				wctx, web := Start(ctx, p, "POST /webhook/{bot}", "", "", trace.WithSpanKind(trace.SpanKindServer))
				InjectNATS(wctx, h)
				web.End()
				tctx, turn := StartNATS(ctx, p, "turn", h, "", trace.WithSpanKind(trace.SpanKindConsumer))
				for range 2 {
					cs := chatSpanOf(model)
					_, chat := Child(tctx, cs.name, cs.opts...)
					endChat(chat, model.ID, final, nil)
				}
				ts := toolSpanOf("bench_echo", trace.SpanKindClient)
				cctx, call := Child(tctx, ts.name, ts.opts...)
				call.SetAttributes(GenAIToolCallID.String("call_8f2a"))
				th := nats.Header{}
				InjectNATS(cctx, th)
				_, exec := StartToolNATS(ctx, p, th, "", "bench_echo", "call_8f2a")
				EndTool(exec, false)
				End(call, nil)
				InjectNATS(tctx, h)
				turn.End()
				_, send := StartNATS(ctx, p, "send webhook", h, "", trace.WithSpanKind(trace.SpanKindConsumer))
				send.End()
			}
			b.StopTimer()
			_ = p.Shutdown(ctx)
			b.ReportMetric(float64(cpuTime()-cpu0)/1e3/float64(b.N), "cpu-µs/turn")
		})
	}
}

// cpuTime is the process's user and system CPU time in ns.
func cpuTime() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
