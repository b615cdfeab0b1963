package tracing

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/agentbus/agentbus/pkg/buildinfo"
)

// otlpExporter sends spans to an OTLP/HTTP collector as protobuf (POST <endpoint>/v1/traces,
// Content-Type application/x-protobuf), writing the ExportTraceServiceRequest straight from
// the SDK's read-only spans into a reused buffer.
//
// Why not the SDK's otlptracehttp: it first converts every span into the generated protobuf
// structs (a struct per span, per attribute, per value: about 12 objects for each of a tool
// turn's 7 spans) and then marshals those; at 100 % sampling that conversion was the largest
// share of tracing's allocation per turn (BenchmarkExport compares the two). The bytes sent are
// the same message (TestExporterMatchesSDK decodes both with the generated types). Only the
// plain case is done here: http/protobuf, the endpoint, headers, timeout and gzip variables;
// a configuration with client or CA certificates, or http/json, goes to otlptracehttp (New).
//
// Safe for concurrent use (exports are serialized: the batch processor sends one at a time).
type otlpExporter struct {
	url     string
	header  http.Header
	gzip    bool
	timeout time.Duration
	client  *http.Client

	mu        sync.Mutex
	buf       []byte                        // the request being written
	zbuf      bytes.Buffer                  // its gzip form
	zw        *gzip.Writer                  // reused
	resources map[attribute.Distinct][]byte // encoded Resource messages
	closed    bool
}

// otlpConfig is what the OTEL_EXPORTER_OTLP_* variables say, for newOTLPExporter.
type otlpConfig struct {
	url     string
	header  http.Header
	gzip    bool
	timeout time.Duration
}

// errSDKExporter: the configuration needs otlptracehttp (New falls back to it).
var errSDKExporter = errors.New("configuration needs the SDK's exporter")

// otlpConfigFrom reads the exporter variables the way the OpenTelemetry specification says
// (the _TRACES_ form wins over the general one). errSDKExporter when the configuration asks for
// something only otlptracehttp does.
func otlpConfigFrom(getenv func(string) string) (otlpConfig, error) {
	get := func(name string) string {
		if v := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_" + name)); v != "" {
			return v
		}
		return strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_" + name))
	}
	c := otlpConfig{header: http.Header{}, timeout: 10 * time.Second}
	if get("PROTOCOL") == "http/json" || get("CERTIFICATE") != "" || get("CLIENT_CERTIFICATE") != "" || get("CLIENT_KEY") != "" {
		return c, errSDKExporter
	}
	if v := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")); v != "" {
		c.url = v // used as it is
	} else {
		u, err := url.Parse(strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")))
		if err != nil {
			return c, fmt.Errorf("%w: OTEL_EXPORTER_OTLP_ENDPOINT: %w", ErrConfig, err)
		}
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
		c.url = u.String()
	}
	if u, err := url.Parse(c.url); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return c, fmt.Errorf("%w: OTLP endpoint %q is not an http(s) URL", ErrConfig, c.url)
	}
	for _, kv := range strings.Split(get("HEADERS"), ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		k, _ = url.PathUnescape(strings.TrimSpace(k))
		v, _ = url.PathUnescape(strings.TrimSpace(v))
		if k != "" {
			c.header.Add(k, v)
		}
	}
	switch v := get("COMPRESSION"); v {
	case "", "none":
	case "gzip":
		c.gzip = true
	default:
		return c, fmt.Errorf("%w: OTEL_EXPORTER_OTLP_COMPRESSION=%q: use gzip or none", ErrConfig, v)
	}
	if v := get("TIMEOUT"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 {
			return c, fmt.Errorf("%w: OTEL_EXPORTER_OTLP_TIMEOUT=%q is not a number of milliseconds", ErrConfig, v)
		}
		c.timeout = time.Duration(ms) * time.Millisecond
	}
	return c, nil
}

func newOTLPExporter(c otlpConfig) *otlpExporter {
	h := c.header.Clone()
	h.Set("Content-Type", "application/x-protobuf")
	h.Set("User-Agent", "agentbus/"+buildinfo.Get().Version)
	if c.gzip {
		h.Set("Content-Encoding", "gzip")
	}
	return &otlpExporter{url: c.url, header: h, gzip: c.gzip, timeout: c.timeout,
		client: &http.Client{Transport: http.DefaultTransport}, resources: map[attribute.Distinct][]byte{}}
}

// ExportSpans sends spans as one request, retrying a 429, 502, 503 or 504 answer (and a
// transport error) with backoff until the exporter's timeout. It keeps no reference to spans.
func (e *otlpExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.buf = e.appendRequest(e.buf[:0], spans)
	body := e.buf
	if e.gzip {
		e.zbuf.Reset()
		if e.zw == nil {
			e.zw = gzip.NewWriter(&e.zbuf)
		} else {
			e.zw.Reset(&e.zbuf)
		}
		_, _ = e.zw.Write(body)
		if err := e.zw.Close(); err != nil {
			return fmt.Errorf("tracing: gzip: %w", err)
		}
		body = e.zbuf.Bytes()
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	backoff := 100 * time.Millisecond
	for {
		retry, err := e.post(ctx, body)
		if err == nil || !retry {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("tracing: export %d spans: %w (last: %w)", len(spans), ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// post sends one request; retry says whether a later attempt may succeed.
func (e *otlpExporter) post(ctx context.Context, body []byte) (retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return false, fmt.Errorf("tracing: export: %w", err)
	}
	req.Header = e.header // never changed after newOTLPExporter; the client only reads it
	resp, err := e.client.Do(req)
	if err != nil {
		return true, fmt.Errorf("tracing: export: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // reuse the connection
	_ = resp.Body.Close()
	switch {
	case resp.StatusCode/100 == 2:
		return false, nil // a partial success's rejected count is not read: nothing would act on it
	case resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode == http.StatusBadGateway,
		resp.StatusCode == http.StatusServiceUnavailable, resp.StatusCode == http.StatusGatewayTimeout:
		return true, fmt.Errorf("tracing: export to %s: %s", e.url, resp.Status)
	}
	return false, fmt.Errorf("tracing: export to %s: %s", e.url, resp.Status)
}

// Shutdown stops exports; later calls of ExportSpans send nothing.
func (e *otlpExporter) Shutdown(context.Context) error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.client.CloseIdleConnections()
	return nil
}

// Field numbers of the OTLP protobuf messages written here (opentelemetry-proto,
// collector/trace/v1, trace/v1, common/v1, resource/v1).
const (
	fRequestResourceSpans = 1 // ExportTraceServiceRequest.resource_spans

	fResourceSpansResource   = 1
	fResourceSpansScopeSpans = 2
	fResourceSpansSchemaURL  = 3

	fResourceAttributes = 1
	fResourceDropped    = 2

	fScopeSpansScope     = 1
	fScopeSpansSpans     = 2
	fScopeSpansSchemaURL = 3

	fScopeName       = 1
	fScopeVersion    = 2
	fScopeAttributes = 3

	fSpanTraceID       = 1
	fSpanSpanID        = 2
	fSpanTraceState    = 3
	fSpanParentSpanID  = 4
	fSpanName          = 5
	fSpanKind          = 6
	fSpanStart         = 7
	fSpanEnd           = 8
	fSpanAttributes    = 9
	fSpanDroppedAttrs  = 10
	fSpanEvents        = 11
	fSpanDroppedEvents = 12
	fSpanLinks         = 13
	fSpanDroppedLinks  = 14
	fSpanStatus        = 15
	fSpanFlags         = 16

	fEventTime       = 1
	fEventName       = 2
	fEventAttributes = 3
	fEventDropped    = 4

	fLinkTraceID    = 1
	fLinkSpanID     = 2
	fLinkTraceState = 3
	fLinkAttributes = 4
	fLinkDropped    = 5
	fLinkFlags      = 6

	fStatusMessage = 2
	fStatusCode    = 3

	fKeyValueKey   = 1
	fKeyValueValue = 2

	fAnyString = 1
	fAnyBool   = 2
	fAnyInt    = 3
	fAnyDouble = 4
	fAnyArray  = 5
	fAnyKVList = 6
	fAnyBytes  = 7

	fArrayValues  = 1 // ArrayValue.values and KeyValueList.values
	flagHasRemote = 0x100
	flagIsRemote  = 0x200
)

// begin appends field's tag and one byte reserved for a length; end writes the length of what
// was appended since, moving it when the length needs more than one byte.
func begin(b []byte, field protowire.Number) ([]byte, int) {
	b = protowire.AppendTag(b, field, protowire.BytesType)
	return append(b, 0), len(b)
}

func end(b []byte, at int) []byte {
	n := len(b) - at - 1
	if n < 0x80 {
		b[at] = byte(n)
		return b
	}
	k := protowire.SizeVarint(uint64(n))
	var room [9]byte
	b = append(b, room[:k-1]...)
	copy(b[at+k:], b[at+1:at+1+n])
	protowire.AppendVarint(b[at:at], uint64(n))
	return b
}

func appendString(b []byte, field protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, field, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendUint(b []byte, field protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(protowire.AppendTag(b, field, protowire.VarintType), v)
}

func appendFixed64(b []byte, field protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendFixed64(protowire.AppendTag(b, field, protowire.Fixed64Type), v)
}

func clampCount(v int) uint64 { return uint64(min(max(v, 0), math.MaxUint32)) }

func unixNano(t time.Time) uint64 { return uint64(max(0, t.UnixNano())) }

// appendRequest writes the ExportTraceServiceRequest of spans: one ResourceSpans per resource,
// in it one ScopeSpans per instrumentation scope, in the order they first appear.
func (e *otlpExporter) appendRequest(b []byte, spans []sdktrace.ReadOnlySpan) []byte {
	type group struct {
		res   *resource.Resource
		key   attribute.Distinct
		scope []instrumentation.Scope
	}
	var groups []group
	for _, s := range spans {
		k := s.Resource().Equivalent()
		i := 0
		for i < len(groups) && groups[i].key != k {
			i++
		}
		if i == len(groups) {
			groups = append(groups, group{res: s.Resource(), key: k})
		}
		sc := s.InstrumentationScope()
		j := 0
		for j < len(groups[i].scope) && groups[i].scope[j] != sc {
			j++
		}
		if j == len(groups[i].scope) {
			groups[i].scope = append(groups[i].scope, sc)
		}
	}
	for _, g := range groups {
		var rs, ss, at int
		b, rs = begin(b, fRequestResourceSpans)
		b, at = begin(b, fResourceSpansResource)
		b = append(b, e.resource(g.res, g.key)...)
		b = end(b, at)
		for _, sc := range g.scope {
			b, ss = begin(b, fResourceSpansScopeSpans)
			if sc != (instrumentation.Scope{}) {
				b, at = begin(b, fScopeSpansScope)
				b = appendString(b, fScopeName, sc.Name)
				b = appendString(b, fScopeVersion, sc.Version)
				b = appendAttrIter(b, fScopeAttributes, sc.Attributes.Iter())
				b = end(b, at)
			}
			for _, s := range spans {
				if s.InstrumentationScope() == sc && s.Resource().Equivalent() == g.key {
					b = appendSpan(b, s)
				}
			}
			b = appendString(b, fScopeSpansSchemaURL, sc.SchemaURL)
			b = end(b, ss)
		}
		b = appendString(b, fResourceSpansSchemaURL, g.res.SchemaURL())
		b = end(b, rs)
	}
	return b
}

// resource returns r's encoded Resource message body, built once per distinct resource (a
// process has one per role).
func (e *otlpExporter) resource(r *resource.Resource, k attribute.Distinct) []byte {
	if enc, ok := e.resources[k]; ok {
		return enc
	}
	var enc []byte
	enc = appendAttrIter(enc, fResourceAttributes, r.Iter())
	if len(e.resources) < 64 {
		e.resources[k] = enc
	}
	return enc
}

func appendSpan(b []byte, s sdktrace.ReadOnlySpan) []byte {
	var at int
	b, at = begin(b, fScopeSpansSpans)
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	b = protowire.AppendBytes(protowire.AppendTag(b, fSpanTraceID, protowire.BytesType), tid[:])
	b = protowire.AppendBytes(protowire.AppendTag(b, fSpanSpanID, protowire.BytesType), sid[:])
	if ts := sc.TraceState(); ts.Len() > 0 {
		b = appendString(b, fSpanTraceState, ts.String())
	}
	parent := s.Parent()
	if psid := parent.SpanID(); psid.IsValid() {
		b = protowire.AppendBytes(protowire.AppendTag(b, fSpanParentSpanID, protowire.BytesType), psid[:])
	}
	b = appendString(b, fSpanName, s.Name())
	b = appendUint(b, fSpanKind, uint64(spanKind(s.SpanKind())))
	b = appendFixed64(b, fSpanStart, unixNano(s.StartTime()))
	b = appendFixed64(b, fSpanEnd, unixNano(s.EndTime()))
	for _, kv := range s.Attributes() {
		b = appendKeyValue(b, fSpanAttributes, kv)
	}
	b = appendUint(b, fSpanDroppedAttrs, clampCount(s.DroppedAttributes()))
	for _, ev := range s.Events() {
		var ea int
		b, ea = begin(b, fSpanEvents)
		b = appendFixed64(b, fEventTime, unixNano(ev.Time))
		b = appendString(b, fEventName, ev.Name)
		for _, kv := range ev.Attributes {
			b = appendKeyValue(b, fEventAttributes, kv)
		}
		b = appendUint(b, fEventDropped, clampCount(ev.DroppedAttributeCount))
		b = end(b, ea)
	}
	b = appendUint(b, fSpanDroppedEvents, clampCount(s.DroppedEvents()))
	for _, l := range s.Links() {
		var la int
		b, la = begin(b, fSpanLinks)
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		b = protowire.AppendBytes(protowire.AppendTag(b, fLinkTraceID, protowire.BytesType), ltid[:])
		b = protowire.AppendBytes(protowire.AppendTag(b, fLinkSpanID, protowire.BytesType), lsid[:])
		if ts := l.SpanContext.TraceState(); ts.Len() > 0 {
			b = appendString(b, fLinkTraceState, ts.String())
		}
		for _, kv := range l.Attributes {
			b = appendKeyValue(b, fLinkAttributes, kv)
		}
		b = appendUint(b, fLinkDropped, clampCount(l.DroppedAttributeCount))
		b = protowire.AppendFixed32(protowire.AppendTag(b, fLinkFlags, protowire.Fixed32Type), flags(l.SpanContext.TraceFlags(), l.SpanContext))
		b = end(b, la)
	}
	b = appendUint(b, fSpanDroppedLinks, clampCount(s.DroppedLinks()))
	var st int
	b, st = begin(b, fSpanStatus) // always present, as the SDK's exporter sends it
	status := s.Status()
	b = appendString(b, fStatusMessage, status.Description)
	switch status.Code {
	case codes.Ok:
		b = appendUint(b, fStatusCode, 1)
	case codes.Error:
		b = appendUint(b, fStatusCode, 2)
	}
	b = end(b, st)
	b = protowire.AppendFixed32(protowire.AppendTag(b, fSpanFlags, protowire.Fixed32Type), flags(sc.TraceFlags(), parent))
	return end(b, at)
}

// flags are a span's (or link's) OTLP flags: the W3C trace flags, and whether its parent (the
// linked context) is remote, which is always known here.
func flags(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	f := uint32(tf) | flagHasRemote
	if parent.IsRemote() {
		f |= flagIsRemote
	}
	return f
}

// spanKind maps the API's span kind to OTLP's (the same numbers, 0 for anything unknown).
func spanKind(k trace.SpanKind) trace.SpanKind {
	if k < trace.SpanKindInternal || k > trace.SpanKindConsumer {
		return trace.SpanKindUnspecified
	}
	return k
}

func appendAttrIter(b []byte, field protowire.Number, it attribute.Iterator) []byte {
	for it.Next() {
		b = appendKeyValue(b, field, it.Attribute())
	}
	return b
}

func appendKeyValue(b []byte, field protowire.Number, kv attribute.KeyValue) []byte {
	var at, va int
	b, at = begin(b, field)
	b = appendString(b, fKeyValueKey, string(kv.Key))
	b, va = begin(b, fKeyValueValue)
	b = appendAnyValue(b, kv.Value)
	b = end(b, va)
	return end(b, at)
}

// appendAnyValue writes the fields of v's AnyValue (the oneof member is written even when it
// is its zero value, as protobuf does for a set oneof).
func appendAnyValue(b []byte, v attribute.Value) []byte {
	switch v.Type() {
	case attribute.STRING:
		b = protowire.AppendTag(b, fAnyString, protowire.BytesType)
		return protowire.AppendString(b, v.AsString())
	case attribute.BOOL:
		return protowire.AppendVarint(protowire.AppendTag(b, fAnyBool, protowire.VarintType), protowire.EncodeBool(v.AsBool()))
	case attribute.INT64:
		return protowire.AppendVarint(protowire.AppendTag(b, fAnyInt, protowire.VarintType), uint64(v.AsInt64()))
	case attribute.FLOAT64:
		return protowire.AppendFixed64(protowire.AppendTag(b, fAnyDouble, protowire.Fixed64Type), math.Float64bits(v.AsFloat64()))
	case attribute.BYTESLICE:
		b = protowire.AppendTag(b, fAnyBytes, protowire.BytesType)
		return protowire.AppendBytes(b, v.AsByteSlice())
	case attribute.MAP:
		var at int
		b, at = begin(b, fAnyKVList)
		for _, kv := range v.AsMap() {
			b = appendKeyValue(b, fArrayValues, kv)
		}
		return end(b, at)
	case attribute.EMPTY:
		return b
	}
	var vals []attribute.Value
	switch v.Type() {
	case attribute.BOOLSLICE:
		for _, x := range v.AsBoolSlice() {
			vals = append(vals, attribute.BoolValue(x))
		}
	case attribute.INT64SLICE:
		for _, x := range v.AsInt64Slice() {
			vals = append(vals, attribute.Int64Value(x))
		}
	case attribute.FLOAT64SLICE:
		for _, x := range v.AsFloat64Slice() {
			vals = append(vals, attribute.Float64Value(x))
		}
	case attribute.STRINGSLICE:
		for _, x := range v.AsStringSlice() {
			vals = append(vals, attribute.StringValue(x))
		}
	case attribute.SLICE:
		vals = v.AsSlice()
	default:
		b = protowire.AppendTag(b, fAnyString, protowire.BytesType)
		return protowire.AppendString(b, "INVALID") // what the SDK's exporter sends
	}
	var at int
	b, at = begin(b, fAnyArray)
	for _, x := range vals {
		var xa int
		b, xa = begin(b, fArrayValues)
		b = appendAnyValue(b, x)
		b = end(b, xa)
	}
	return end(b, at)
}
