package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/cmd/internal/rolemain"
	"github.com/agentbus/agentbus/pkg/app"
)

// traceVars are the OpenTelemetry variables every help of a process that runs roles names.
var traceVars = []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_SERVICE_NAME",
	"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_SDK_DISABLED", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"}

// Every command's --help lists its flags and the environment variables it reads; those that
// run roles (up, bench, each role binary) list the OTEL_* variables and the metrics listener's.
func TestHelpListsFlagsAndEnvironment(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"up"}, append([]string{"-config", "-health", "-metrics-listen", "AGENTBUS_METRICS_LISTEN", "AGENTBUS_HEALTH_LISTEN", "OPENAI_API_KEY"}, traceVars...)},
		{[]string{"bench"}, append([]string{"-sessions", "-tool", "-cpuprofile", "Environment"}, traceVars...)},
		{[]string{"chat"}, []string{"-user", "AGENTBUS_NATS_URL", "AGENTBUS_DATA_DIR"}},
		{[]string{"sessions"}, []string{"AGENTBUS_NATS_URL"}},
		{[]string{"replay"}, []string{"AGENTBUS_NATS_URL"}},
		{[]string{"console"}, []string{"-listen", "AGENTBUS_NATS_URL"}},
		{[]string{"status"}, []string{"AGENTBUS_NATS_URL"}},
		{[]string{"doctor"}, []string{"-config", "AGENTBUS_NATS_URL", "OPENAI_API_KEY"}},
		{[]string{"dlq", "list"}, []string{"-role", "AGENTBUS_NATS_URL"}},
		{[]string{"provision"}, []string{"-config", "-timeout", "Environment"}},
		{[]string{"region", "promote"}, []string{"-config", "-timeout", "AGENTBUS_NATS_URL"}},
		{[]string{"health"}, []string{"-timeout"}},
	}
	for _, tt := range tests {
		t.Run(tt.args[0], func(t *testing.T) {
			out := helpOf(t, tt.args...)
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("agentbus %s --help does not mention %s:\n%s", tt.args[0], w, out)
				}
			}
		})
	}
	for _, role := range []string{"ingest", "turn-worker", "tool-worker", "egress"} {
		t.Run(role, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := rolemain.Run(role, app.AllRoles, []string{"--help"}, &stdout, &stderr); code != 0 {
				t.Fatalf("%s --help: exit %d", role, code)
			}
			out := stdout.String() + stderr.String()
			for _, w := range append([]string{"-config", "-nats", "-health", "-metrics-listen", "-version",
				"AGENTBUS_NATS_URL", "AGENTBUS_METRICS_LISTEN"}, traceVars...) {
				if !strings.Contains(out, w) {
					t.Errorf("%s --help does not mention %s:\n%s", role, w, out)
				}
			}
		})
	}
}
