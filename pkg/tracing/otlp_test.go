package tracing

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// env is a getenv reading m.
func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// receiver is an OTLP/HTTP endpoint that keeps each request's decoded body and headers.
type receiver struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []*coltrace.ExportTraceServiceRequest
	hdrs []http.Header
	bad  []string
}

func newReceiver(t testing.TB) *receiver {
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		var m coltrace.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(b, &m)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if err != nil || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			r.bad = append(r.bad, req.URL.Path+" "+req.Header.Get("Content-Type")+" "+errText(err))
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		r.reqs = append(r.reqs, &m)
		r.hdrs = append(r.hdrs, req.Header.Clone())
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (r *receiver) last(t *testing.T) (*coltrace.ExportTraceServiceRequest, http.Header) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.bad) > 0 {
		t.Fatalf("receiver refused: %v", r.bad)
	}
	if len(r.reqs) == 0 {
		t.Fatal("receiver got no request")
	}
	return r.reqs[len(r.reqs)-1], r.hdrs[len(r.hdrs)-1]
}

// testSpans are spans with every field the OTLP span has set, and attributes of every type.
func testSpans(res *resource.Resource, scope instrumentation.Scope) []sdktrace.ReadOnlySpan {
	tid := trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	ts, _ := trace.ParseTraceState("vendor=x,other=y")
	root := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{1, 1, 1, 1, 1, 1, 1, 1}, TraceFlags: trace.FlagsSampled, TraceState: ts})
	remote := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{9, 9, 9, 9, 9, 9, 9, 9}, TraceFlags: trace.FlagsSampled, Remote: true})
	t0 := time.Unix(1_700_000_000, 123456789)
	long := string(bytes.Repeat([]byte("x"), 300)) // lengths that need two varint bytes
	stubs := tracetest.SpanStubs{
		{Name: "POST /webhook/{bot}", SpanContext: root, SpanKind: trace.SpanKindServer, StartTime: t0, EndTime: t0.Add(time.Millisecond),
			Attributes: []attribute.KeyValue{attribute.String("http.request.method", "POST"), attribute.Int("http.response.status_code", 200)},
			Resource:   res, InstrumentationScope: scope},
		{Name: "chat gpt-4o", SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled}),
			Parent: root, SpanKind: trace.SpanKindClient, StartTime: t0, EndTime: t0.Add(2 * time.Millisecond),
			Attributes: []attribute.KeyValue{
				GenAIOperationName.String("chat"), GenAIUsageInputTokens.Int(0), GenAIUsageOutputTokens.Int(-7),
				attribute.Bool("b", false), attribute.Bool("t", true), attribute.Float64("f", 0.25), attribute.Float64("z", 0),
				attribute.String("empty", ""), attribute.String("long", long),
				attribute.StringSlice("ss", []string{"stop", ""}), attribute.IntSlice("is", []int{1, 0, -1}),
				attribute.BoolSlice("bs", []bool{true, false}), attribute.Float64Slice("fs", []float64{1.5}),
			},
			Events: []sdktrace.Event{{Name: "retry", Time: t0.Add(time.Microsecond), Attributes: []attribute.KeyValue{attribute.Int("attempt", 2)}, DroppedAttributeCount: 1},
				{Name: "", Time: t0}},
			Links:             []sdktrace.Link{{SpanContext: remote, Attributes: []attribute.KeyValue{attribute.String("why", "batch")}, DroppedAttributeCount: 3}},
			Status:            sdktrace.Status{Code: codes.Error, Description: "model said no: " + long},
			DroppedAttributes: 2, DroppedEvents: 3, DroppedLinks: 4,
			Resource: res, InstrumentationScope: scope},
		{Name: "execute_tool echo", SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{3}}),
			Parent: remote, SpanKind: trace.SpanKindConsumer, StartTime: t0, EndTime: t0,
			Status: sdktrace.Status{Code: codes.Ok}, Resource: res, InstrumentationScope: scope},
		{Name: "", SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{4}, TraceFlags: trace.FlagsSampled}),
			SpanKind: trace.SpanKind(42), Resource: res, InstrumentationScope: scope},
	}
	return stubs.Snapshots()
}

// TestExporterMatchesSDK: the request the exporter sends decodes, with the generated OTLP
// types, to the message the SDK's otlptracehttp exporter sends for the same spans.
func TestExporterMatchesSDK(t *testing.T) {
	ctx := context.Background()
	res := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.26.0",
		attribute.String("service.name", "agentbus-turn-worker"), attribute.Int("n", 3))
	for _, scope := range []instrumentation.Scope{
		{Name: ScopeName},
		{Name: ScopeName, Version: "v1", SchemaURL: "https://example.com/s", Attributes: attribute.NewSet(attribute.String("a", "b"))},
		{},
	} {
		spans := testSpans(res, scope)
		want, got := newReceiver(t), newReceiver(t)
		sdk, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(want.srv.URL+"/v1/traces"))
		if err != nil {
			t.Fatal(err)
		}
		if err := sdk.ExportSpans(ctx, spans); err != nil {
			t.Fatal(err)
		}
		c, err := otlpConfigFrom(env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": got.srv.URL}))
		if err != nil {
			t.Fatal(err)
		}
		ours := newOTLPExporter(c)
		for range 2 { // the second export reuses the buffers and the cached resource
			if err := ours.ExportSpans(ctx, spans); err != nil {
				t.Fatal(err)
			}
			w, _ := want.last(t)
			g, _ := got.last(t)
			if !proto.Equal(w, g) {
				t.Fatalf("scope %+v: request differs from the SDK exporter's:\nSDK:\n%s\nours:\n%s", scope, prototext.Format(w), prototext.Format(g))
			}
		}
		_ = sdk.Shutdown(ctx)
		_ = ours.Shutdown(ctx)
	}
}

// TestExporterGroupsResources: spans of two resources and two scopes become one ResourceSpans
// per resource holding one ScopeSpans per scope, every span once.
func TestExporterGroupsResources(t *testing.T) {
	r1 := resource.NewSchemaless(attribute.String("service.name", "agentbus-ingest"))
	r2 := resource.NewSchemaless(attribute.String("service.name", "agentbus-egress"))
	s1, s2 := instrumentation.Scope{Name: "one"}, instrumentation.Scope{Name: "two"}
	var spans []sdktrace.ReadOnlySpan
	spans = append(spans, testSpans(r1, s1)...)
	spans = append(spans, testSpans(r2, s1)...)
	spans = append(spans, testSpans(r1, s2)...)
	rcv := newReceiver(t)
	c, err := otlpConfigFrom(env(map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": rcv.srv.URL + "/v1/traces"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := newOTLPExporter(c).ExportSpans(context.Background(), spans); err != nil {
		t.Fatal(err)
	}
	req, _ := rcv.last(t)
	got := map[string][]string{}
	n := 0
	for _, rs := range req.GetResourceSpans() {
		svc := rs.GetResource().GetAttributes()[0].GetValue().GetStringValue()
		for _, ss := range rs.GetScopeSpans() {
			got[svc] = append(got[svc], ss.GetScope().GetName())
			n += len(ss.GetSpans())
			if len(ss.GetSpans()) != 4 {
				t.Errorf("%s/%s: %d spans, want 4", svc, ss.GetScope().GetName(), len(ss.GetSpans()))
			}
		}
	}
	if n != len(spans) || len(req.GetResourceSpans()) != 2 ||
		!reflect.DeepEqual(got, map[string][]string{"agentbus-ingest": {"one", "two"}, "agentbus-egress": {"one"}}) {
		t.Fatalf("grouping: %v, %d spans of %d", got, n, len(spans))
	}
}

// TestExporterConfig: headers, gzip and the endpoint forms; the configurations only the SDK's
// exporter handles are handed to it.
func TestExporterConfig(t *testing.T) {
	rcv := newReceiver(t)
	c, err := otlpConfigFrom(env(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT":    rcv.srv.URL + "/",
		"OTEL_EXPORTER_OTLP_HEADERS":     "api-key=secret%20one, x-tenant = a",
		"OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
		"OTEL_EXPORTER_OTLP_TIMEOUT":     "2000",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.url != rcv.srv.URL+"/v1/traces" || c.timeout != 2*time.Second || !c.gzip {
		t.Fatalf("config %+v", c)
	}
	spans := testSpans(resource.Empty(), instrumentation.Scope{Name: ScopeName})
	if err := newOTLPExporter(c).ExportSpans(context.Background(), spans); err != nil {
		t.Fatal(err)
	}
	req, h := rcv.last(t)
	if h.Get("Api-Key") != "secret one" || h.Get("X-Tenant") != "a" || h.Get("Content-Encoding") != "gzip" {
		t.Errorf("headers %v", h)
	}
	if n := len(req.GetResourceSpans()[0].GetScopeSpans()[0].GetSpans()); n != len(spans) {
		t.Errorf("%d spans, want %d", n, len(spans))
	}
	for _, e := range []map[string]string{
		{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
		{"OTEL_EXPORTER_OTLP_CERTIFICATE": "/ca.pem"},
		{"OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY": "/k.pem"},
	} {
		e["OTEL_EXPORTER_OTLP_ENDPOINT"] = rcv.srv.URL
		if _, err := otlpConfigFrom(env(e)); err != errSDKExporter {
			t.Errorf("%v: %v, want errSDKExporter", e, err)
		}
	}
	for _, e := range []map[string]string{
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4318"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.srv.URL, "OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.srv.URL, "OTEL_EXPORTER_OTLP_TIMEOUT": "soon"},
	} {
		if _, err := otlpConfigFrom(env(e)); err == nil {
			t.Errorf("%v: accepted", e)
		}
	}
}

// TestExporterRetries: a 503 is retried, a 400 is not.
func TestExporterRetries(t *testing.T) {
	var mu sync.Mutex
	var codes []int
	answers := []int{http.StatusServiceUnavailable, http.StatusOK, http.StatusBadRequest}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		code := answers[min(len(codes), len(answers)-1)]
		codes = append(codes, code)
		mu.Unlock()
		w.WriteHeader(code)
	}))
	defer srv.Close()
	c, err := otlpConfigFrom(env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL}))
	if err != nil {
		t.Fatal(err)
	}
	e := newOTLPExporter(c)
	spans := testSpans(resource.Empty(), instrumentation.Scope{})
	if err := e.ExportSpans(context.Background(), spans); err != nil {
		t.Fatalf("after a 503: %v", err)
	}
	if err := e.ExportSpans(context.Background(), spans); err == nil {
		t.Fatal("a 400 answer is not an error")
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(codes, []int{503, 200, 400}) {
		t.Fatalf("answers %v", codes)
	}
}

// BenchmarkExport is the cost of exporting a batch of a traced tool turn's spans (7 per turn,
// attributes as agentbus sets them) to a receiver that discards the body: the SDK's
// otlptracehttp exporter against otlpExporter.
func BenchmarkExport(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	spans := turnSpans(b, 2048)
	ctx := context.Background()
	sdk, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(srv.URL+"/v1/traces"))
	if err != nil {
		b.Fatal(err)
	}
	c, _ := otlpConfigFrom(env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL}))
	for _, bc := range []struct {
		name string
		exp  sdktrace.SpanExporter
	}{{"otlptracehttp", sdk}, {"agentbus", newOTLPExporter(c)}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.exp.ExportSpans(ctx, spans); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(spans)), "ns/span")
		})
	}
}

// turnSpans records n spans the way a traced tool turn makes them (WrapStream, WrapExecutor,
// StartToolNATS) and returns them.
func turnSpans(tb testing.TB, n int) []sdktrace.ReadOnlySpan {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "agentbus-turn-worker"))))
	for len(rec.Ended()) < n {
		ctx, turn := Start(context.Background(), tp, "turn", "", "0af7651916cd43dd8448eb211c80319c", trace.WithSpanKind(trace.SpanKindConsumer))
		turn.SetAttributes(AgentbusSession.String("webhook:b1:dm:user-1"), AgentbusTurn.String("01JD5X2V3K9ZQ8Y7W6T5R4P3N2"))
		_, chat := Child(ctx, "chat gpt-4o-mini", trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(GenAIOperationName.String("chat"), GenAIProviderName.String("openai"), GenAIRequestModel.String("gpt-4o-mini")))
		chat.SetAttributes(GenAIUsageInputTokens.Int(812), GenAIUsageOutputTokens.Int(37))
		chat.End()
		_, tool := Child(ctx, "execute_tool bench_echo", trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(ToolAttributes("bench_echo", "call_8f2a")...))
		tool.End()
		turn.End()
	}
	return rec.Ended()[:n]
}
