package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/metrics"
	"github.com/agentbus/agentbus/pkg/tracing"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// delivery is what the middleware knows about the message being handled. One goroutine at a
// time uses it: the one running the message's middleware chain, or the worker that runs the
// handler while the chain waits for it.
type delivery struct {
	msg        jetstream.Msg // nil only for messages that did not come from JetStream
	header     nats.Header
	subject    string
	stream     string
	seq        uint64
	deliveries uint64
	attempts   int    // handler runs for this delivery (the retry middleware re-runs it)
	platform   string // the part's platform, once decoded
	corr       events.Correlation
	base       *slog.Logger // the egress logger; log adds this delivery's attributes
	log        *slog.Logger // built on first use: most deliveries log nothing
}

// logger returns the egress logger with the delivery's sequence, correlation ids and
// delivery count. It is built on first use, since a handler's With formats its attributes
// up front and a delivery that succeeds logs nothing at the default level.
func (d *delivery) logger() *slog.Logger {
	if d.log != nil {
		return d.log
	}
	attrs := make([]any, 0, 10)
	attrs = append(attrs, "seq", d.seq, "platform", d.platformOf())
	if d.corr.Trace != "" {
		attrs = append(attrs, "trace", d.corr.Trace)
	}
	if d.corr.Turn != "" {
		attrs = append(attrs, "turn", d.corr.Turn)
	}
	if d.corr.Session != "" {
		attrs = append(attrs, "session", d.corr.Session)
	}
	if d.deliveries > 1 {
		attrs = append(attrs, "delivery", d.deliveries)
	}
	d.log = d.base.With(attrs...)
	return d.log
}

// platformOf is the part's platform: decoded, or else the subject's (im.out.<platform>...).
func (d *delivery) platformOf() string {
	if d.platform != "" {
		return d.platform
	}
	if rest, ok := strings.CutPrefix(d.subject, events.PrefixIMOut+"."); ok {
		// A label value: only a plain platform name (a forged subject must not grow the series).
		if p, _, _ := strings.Cut(rest, "."); len(p) > 0 && len(p) <= 32 && strings.Trim(p, "abcdefghijklmnopqrstuvwxyz0123456789_-") == "" {
			return p
		}
	}
	return "unknown"
}

type ctxKey int

const deliveryKey ctxKey = 0

func deliveryFrom(ctx context.Context) *delivery {
	if d, ok := ctx.Value(deliveryKey).(*delivery); ok {
		return d
	}
	return &delivery{base: slog.Default(), log: slog.Default()}
}

func loggerFrom(ctx context.Context) *slog.Logger { return deliveryFrom(ctx).logger() }

// correlation is the outermost middleware: it gathers the delivery's metadata, reads the
// correlation ids (Agentbus-Trace/Turn/Session, or W3C traceparent) into the logger and onto
// the watermill correlation id, and bounds the whole delivery by HandlerTimeout.
func (e *egress) correlation(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		d := &delivery{msg: jsMsgFrom(msg.Context()), subject: msg.Metadata.Get(MetaSubject), stream: msg.Metadata.Get(MetaStream)}
		d.seq, _ = strconv.ParseUint(msg.Metadata.Get(MetaStreamSeq), 10, 64)
		d.deliveries, _ = strconv.ParseUint(msg.Metadata.Get(MetaDelivered), 10, 64)
		if d.msg != nil {
			d.header = d.msg.Headers()
		}
		if d.header == nil {
			d.header = nats.Header{}
			for k, v := range msg.Metadata {
				d.header.Set(k, v)
			}
		}
		d.corr = events.CorrelationFromHeader(d.header)
		if d.corr.Trace != "" {
			middleware.SetCorrelationID(d.corr.Trace, msg)
		}
		d.base = e.log
		ctx, cancel := context.WithTimeout(context.WithValue(msg.Context(), deliveryKey, d), e.o.HandlerTimeout)
		defer cancel()
		// With tracing on, the delivery is a "send <platform>" span continuing the turn's; the
		// callback POST, the receipt and a dead letter are its children.
		ctx, span := e.sendSpan(ctx, d)
		msg.SetContext(ctx)
		out, err := h(msg)
		tracing.End(span, err)
		return out, err
	}
}

// sendSpan starts a delivery's span (a no-op one with tracing off, reading nothing).
func (e *egress) sendSpan(ctx context.Context, d *delivery) (context.Context, trace.Span) {
	if !tracing.Enabled(e.o.Tracer) {
		return ctx, noop.Span{}
	}
	platform := "im.out"
	if p := strings.SplitN(d.subject, ".", 4); len(p) > 2 {
		platform = p[2]
	}
	return tracing.StartNATS(ctx, e.o.Tracer, "send "+platform, d.header, d.corr.Trace, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("agentbus.platform", platform)))
}

// inProgress tells JetStream the part is still being worked on while it is handled, so a slow
// platform or a long throttle does not make the server hand the part to another replica
// while this one is still sending it. The deliveries in hand are registered with e.progress,
// whose one goroutine sends the in-progress acks: no goroutine or timer per part.
func (e *egress) inProgress(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		d := deliveryFrom(msg.Context())
		if d.msg == nil {
			return h(msg)
		}
		e.progress.Add(d.msg)
		defer e.progress.Remove(d.msg)
		return h(msg)
	}
}

// deadLetter decides what a failed delivery becomes. Permanent failures (bad event, platform
// rejection, unknown bot, no sender, panic) and parts that failed transiently on their
// MaxDeliveries-th delivery are published to dlq.egress.<reason> as an events.DeadLetter and
// then acked; other failures are NAKed with a growing delay. If the dead letter cannot be
// published, the part is NAKed too: nothing is dropped silently.
func (e *egress) deadLetter(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		out, err := h(msg)
		if err == nil {
			return out, nil
		}
		ctx := msg.Context()
		d := deliveryFrom(ctx)
		reason, perm := classify(err)
		if !perm {
			if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
				return nil, err // stopping: leave it to redelivery
			}
			if d.deliveries < uint64(e.o.MaxDeliveries) {
				d.logger().Warn("egress: delivery failed, will retry", "deliveries", d.deliveries, "err", err)
				return nil, err
			}
			reason = ReasonMaxDeliveries
			err = fmt.Errorf("gave up after %d deliveries: %w", d.deliveries, err)
		}
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if dlErr := e.publishDeadLetter(pctx, d, msg.Payload, reason, err); dlErr != nil {
			d.logger().Error("egress: cannot dead-letter, will retry", "reason", reason, "err", err, "dlqErr", dlErr)
			return nil, errors.Join(err, dlErr)
		}
		e.deadLettered.Add(1)
		e.o.Metrics.Send(d.platformOf(), metrics.SendFailed)
		e.o.DeadLetters.Add(events.RoleEgress, reason)
		d.logger().Warn("egress: dead-lettered", "reason", reason, "err", err)
		return nil, nil
	}
}

// maxErrorText bounds DeadLetter.Error (a panic's stack trace can be long).
const maxErrorText = 8 << 10

func (e *egress) publishDeadLetter(ctx context.Context, d *delivery, body []byte, reason string, cause error) error {
	text := cause.Error()
	if len(text) > maxErrorText {
		text = text[:maxErrorText] + "…"
	}
	dl := events.DeadLetter{
		Role:       events.RoleEgress,
		Reason:     reason,
		Error:      text,
		Subject:    d.subject,
		Stream:     d.stream,
		Seq:        d.seq,
		Deliveries: d.deliveries,
		Headers:    map[string][]string(d.header),
	}
	if dl.Subject == "" {
		dl.Subject = events.PrefixIMOut
	}
	dl.SetBody(body)
	opts := []events.Option{}
	if _, err := events.ParseSessionID(d.corr.Session); err == nil {
		opts = append(opts, events.WithSession(d.corr.Session))
	}
	opts = append(opts, events.WithTurn(d.corr.Turn), events.WithTrace(d.corr.Trace))
	if d.stream != "" && d.seq > 0 {
		// Stable id: a retried dead-letter publish of the same delivery is dropped as a duplicate.
		opts = append(opts, events.WithID("egress-"+d.stream+"-"+strconv.FormatUint(d.seq, 10)))
	}
	m, err := events.NewMsg(events.DeadLetterSubject(events.RoleEgress, reason), events.New(dl, opts...))
	if err != nil {
		return err
	}
	tracing.Fail(ctx, "dead-lettered: "+reason)
	tracing.InjectNATS(ctx, m.Header)
	_, err = e.js.PublishMsg(ctx, m)
	return err
}

// workers run deliveries on long-lived goroutines. The router hands each message to a new
// goroutine, and a delivery goes through net/http, JSON and three NATS requests, so that
// goroutine's stack would grow (and be copied) several times for every part. A worker's stack
// has grown once. The handler waits for its delivery, so middleware, acks and retries see no
// difference; a panic in a delivery comes back as the middleware.RecoveredPanicError that the
// Recoverer would have made of it (a dead letter, reason poison).
type workers struct {
	jobs chan *job
	quit chan struct{}
	pool sync.Pool
}

type job struct {
	h    message.NoPublishHandlerFunc
	msg  *message.Message
	err  error
	done chan struct{}
}

// newWorkers starts n workers. The router runs at most one handler per lane, so n = lanes
// means a handler never waits for a free worker.
func newWorkers(n int) *workers {
	w := &workers{jobs: make(chan *job), quit: make(chan struct{})}
	w.pool.New = func() any { return &job{done: make(chan struct{}, 1)} }
	for range n {
		go func() {
			for {
				select {
				case j := <-w.jobs:
					j.run()
				case <-w.quit:
					return
				}
			}
		}()
	}
	return w
}

func (j *job) run() {
	defer func() {
		if r := recover(); r != nil {
			j.err = middleware.RecoveredPanicError{V: r, Stacktrace: string(debug.Stack())}
		}
		j.done <- struct{}{}
	}()
	j.err = j.h(j.msg)
}

// handler returns h run on a worker (or on the caller's goroutine once the workers are gone:
// a handler the router left running past its close timeout may still retry).
func (w *workers) handler(h message.NoPublishHandlerFunc) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		j := w.pool.Get().(*job)
		j.h, j.msg, j.err = h, msg, nil
		select {
		case w.jobs <- j:
		case <-w.quit:
			j.run()
		}
		<-j.done
		err := j.err
		j.h, j.msg, j.err = nil, nil, nil
		w.pool.Put(j)
		return err
	}
}

// close lets the workers end; one that is running a delivery ends after it.
func (w *workers) close() {
	select {
	case <-w.quit:
	default:
		close(w.quit)
	}
}
