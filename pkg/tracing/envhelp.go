package tracing

// EnvHelp lists, for --help, the OpenTelemetry environment variables a process that runs roles
// honours: those FromEnv and New read, and those the OTLP/HTTP exporter and the SDK read on
// their own. TestEnvHelp holds it to every OTEL_ variable this package's code names.
const EnvHelp = `  OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
                          OTLP/HTTP collector (e.g. http://127.0.0.1:4318); traces are off when neither is set
  OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL
                          http/protobuf (default) or http/json; grpc is refused
  OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_EXPORTER_OTLP_COMPRESSION,
  OTEL_EXPORTER_OTLP_CERTIFICATE, OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE, OTEL_EXPORTER_OTLP_CLIENT_KEY
                          (and their _TRACES_ forms) the exporter's headers, timeout, gzip and TLS
  OTEL_SERVICE_NAME       service name of the spans (default agentbus-<role>)
  OTEL_RESOURCE_ATTRIBUTES
                          more resource attributes (key=value,...)
  OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG
                          always_on, always_off, traceidratio or their parentbased_ forms (default
                          parentbased_always_on), and the ratio (0 to 1)
  OTEL_TRACES_EXPORTER    otlp (default) or none (off)
  OTEL_SDK_DISABLED       true: traces off
  OTEL_BSP_SCHEDULE_DELAY, OTEL_BSP_EXPORT_TIMEOUT, OTEL_BSP_MAX_EXPORT_BATCH_SIZE, OTEL_BSP_MAX_QUEUE_SIZE
                          span batching (agentbus's defaults: 5000 ms, 30000 ms, 2048, 16384)
`
