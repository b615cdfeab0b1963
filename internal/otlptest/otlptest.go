// Package otlptest is an in-memory OpenTelemetry collector for tests: an HTTP server that
// speaks OTLP/HTTP with protobuf bodies (POST /v1/traces, as the SDK's otlptracehttp exporter
// sends) and keeps every span it receives, with the service.name of the resource it came
// from. Point a process at it with OTEL_EXPORTER_OTLP_ENDPOINT=Collector.URL.
package otlptest

import (
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, flattened.
type Span struct {
	Service  string // the resource's service.name
	Name     string
	Kind     tracepb.Span_SpanKind
	TraceID  string // hex
	SpanID   string
	ParentID string // "" for a root
	Attrs    map[string]string
	Status   tracepb.Status_StatusCode
	Message  string // the status message
}

// Collector receives OTLP/HTTP trace exports. Its methods may be called from any goroutine.
type Collector struct {
	URL string // base URL: the exporter appends /v1/traces

	srv      *httptest.Server
	mu       sync.Mutex
	spans    []Span
	requests int
	bad      []string // why a request was refused
}

// New starts a collector, closed when the test ends.
func New(t testing.TB) *Collector {
	c := &Collector{}
	c.srv = httptest.NewServer(http.HandlerFunc(c.serve))
	c.URL = c.srv.URL
	t.Cleanup(c.srv.Close)
	return c
}

func (c *Collector) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	switch {
	case err != nil:
	case r.Method != http.MethodPost || r.URL.Path != "/v1/traces":
		err = fmt.Errorf("%s %s: not an OTLP trace export", r.Method, r.URL.Path)
	case r.Header.Get("Content-Type") != "application/x-protobuf":
		err = fmt.Errorf("content type %q, want application/x-protobuf", r.Header.Get("Content-Type"))
	default:
		err = proto.Unmarshal(body, &req)
	}
	if err != nil {
		c.mu.Lock()
		c.bad = append(c.bad, err.Error())
		c.mu.Unlock()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{Service: service, Name: s.GetName(), Kind: s.GetKind(),
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					Attrs: attrs(s.GetAttributes()), Status: s.GetStatus().GetCode(), Message: s.GetStatus().GetMessage()}
				if p := s.GetParentSpanId(); len(p) > 0 {
					sp.ParentID = hex.EncodeToString(p)
				}
				got = append(got, sp)
			}
		}
	}
	c.mu.Lock()
	c.spans = append(c.spans, got...)
	c.requests++
	c.mu.Unlock()
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// attrs renders attribute values as text (arrays as "[a b]").
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = value(kv.GetValue())
	}
	return m
}

func value(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_ArrayValue:
		var parts []string
		for _, e := range x.ArrayValue.GetValues() {
			parts = append(parts, value(e))
		}
		return fmt.Sprint(parts)
	}
	return v.String()
}

// Spans returns every span received so far.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// Trace returns the spans of one trace (hex trace id).
func (c *Collector) Trace(traceID string) []Span {
	var out []Span
	for _, s := range c.Spans() {
		if s.TraceID == traceID {
			out = append(out, s)
		}
	}
	return out
}

// Refused lists why requests were refused (a malformed export is a bug in the exporter's
// configuration, which a test should report).
func (c *Collector) Refused() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.bad...)
}
