// Package tracing records agentbus's OpenTelemetry spans: one trace per inbound message, across
// every role process it passes through (docs/observability.md has the layout).
//
// # Configuration
//
// Only the standard environment: FromEnv reads OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT (none set:
// off), _PROTOCOL (http/protobuf or http/json; grpc is refused), OTEL_SERVICE_NAME (default
// "agentbus-<role>"), OTEL_TRACES_SAMPLER(_ARG), OTEL_SDK_DISABLED and OTEL_TRACES_EXPORTER.
// New gives each role its own provider, so the roles of `agentbus up` show as the four services
// they are in a cluster. Shutdown flushes.
//
// # Across the bus
//
// A publisher writes its span context into events.HeaderSpanContext ("Agentbus-Traceparent",
// a W3C traceparent value) with InjectNATS; a consumer continues it with StartNATS. The header
// is not "traceparent" because nats-server builds a map of every header of a message whose
// traceparent is sampled. An event without it starts a root span whose trace id is the
// event's envelope trace id (an IDGenerator reads it from the context), so spans and log lines
// share one trace id.
//
// # Export
//
// Ended spans go to a batcher (a mutex-guarded buffer, one wake-up of the export goroutine per
// batch rather than per span) and from there to otlpExporter, which writes the OTLP/HTTP
// protobuf request straight from the SDK's read-only spans into a reused buffer: the SDK's
// exporter builds the generated protobuf structs of every span first, which was the largest
// share of tracing's allocation. TestExporterMatchesSDK holds the two requests equal;
// BenchmarkExport and BenchmarkProcessorOnEnd compare the costs.
//
// # Off costs nothing
//
// With tracing off the roles hold the no-op provider: Start and StartNATS return at once,
// InjectNATS writes nothing, WrapStream and WrapExecutor call straight through, and nothing is
// allocated (TestOffCostsNothing).
//
// # Caveat
//
// Tracers are cached per provider for the life of the process (TracerProvider.Tracer takes a
// lock on every call); a process that makes providers in a loop (tests) keeps each one's tracer.
package tracing
