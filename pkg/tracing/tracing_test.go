package tracing

import (
	"context"
	"errors"
	"iter"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/loop"
)

func TestSettingsFromEnv(t *testing.T) {
	const ep = "http://127.0.0.1:4318"
	tests := []struct {
		name    string
		env     map[string]string
		enabled bool
		wantErr string // substring; "" = no error
	}{
		{name: "no endpoint is off", env: nil},
		{name: "endpoint turns it on", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep}, enabled: true},
		{name: "traces endpoint alone", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ep + "/v1/traces"}, enabled: true},
		{name: "sdk disabled wins", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_SDK_DISABLED": "true"}},
		{name: "sdk disabled false", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_SDK_DISABLED": "false"}, enabled: true},
		{name: "sdk disabled junk", env: map[string]string{"OTEL_SDK_DISABLED": "yes please"}, wantErr: "OTEL_SDK_DISABLED"},
		{name: "exporter none", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_TRACES_EXPORTER": "none"}},
		{name: "exporter zipkin", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: "OTEL_TRACES_EXPORTER"},
		{name: "http/protobuf", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, enabled: true},
		{name: "grpc is refused", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, wantErr: "OTLP over HTTP only"},
		{name: "traces protocol wins over grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep,
			"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, enabled: true},
		{name: "grpc without endpoint is just off", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}},
		{name: "ratio sampler", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep,
			"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.1"}, enabled: true},
		{name: "ratio out of range", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep,
			"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, wantErr: "OTEL_TRACES_SAMPLER_ARG"},
		{name: "unknown sampler", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_TRACES_SAMPLER": "sometimes"}, wantErr: "OTEL_TRACES_SAMPLER"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := settingsFrom(func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want ErrConfig naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Enabled != tt.enabled {
				t.Fatalf("enabled = %v, want %v (%+v)", s.Enabled, tt.enabled, s)
			}
		})
	}
}

func TestServiceName(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct{ env, want string }{{"", "agentbus-tool-worker"}, {"my-bot", "my-bot"}} {
		t.Setenv("OTEL_SERVICE_NAME", tt.env)
		exp := tracetest.NewInMemoryExporter()
		p, err := NewWithExporter(ctx, "tool-worker", exp)
		if err != nil {
			t.Fatal(err)
		}
		_, span := Start(ctx, p, "x", "", "")
		span.End()
		got := exp.GetSpans()
		if len(got) != 1 {
			t.Fatalf("%d spans", len(got))
		}
		attrs := map[attribute.Key]string{}
		for _, kv := range got[0].Resource.Attributes() {
			attrs[kv.Key] = kv.Value.Emit()
		}
		if attrs["service.name"] != tt.want || attrs["agentbus.role"] != "tool-worker" || attrs["service.version"] == "" {
			t.Errorf("OTEL_SERVICE_NAME=%q: resource %v, want service.name %q", tt.env, attrs, tt.want)
		}
		_ = p.Shutdown(ctx)
	}
}

// recorder is a provider whose spans land in memory.
func recorder(t *testing.T, role string) (*Provider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	p, err := NewWithExporter(context.Background(), role, exp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return p, exp
}

func TestAcrossTheBus(t *testing.T) {
	ctx := context.Background()
	ing, ingSpans := recorder(t, "ingest")
	tw, twSpans := recorder(t, "turn-worker")

	pctx, pub := Start(ctx, ing, "ingest webhook", "", "", trace.WithSpanKind(trace.SpanKindProducer))
	ev := events.New(events.Abort{Reason: "test", Sender: events.Sender{ID: "u1"}}, events.WithTrace(TraceID(pctx)))
	m, err := events.NewMsg("agent.in.x", ev)
	if err != nil {
		t.Fatal(err)
	}
	InjectNATS(pctx, m.Header)
	pub.End()

	// The carrier is not "traceparent": nats-server interprets that one when it is sampled.
	if got := m.Header.Get(events.HeaderSpanContext); got != format(pub.SpanContext()) || !strings.HasSuffix(got, "-01") {
		t.Fatalf("%s = %q, want the publisher's sampled span context %q", events.HeaderSpanContext, got, format(pub.SpanContext()))
	}
	if tp := m.Header.Get(events.HeaderTraceparent); strings.HasSuffix(tp, "-01") {
		t.Fatalf("traceparent %q is sampled: nats-server would build a header map for every message", tp)
	}

	_, turn := StartNATS(ctx, tw, "turn", m.Header, ev.Trace, trace.WithSpanKind(trace.SpanKindConsumer))
	turn.End()
	p, c := ingSpans.GetSpans()[0], twSpans.GetSpans()[0]
	if c.SpanContext.TraceID() != p.SpanContext.TraceID() || c.Parent.SpanID() != p.SpanContext.SpanID() || !c.Parent.IsRemote() {
		t.Fatalf("consumer span %v parent %v, want a child of %v", c.SpanContext, c.Parent, p.SpanContext)
	}
	if c.SpanKind != trace.SpanKindConsumer {
		t.Errorf("kind %v", c.SpanKind)
	}
	if ev.Trace != p.SpanContext.TraceID().String() {
		t.Errorf("envelope trace %s is not the span's trace %s: two ids for one message", ev.Trace, p.SpanContext.TraceID())
	}

	// An event without a span context (published with tracing off, or a resumed turn) starts
	// a root span in the trace its envelope names.
	const envTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	_, root := StartNATS(ctx, tw, "turn", nats.Header{}, envTrace)
	root.End()
	r := twSpans.GetSpans()[1]
	if r.SpanContext.TraceID().String() != envTrace || r.Parent.IsValid() {
		t.Fatalf("root span %v parent %v, want trace %s and no parent", r.SpanContext, r.Parent, envTrace)
	}
}

func TestParentOf(t *testing.T) {
	const own = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tests := []struct {
		name string
		h    nats.Header
		want string
	}{
		{"agentbus carrier", nats.Header{events.HeaderSpanContext: {own}, events.HeaderTraceparent: {"00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-00"}}, own},
		{"agentbus's own traceparent is never a parent", nats.Header{events.HeaderTraceparent: {"00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-00"}}, ""},
		{"a third party's sampled traceparent is", nats.Header{events.HeaderTraceparent: {own}}, own},
		{"none", nats.Header{}, ""},
		{"nil", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParentOf(tt.h); got != tt.want {
				t.Fatalf("ParentOf = %q, want %q", got, tt.want)
			}
		})
	}
	for _, bad := range []string{"", "00-xyz", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"} {
		if _, ok := parse(bad); ok {
			t.Errorf("parse(%q) accepted", bad)
		}
	}
	if sc, ok := parse(own); !ok || format(sc) != own {
		t.Errorf("parse/format round trip: %v %v", sc, ok)
	}
}

// fakeStream yields one model call's events, ending with final.
func fakeStream(final *llm.Message, typ llm.EventType) StreamFunc {
	return func(ctx context.Context, model *llm.Model, c *llm.Context, opts *llm.StreamOptions) iter.Seq[llm.Event] {
		return func(yield func(llm.Event) bool) {
			if !yield(llm.Event{Type: llm.EventStart, Partial: &llm.Message{}}) {
				return
			}
			yield(llm.Event{Type: typ, Message: final})
		}
	}
}

func TestSpanNamesAndAttributes(t *testing.T) {
	p, exp := recorder(t, "turn-worker")
	model := &llm.Model{ID: "gpt-4o-mini", API: llm.APIOpenAICompletions, Provider: "main"}
	ok := &llm.Message{Role: llm.RoleAssistant, Model: "gpt-4o-mini-2024-07-18", StopReason: llm.StopReasonToolUse,
		Usage: &llm.Usage{Input: 120, Output: 7}}
	failed := &llm.Message{Role: llm.RoleAssistant, StopReason: llm.StopReasonError, ErrorMessage: "401 bad key sk-secret-123"}
	type want struct {
		name   string
		kind   trace.SpanKind
		status codes.Code
		attrs  map[string]string
	}
	tests := []struct {
		name string
		run  func(ctx context.Context) error
		want want
	}{
		{"model call", func(ctx context.Context) error {
			for range WrapStream(fakeStream(ok, llm.EventDone))(ctx, model, &llm.Context{}, &llm.StreamOptions{SessionID: "s#1"}) {
			}
			return nil
		}, want{"chat gpt-4o-mini", trace.SpanKindClient, codes.Unset, map[string]string{
			"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-4o-mini",
			"gen_ai.response.model": "gpt-4o-mini-2024-07-18", "gen_ai.usage.input_tokens": "120", "gen_ai.usage.output_tokens": "7",
			"gen_ai.response.finish_reasons": "", "agentbus.provider": "main"}}}, // toolUse is the ordinary end: not recorded
		{"failed model call", func(ctx context.Context) error {
			for range WrapStream(fakeStream(failed, llm.EventError))(ctx, model, &llm.Context{}, &llm.StreamOptions{Secrets: []string{"sk-secret-123"}}) {
			}
			return nil
		}, want{"chat gpt-4o-mini", trace.SpanKindClient, codes.Error, map[string]string{"error.type": "model_error",
			"gen_ai.response.finish_reasons": `["error"]`}}},
		{"tool call", func(ctx context.Context) error {
			_, err := WrapExecutor(loop.ToolExecutorFunc(func(context.Context, loop.ToolCallRequest) (loop.ToolResult, error) {
				return loop.TextResult("ok"), nil
			})).Execute(ctx, loop.ToolCallRequest{ID: "call_1", Name: "bash"})
			return err
		}, want{"execute_tool bash", trace.SpanKindClient, codes.Unset, map[string]string{
			"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "bash", "gen_ai.tool.call.id": "call_1"}}},
		{"tool error result", func(ctx context.Context) error {
			res, err := WrapExecutor(loop.ToolExecutorFunc(func(context.Context, loop.ToolCallRequest) (loop.ToolResult, error) {
				return loop.ErrorResult("no such file"), nil
			})).Execute(ctx, loop.ToolCallRequest{ID: "call_2", Name: "read"})
			if err != nil || !res.IsError {
				return errors.New("the wrapper changed the result")
			}
			return nil
		}, want{"execute_tool read", trace.SpanKindClient, codes.Error, map[string]string{"error.type": "tool_error"}}},
		{"tool failure", func(ctx context.Context) error {
			_, err := WrapExecutor(loop.ToolExecutorFunc(func(context.Context, loop.ToolCallRequest) (loop.ToolResult, error) {
				return loop.ToolResult{}, errors.New("bus down")
			})).Execute(ctx, loop.ToolCallRequest{ID: "call_3", Name: "web"})
			if err == nil || err.Error() != "bus down" {
				return errors.New("the wrapper changed the error")
			}
			return nil
		}, want{"execute_tool web", trace.SpanKindClient, codes.Error, nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exp.Reset()
			ctx, turn := Start(context.Background(), p, "turn", "", "")
			if err := tt.run(ctx); err != nil {
				t.Fatal(err)
			}
			turn.End()
			spans := exp.GetSpans()
			if len(spans) != 2 {
				t.Fatalf("%d spans, want the call's and the turn's", len(spans))
			}
			s := spans[0]
			if s.Name != tt.want.name || s.SpanKind != tt.want.kind || s.Status.Code != tt.want.status {
				t.Fatalf("span %q kind %v status %v, want %q %v %v", s.Name, s.SpanKind, s.Status, tt.want.name, tt.want.kind, tt.want.status)
			}
			if s.Parent.SpanID() != spans[1].SpanContext.SpanID() {
				t.Errorf("not a child of the turn")
			}
			got := map[string]string{}
			for _, kv := range s.Attributes {
				got[string(kv.Key)] = kv.Value.Emit()
			}
			for k, v := range tt.want.attrs {
				if got[k] != v {
					t.Errorf("%s = %q, want %q (all: %v)", k, got[k], v, got)
				}
			}
			if strings.Contains(s.Status.Description, "sk-secret-123") {
				t.Errorf("status leaks a secret: %q", s.Status.Description)
			}
		})
	}
}

func TestHTTPEdges(t *testing.T) {
	p, exp := recorder(t, "ingest")
	const caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	var seen string
	h := Handler(p, "POST /webhook/{bot}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = TraceID(r.Context())
		// The callback POST continues the same trace.
		req := httptest.NewRequestWithContext(r.Context(), http.MethodPost, "http://callback.example/cb", nil)
		req, span := StartHTTPClient(req, http.MethodPost)
		EndHTTP(span, &http.Response{StatusCode: 502, Status: "502 Bad Gateway"}, nil)
		if got := req.Header.Get("traceparent"); !strings.HasPrefix(got, "00-0af7651916cd43dd8448eb211c80319c-") || got == caller {
			t.Errorf("callback traceparent %q, want a child in the caller's trace", got)
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	req := httptest.NewRequest(http.MethodPost, "/webhook/b1", nil)
	req.Header.Set("traceparent", caller)
	h.ServeHTTP(httptest.NewRecorder(), req)
	if seen != "0af7651916cd43dd8448eb211c80319c" {
		t.Fatalf("handler saw trace %q, want the caller's", seen)
	}
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	client, server := spans[0], spans[1]
	if server.Parent.SpanID().String() != "b7ad6b7169203331" || server.SpanKind != trace.SpanKindServer {
		t.Errorf("server span parent %v kind %v, want the caller's span", server.Parent, server.SpanKind)
	}
	if client.SpanKind != trace.SpanKindClient || client.Status.Code != codes.Error || client.Parent.SpanID() != server.SpanContext.SpanID() {
		t.Errorf("client span %+v", client)
	}

	// Off: nothing recorded, but the caller's trace id still reaches the message.
	off := Handler(Off(), "POST /webhook/{bot}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = TraceID(r.Context()) }))
	seen = ""
	off.ServeHTTP(httptest.NewRecorder(), req)
	if seen != "0af7651916cd43dd8448eb211c80319c" {
		t.Fatalf("off: handler saw trace %q", seen)
	}
}

// TestOffCostsNothing: with tracing off the per-message calls allocate nothing, write no
// header and leave the stream function untouched.
func TestOffCostsNothing(t *testing.T) {
	ctx := context.Background()
	h := nats.Header{events.HeaderSpanContext: {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	out := nats.Header{}
	off := Off()
	allocs := testing.AllocsPerRun(100, func() {
		c, span := StartNATS(ctx, off, "turn", h, "4bf92f3577b34da6a3ce929d0e0e4736")
		InjectNATS(c, out)
		End(span, nil)
		if c != ctx {
			t.Fatal("off: the context changed")
		}
	})
	if allocs != 0 || len(out) != 0 {
		t.Fatalf("off: %.0f allocations per message, headers written %v", allocs, out)
	}
	calls := 0
	next := func(ctx context.Context, model *llm.Model, c *llm.Context, opts *llm.StreamOptions) iter.Seq[llm.Event] {
		calls++
		return func(func(llm.Event) bool) {}
	}
	WrapStream(next)(ctx, &llm.Model{ID: "m"}, nil, nil)
	if calls != 1 {
		t.Fatal("off: the stream was not called straight through")
	}
}

// TestDocsConfigBlock: the environment docs/observability.md tells operators to set switches
// tracing on, with no error.
func TestDocsConfigBlock(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "observability.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, traces, ok := strings.Cut(string(doc), "## Traces")
	if !ok {
		t.Fatal("docs/observability.md has no Traces section")
	}
	_, block, ok := strings.Cut(traces, "```sh\n")
	if !ok {
		t.Fatal("the Traces section has no sh block")
	}
	block, _, _ = strings.Cut(block, "```")
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok || !strings.HasPrefix(k, "OTEL_") {
			t.Fatalf("line %q is not an OTEL_ variable", line)
		}
		env[k] = v
	}
	s, err := settingsFrom(func(k string) string { return env[k] })
	if err != nil || !s.Enabled {
		t.Fatalf("the documented environment %v: enabled %v, err %v", env, s.Enabled, err)
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	p, err := New(context.Background(), s, "ingest")
	if err != nil || !p.Enabled() {
		t.Fatalf("New with the documented environment: %v", err)
	}
	_ = p.Shutdown(context.Background())
}

// TestEnvHelp: the --help text names every OTEL_ variable this package's code reads.
func TestEnvHelp(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`"(OTEL_[A-Z_]+)"`)
	seen := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "envhelp.go" {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range name.FindAllStringSubmatch(string(src), -1) {
			seen++
			if !strings.Contains(EnvHelp, m[1]) {
				t.Errorf("%s reads %s, which EnvHelp does not list", f, m[1])
			}
		}
	}
	if seen < 8 {
		t.Fatalf("found %d OTEL_ variables in the package's code: the scan is broken", seen)
	}
}
