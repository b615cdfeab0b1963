package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/agentbus/agentbus/pkg/buildinfo"
)

// ScopeName is the instrumentation scope of every agentbus span.
const ScopeName = "github.com/agentbus/agentbus"

// Settings is what the OTEL_* environment asks for. The zero value is "off".
type Settings struct {
	// Enabled: an OTLP endpoint is set, OTEL_SDK_DISABLED is not true and OTEL_TRACES_EXPORTER
	// is not "none".
	Enabled bool
	// Endpoint is the endpoint variable that switched tracing on (for the start-up banner).
	Endpoint string
	// ServiceName is OTEL_SERVICE_NAME; empty means "agentbus-<role>".
	ServiceName string
}

// FromEnv reads the OpenTelemetry environment variables agentbus honours (package doc). It
// returns an error wrapping ErrConfig for a value the exporter would silently ignore: a protocol
// other than http/protobuf or http/json (grpc is not built in), an exporter other than otlp or
// none, an unknown sampler or a sampler argument that is not a ratio in [0, 1].
func FromEnv() (Settings, error) { return settingsFrom(os.Getenv) }

func settingsFrom(getenv func(string) string) (Settings, error) {
	var s Settings
	if v := strings.TrimSpace(getenv("OTEL_SDK_DISABLED")); v != "" {
		off, err := strconv.ParseBool(v)
		if err != nil {
			return s, fmt.Errorf("%w: OTEL_SDK_DISABLED=%q is not a boolean", ErrConfig, v)
		}
		if off {
			return s, nil
		}
	}
	switch v := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))); v {
	case "", "otlp":
	case "none":
		return s, nil
	default:
		return s, fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%q: agentbus exports traces over OTLP only (otlp, or none for off)", ErrConfig, v)
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			s.Endpoint = k + "=" + v
			break
		}
	}
	if s.Endpoint == "" {
		return s, nil // off: no endpoint, no spans, no exporter
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		switch v := strings.TrimSpace(getenv(k)); v {
		case "", "http/protobuf", "http/json":
		case "grpc":
			return s, fmt.Errorf("%w: %s=grpc: this build exports OTLP over HTTP only; set http/protobuf and point the endpoint at the collector's OTLP/HTTP port (4318)", ErrConfig, k)
		default:
			return s, fmt.Errorf("%w: %s=%q: use http/protobuf or http/json", ErrConfig, k, v)
		}
		if getenv(k) != "" {
			break // the traces-specific variable wins over the general one
		}
	}
	if err := checkSampler(getenv); err != nil {
		return s, err
	}
	s.Enabled = true
	s.ServiceName = strings.TrimSpace(getenv("OTEL_SERVICE_NAME"))
	return s, nil
}

// checkSampler validates OTEL_TRACES_SAMPLER and its argument the way the SDK reads them, so a
// typo stops start-up instead of falling back to the default sampler with a line in no log.
func checkSampler(getenv func(string) string) error {
	name := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER")))
	arg := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG"))
	switch name {
	case "", "always_on", "always_off", "parentbased_always_on", "parentbased_always_off":
		return nil
	case "traceidratio", "parentbased_traceidratio":
		if arg == "" {
			return nil
		}
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return fmt.Errorf("%w: OTEL_TRACES_SAMPLER_ARG=%q: %s takes a ratio from 0 to 1", ErrConfig, arg, name)
		}
		return nil
	}
	return fmt.Errorf("%w: OTEL_TRACES_SAMPLER=%q: use always_on, always_off, traceidratio or their parentbased_ forms", ErrConfig, name)
}

// Provider is one role's tracer provider. Off, it is the no-op provider and Shutdown does
// nothing. Safe for concurrent use.
type Provider struct {
	trace.TracerProvider
	sdk *sdktrace.TracerProvider // nil when off
}

// Off is the provider of a process with tracing off.
func Off() *Provider { return &Provider{TracerProvider: noop.NewTracerProvider()} }

// New returns the tracer provider of role ("ingest", "turn-worker", "tool-worker", "egress")
// for s. Its resource is service.name = s.ServiceName or "agentbus-<role>", service.version and
// agentbus.role, then OTEL_RESOURCE_ATTRIBUTES. Spans are batched (batcher, OTEL_BSP_*) and
// exported over OTLP/HTTP as the OTEL_EXPORTER_OTLP_* variables say: by otlpExporter, or by
// the SDK's otlptracehttp for http/json and TLS certificate settings. The sampler is
// OTEL_TRACES_SAMPLER's (default parentbased_always_on). Nothing is dialled here: an
// unreachable collector costs dropped batches (reported through otel's error handler), never
// a failed start or a slower turn. A malformed endpoint, compression, timeout or OTEL_BSP_*
// value is an error wrapping ErrConfig. Shutdown flushes what is buffered.
func New(ctx context.Context, s Settings, role string, opts ...sdktrace.TracerProviderOption) (*Provider, error) {
	if !s.Enabled {
		return Off(), nil
	}
	batch, queue, delay, timeout, err := batcherOptions(os.Getenv)
	if err != nil {
		return nil, err
	}
	var exp sdktrace.SpanExporter
	c, err := otlpConfigFrom(os.Getenv)
	switch {
	case err == nil:
		exp = newOTLPExporter(c)
	case errors.Is(err, errSDKExporter): // http/json or TLS certificates
		if exp, err = otlptracehttp.New(ctx); err != nil {
			return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
		}
	default:
		return nil, err
	}
	return newSDK(ctx, s, role, append([]sdktrace.TracerProviderOption{
		sdktrace.WithSpanProcessor(newBatcher(exp, batch, queue, delay, timeout))}, opts...)...)
}

// NewWithExporter is New with spans going to exp (tests: tracetest.InMemoryExporter, through
// a syncer so that they are there when the span ends).
func NewWithExporter(ctx context.Context, role string, exp sdktrace.SpanExporter) (*Provider, error) {
	return newSDK(ctx, Settings{Enabled: true}, role, sdktrace.WithSyncer(exp))
}

func newSDK(ctx context.Context, s Settings, role string, opts ...sdktrace.TracerProviderOption) (*Provider, error) {
	name := s.ServiceName
	if name == "" {
		name = "agentbus-" + role
	}
	host, _ := os.Hostname()
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(
			attribute.String("service.name", name),
			attribute.String("service.version", buildinfo.Get().Version),
			attribute.String("service.instance.id", fmt.Sprintf("%s/%d", host, os.Getpid())),
			attribute.String("agentbus.role", role),
		),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	opts = append([]sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithIDGenerator(idGenerator{})}, opts...)
	tp := sdktrace.NewTracerProvider(opts...)
	return &Provider{TracerProvider: tp, sdk: tp}, nil
}

// Enabled reports whether the provider records spans.
func (p *Provider) Enabled() bool { return p != nil && p.sdk != nil }

// Shutdown exports what is buffered and stops the provider, within ctx. Safe to call more than
// once; spans started later are dropped.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil || p.sdk == nil {
		return nil
	}
	if err := p.sdk.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: flush spans: %w", err)
	}
	return nil
}

// ShutdownTimeout bounds a role's final flush: a collector that does not answer must not hold
// a stopping process for the exporter's default 10 s per batch.
const ShutdownTimeout = 5 * time.Second

// enabled reports whether tp records spans: the roots use it to skip reading headers when
// tracing is off, so that "off" costs nothing per message.
func enabled(tp trace.TracerProvider) bool {
	switch p := tp.(type) {
	case nil, noop.TracerProvider:
		return false
	case *Provider:
		return p.Enabled()
	}
	return true
}

// Enabled reports whether tp records spans (nil and the no-op provider do not).
func Enabled(tp trace.TracerProvider) bool { return enabled(tp) }
