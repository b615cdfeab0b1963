package tracing

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/agentbus/agentbus/pkg/events"
)

// w3c is the W3C trace context propagator: the HTTP edges (webhook in, callback out) speak
// it, and the bus carries the same value under events.HeaderSpanContext.
var w3c = propagation.TraceContext{}

// InjectNATS writes the span context of ctx's span into h under events.HeaderSpanContext, so
// that the consumer's span is its child. It writes nothing when ctx has no valid span context
// (tracing off): then it costs one context lookup.
func InjectNATS(ctx context.Context, h nats.Header) {
	InjectSpanContext(trace.SpanContextFromContext(ctx), h)
}

// InjectSpanContext is InjectNATS for a span context at hand.
func InjectSpanContext(sc trace.SpanContext, h nats.Header) {
	if !sc.IsValid() || h == nil {
		return
	}
	// The header's value slice and its text are one allocation (it runs for every publish).
	v := new(headerValue)
	v.vals[0] = unsafe.String(&v.text[0], len(appendFormat(v.text[:0], sc)))
	h[events.HeaderSpanContext] = v.vals[:]
}

// headerValue holds one header value and its bytes: never changed after InjectSpanContext.
type headerValue struct {
	vals [1]string
	text [55]byte
}

// format renders sc as a W3C traceparent value, "00-<trace>-<span>-<flags>".
func format(sc trace.SpanContext) string {
	var b [55]byte
	return string(appendFormat(b[:0], sc))
}

// appendFormat writes sc's traceparent value into b[:55] (b's capacity must be at least 55).
func appendFormat(b []byte, sc trace.SpanContext) []byte {
	const hexd = "0123456789abcdef"
	b = b[:55]
	b[0], b[1], b[2] = '0', '0', '-'
	tid, sid := sc.TraceID(), sc.SpanID()
	n := 3
	for _, c := range tid {
		b[n], b[n+1] = hexd[c>>4], hexd[c&0xf]
		n += 2
	}
	b[n] = '-'
	n++
	for _, c := range sid {
		b[n], b[n+1] = hexd[c>>4], hexd[c&0xf]
		n += 2
	}
	b[n] = '-'
	f := sc.TraceFlags()
	b[n+1], b[n+2] = hexd[f>>4], hexd[f&0xf]
	return b
}

// ParentOf returns the span context a bus message carries, as its W3C value: the
// events.HeaderSpanContext that agentbus writes, or else a sampled traceparent (a third-party
// publisher that traces). agentbus's own traceparent header is never sampled ("-00": a random
// span id next to the trace id, for correlation only) and is not a parent. "" when there is none.
func ParentOf(h nats.Header) string {
	if h == nil {
		return ""
	}
	if v := h[events.HeaderSpanContext]; len(v) > 0 {
		return v[0]
	}
	if v := h.Get(events.HeaderTraceparent); sampled(v) {
		return v
	}
	return ""
}

// sampled reports whether a traceparent value's flags have the sampled bit.
func sampled(tp string) bool {
	i := strings.LastIndexByte(tp, '-')
	if i < 0 || len(tp)-i != 3 {
		return false
	}
	f, err := strconv.ParseUint(tp[i+1:], 16, 8)
	return err == nil && f&1 == 1
}

// parse reads a W3C traceparent value of version 00 ("00-<32 hex>-<16 hex>-<2 hex>", lower
// case, ids not all zero) into a remote span context; false when it is anything else. It is
// propagation.TraceContext's parser without the carrier and the context it needs: it runs for
// every consumed message.
func parse(tp string) (trace.SpanContext, bool) {
	if len(tp) != 55 || tp[0] != '0' || tp[1] != '0' || tp[2] != '-' || tp[35] != '-' || tp[52] != '-' {
		return trace.SpanContext{}, false
	}
	var tid trace.TraceID
	var sid trace.SpanID
	var flags [1]byte
	if !unhex(tid[:], tp[3:35]) || !unhex(sid[:], tp[36:52]) || !unhex(flags[:], tp[53:55]) {
		return trace.SpanContext{}, false
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid,
		TraceFlags: trace.TraceFlags(flags[0]) & trace.FlagsSampled, Remote: true})
	return sc, sc.IsValid()
}

// unhex decodes lower-case hex s into dst (len(s) == 2*len(dst)).
func unhex(dst []byte, s string) bool {
	for i := range dst {
		hi, ok1 := nibble(s[2*i])
		lo, ok2 := nibble(s[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func nibble(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// tracers caches each provider's agentbus tracer: TracerProvider.Tracer builds a config and
// takes a lock on every call, and a span is started several times per message. A process has
// a provider per role (a handful), so the cache is a short list read without a lock and
// copied on the rare write; a lookup compares pointers only (a sync.Map keyed by interface
// showed at 0.7 % of a traced turn's CPU).
var (
	tracers   atomic.Pointer[[]providerTracer]
	tracersMu sync.Mutex // serializes writers
)

type providerTracer struct {
	tp trace.TracerProvider
	t  trace.Tracer
}

func tracerOf(tp trace.TracerProvider) trace.Tracer {
	if l := tracers.Load(); l != nil {
		for _, e := range *l {
			if e.tp == tp {
				return e.t
			}
		}
	}
	tracersMu.Lock()
	defer tracersMu.Unlock()
	var l []providerTracer
	if old := tracers.Load(); old != nil {
		for _, e := range *old {
			if e.tp == tp {
				return e.t
			}
		}
		l = append(l, *old...)
	}
	t := tp.Tracer(ScopeName)
	l = append(l, providerTracer{tp: tp, t: t})
	tracers.Store(&l)
	return t
}

// Start starts a span that continues a trace carried across the bus: the child of parent (a W3C
// traceparent value, ParentOf) when it is valid, otherwise a root span whose trace id is
// traceID (the event's envelope trace id, events.Meta.Trace), so that the span joins the
// trace every log line of the message names. Pass the span kind in opts (consumer for a bus
// delivery, producer for a publish). With tp off (nil or
// no-op) it returns ctx unchanged and a no-op span, reading nothing.
func Start(ctx context.Context, tp trace.TracerProvider, name, parent, traceID string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !enabled(tp) {
		return ctx, noop.Span{}
	}
	if sc, ok := parse(parent); ok {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	} else if tid, err := trace.TraceIDFromHex(traceID); err == nil {
		ctx = context.WithValue(ctx, traceIDKey{}, tid)
	}
	if p, ok := tp.(*Provider); ok {
		tp = p.sdk // the key Child finds too (a span's TracerProvider is the SDK's)
	}
	return tracerOf(tp).Start(ctx, name, opts...)
}

// StartNATS is Start with the parent read from a bus message's headers (ParentOf).
func StartNATS(ctx context.Context, tp trace.TracerProvider, name string, h nats.Header, traceID string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !enabled(tp) {
		return ctx, noop.Span{}
	}
	return Start(ctx, tp, name, ParentOf(h), traceID, opts...)
}

// Child starts a span under ctx's span with that span's own provider, so code below a role's
// root (ingest's publish, a model call, a tool call) needs no provider of its own. When ctx's
// span does not record (tracing off, or not sampled) it returns ctx and a no-op span: the
// parent's span context keeps travelling unchanged.
func Child(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, noop.Span{}
	}
	return tracerOf(parent.TracerProvider()).Start(ctx, name, opts...)
}

// End ends span, setting its status to Error with err's text when err is not nil.
func End(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Fail sets the status of ctx's span to Error with msg (a delivery that was dead-lettered ends
// without an error of its own). Nothing happens when the span does not record.
func Fail(ctx context.Context, msg string) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetStatus(codes.Error, msg)
	}
}

// TraceID returns the trace id of ctx's span context, or "" when it has none.
func TraceID(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	return ""
}

// Handler wraps an inbound HTTP handler (the webhook adapter): an inbound W3C traceparent
// continues the caller's trace, and with tp on every request gets a server span named
// name (e.g. "POST /webhook/{bot}") carrying the response status. With tp off a request
// without traceparent passes through untouched; one with it still lends its trace id to the
// event (so logs correlate with the caller) but nothing is recorded.
func Handler(tp trace.TracerProvider, name string, h http.Handler) http.Handler {
	if !enabled(tp) {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("traceparent") != "" {
				r = r.WithContext(w3c.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
			}
			h.ServeHTTP(w, r)
		})
	}
	tr := tp.Tracer(ScopeName)
	if p, ok := tp.(*Provider); ok {
		tr = tracerOf(p.sdk)
	}
	// The start options of a POST (what a webhook gets), built once.
	post := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", http.MethodPost))}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if tp := r.Header["Traceparent"]; len(tp) > 0 {
			if sc, ok := parse(tp[0]); ok && len(r.Header["Tracestate"]) == 0 {
				ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
			} else {
				ctx = w3c.Extract(ctx, propagation.HeaderCarrier(r.Header)) // with tracestate, or not version 00
			}
		}
		opts := post
		if r.Method != http.MethodPost {
			opts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(attribute.String("http.request.method", r.Method))}
		}
		ctx, span := tr.Start(ctx, name, opts...)
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		defer func() {
			span.SetAttributes(attribute.Int("http.response.status_code", sw.code))
			if sw.code >= 500 {
				span.SetStatus(codes.Error, http.StatusText(sw.code))
			}
			span.End()
		}()
		h.ServeHTTP(sw, r.WithContext(ctx))
	})
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// StartHTTPClient starts a client span for an outbound request (a webhook callback) under
// req's context span, and writes the W3C traceparent of that span into req's headers, so the
// receiver continues the trace. Tracing off (no recording span in req's context) starts
// nothing; a valid span context in it (an unsampled trace) is still passed on. End the span
// with EndHTTP.
func StartHTTPClient(req *http.Request, name string) (*http.Request, trace.Span) {
	ctx, span := Child(req.Context(), name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("http.request.method", req.Method), attribute.String("server.address", req.URL.Host)))
	if trace.SpanContextFromContext(ctx).IsValid() {
		w3c.Inject(ctx, propagation.HeaderCarrier(req.Header))
		req = req.WithContext(ctx)
	}
	return req, span
}

// InjectHTTP writes the W3C traceparent of the span in req's context into req's headers,
// starting no span: for an outbound request that is the whole of the span it runs in (a
// delivery's first callback POST). Record its answer with RecordHTTP. With no valid span
// context it writes nothing.
func InjectHTTP(req *http.Request) {
	sc := trace.SpanContextFromContext(req.Context())
	if !sc.IsValid() {
		return
	}
	req.Header["Traceparent"] = []string{format(sc)}
}

// RecordHTTP puts an outbound request's answer on ctx's span (InjectHTTP): the
// http.response.status_code, or nothing for a transport error. It sets no status: the span's
// owner decides whether the whole of it failed (a later attempt may succeed).
func RecordHTTP(ctx context.Context, resp *http.Response, err error) {
	if span := trace.SpanFromContext(ctx); err == nil && resp != nil && span.IsRecording() {
		span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	}
}

// EndHTTP ends a StartHTTPClient span with the response status (an error, or a status of 400
// and up, sets the span's status to Error).
func EndHTTP(span trace.Span, resp *http.Response, err error) {
	if span.IsRecording() {
		switch {
		case err != nil:
			span.SetStatus(codes.Error, err.Error())
		case resp != nil:
			span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
			if resp.StatusCode >= 400 {
				span.SetStatus(codes.Error, resp.Status)
			}
		}
	}
	span.End()
}

// traceIDKey marks a context whose next root span takes the given trace id (Start).
type traceIDKey struct{}

// idGenerator is the SDK's random generator except that a root span started by Start for an
// event without a span context takes the event's trace id: agentbus has one trace id per
// inbound message already (events.Meta.Trace, in every log line) and adds no second one.
type idGenerator struct{}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if tid, ok := ctx.Value(traceIDKey{}).(trace.TraceID); ok && tid.IsValid() {
		return tid, newSpanID()
	}
	var tid trace.TraceID
	for !tid.IsValid() {
		binary.NativeEndian.PutUint64(tid[:8], rand.Uint64())
		binary.NativeEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid, newSpanID()
}

func (idGenerator) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return newSpanID() }

func newSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.NativeEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}
