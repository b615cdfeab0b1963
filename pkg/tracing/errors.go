package tracing

import "errors"

// ErrConfig is wrapped by FromEnv's errors: an OTEL_* variable has a value agentbus cannot
// honour. The message names the variable and what to set instead; the process should not start.
var ErrConfig = errors.New("tracing: bad OpenTelemetry configuration")
