package tracing

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// batcher is a batching span processor: ended spans are appended to a buffer under a mutex,
// and one goroutine exports the buffer when it holds a batch or when the schedule delay has
// passed since the last export.
//
// Why not the SDK's BatchSpanProcessor: it hands every ended span to its export goroutine
// through a channel, and that goroutine, parked on the channel, is woken for each span (a
// goroutine switch, often a futex wake of an idle thread, on the turn's hot path: 7 spans per
// tool turn). Here an ended span takes a lock and an append; the export goroutine is woken once
// per batch (BenchmarkProcessorOnEnd compares the two).
//
// The OTEL_BSP_* variables keep their meaning: MAX_QUEUE_SIZE spans wait at most (later ones
// are dropped and counted), MAX_EXPORT_BATCH_SIZE go in one export, SCHEDULE_DELAY (ms) bounds
// how long a span waits, EXPORT_TIMEOUT (ms) bounds an export.
type batcher struct {
	exp       sdktrace.SpanExporter
	batchSize int
	queueSize int
	delay     time.Duration
	timeout   time.Duration

	mu      sync.Mutex
	queue   []sdktrace.ReadOnlySpan
	stopped bool
	dropped atomic.Int64

	kick    chan struct{}      // a batch is full (capacity 1)
	flushes chan chan struct{} // ForceFlush asks, the loop closes the answer when exported
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// Defaults of the OTEL_BSP_* variables: the SDK's schedule delay and timeout, larger batches
// and queue (a traced tool turn ends 7 spans, so at 1,000 turns/s the SDK's 512 would mean an
// export every 70 ms and its queue of 2,048 0.3 s of spans).
const (
	DefaultBatchSize     = 2048
	DefaultQueueSize     = 16384
	DefaultScheduleDelay = 5 * time.Second
	DefaultExportTimeout = 30 * time.Second
)

// batcherOptions reads the OTEL_BSP_* variables.
func batcherOptions(getenv func(string) string) (batch, queue int, delay, timeout time.Duration, err error) {
	num := func(name string, def int) (int, error) {
		v := strings.TrimSpace(getenv(name))
		if v == "" {
			return def, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("%w: %s=%q is not a positive number", ErrConfig, name, v)
		}
		return n, nil
	}
	if batch, err = num("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", DefaultBatchSize); err != nil {
		return
	}
	if queue, err = num("OTEL_BSP_MAX_QUEUE_SIZE", max(DefaultQueueSize, batch)); err != nil {
		return
	}
	batch = min(batch, queue) // as the SDK does
	var ms int
	if ms, err = num("OTEL_BSP_SCHEDULE_DELAY", int(DefaultScheduleDelay/time.Millisecond)); err != nil {
		return
	}
	delay = time.Duration(ms) * time.Millisecond
	if ms, err = num("OTEL_BSP_EXPORT_TIMEOUT", int(DefaultExportTimeout/time.Millisecond)); err != nil {
		return
	}
	timeout = time.Duration(ms) * time.Millisecond
	return
}

func newBatcher(exp sdktrace.SpanExporter, batch, queue int, delay, timeout time.Duration) *batcher {
	b := &batcher{exp: exp, batchSize: batch, queueSize: queue, delay: delay, timeout: timeout,
		queue: make([]sdktrace.ReadOnlySpan, 0, batch),
		kick:  make(chan struct{}, 1), flushes: make(chan chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go b.loop()
	return b
}

// OnStart does nothing: spans are only seen when they end.
func (*batcher) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd queues a sampled span; a full queue drops it.
func (b *batcher) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	b.mu.Lock()
	if b.stopped || len(b.queue) >= b.queueSize {
		b.mu.Unlock()
		if !b.stopped {
			b.dropped.Add(1)
		}
		return
	}
	b.queue = append(b.queue, s)
	// At or past a batch, not only at it: a kick sent late (after the loop took the queue
	// for an earlier kick) can make the loop take a part batch, and the queue would then
	// pass the batch size without ever being equal to it.
	full := len(b.queue) >= b.batchSize
	b.mu.Unlock()
	if full {
		select {
		case b.kick <- struct{}{}:
		default: // already kicked
		}
	}
}

// Dropped is the number of spans dropped because the queue was full.
func (b *batcher) Dropped() int64 { return b.dropped.Load() }

func (b *batcher) loop() {
	defer close(b.done)
	t := time.NewTimer(b.delay)
	defer t.Stop()
	spare := make([]sdktrace.ReadOnlySpan, 0, b.batchSize) // the other buffer: it and the queue swap on each export
	for {
		var flushed chan struct{}
		select {
		case <-b.stop:
			b.export(&spare, true)
			return
		case <-b.kick:
			b.export(&spare, false) // full batches only; the delay still runs for the rest
			continue
		case <-t.C:
		case flushed = <-b.flushes:
		}
		b.export(&spare, true)
		if flushed != nil {
			close(flushed)
		}
		t.Reset(b.delay)
	}
}

// export exports what is queued, a batch at a time, and keeps the emptied buffer as the next
// spare (no allocation per export). Unless whole, it takes only full batches and leaves the
// rest queued for the next kick or the delay: a kick can arrive late, after the loop took the
// queue for an earlier one, and a part batch taken then would leave the queue short of a
// batch until the delay (5 s by default) although the spans that follow fill one.
func (b *batcher) export(spare *[]sdktrace.ReadOnlySpan, whole bool) {
	b.mu.Lock()
	all := b.queue
	n := len(all)
	if !whole {
		n -= n % b.batchSize
	}
	if n == 0 {
		b.mu.Unlock()
		return
	}
	b.queue = append((*spare)[:0], all[n:]...)
	b.mu.Unlock()
	for out := all[:n]; len(out) > 0; {
		k := min(len(out), b.batchSize)
		ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
		if err := b.exp.ExportSpans(ctx, out[:k]); err != nil {
			otel.Handle(err)
		}
		cancel()
		out = out[k:]
	}
	clear(all) // the spans are garbage now
	*spare = all[:0]
	// A queue that filled up while this export ran is exported at once.
	if b.queueLen() >= b.batchSize {
		select {
		case b.kick <- struct{}{}:
		default:
		}
	}
}

func (b *batcher) queueLen() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// ForceFlush exports every span ended before the call, within ctx.
func (b *batcher) ForceFlush(ctx context.Context) error {
	answer := make(chan struct{})
	select {
	case b.flushes <- answer:
	case <-b.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-answer:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown exports what is queued and shuts the exporter down, within ctx. Spans ending
// later are dropped.
func (b *batcher) Shutdown(ctx context.Context) error {
	var err error
	b.once.Do(func() {
		b.mu.Lock()
		b.stopped = true
		b.mu.Unlock()
		close(b.stop)
		select {
		case <-b.done:
		case <-ctx.Done():
			err = ctx.Err()
			return
		}
		err = b.exp.Shutdown(ctx)
	})
	return err
}
