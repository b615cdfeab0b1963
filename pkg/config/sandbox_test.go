package config

import (
	"errors"
	"strings"
	"testing"
)

func TestSandboxKeys(t *testing.T) {
	c, err := Parse([]byte(`ai: {agent: {execPreset: network, sandbox: {network: outbound, allowNetworks: ["10.20.0.0/16"], runAs: "65534:65534",
  limits: {processes: 64, memoryMiB: -1, cpuSeconds: 30, openFiles: 512, tmpMiB: 32, fileMiB: 256}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	s := c.AI.Agent.Sandbox
	if s.Network != "outbound" || s.RunAs != "65534:65534" || s.Limits.Processes != 64 || s.Limits.MemoryMiB != -1 || len(s.AllowNetworks) != 1 {
		t.Fatalf("%+v", s)
	}
	for _, tt := range []struct{ yaml, want string }{
		{"ai: {agent: {sandbox: {network: host}}}", `ai.agent.sandbox.network "host"`},
		{"ai: {agent: {sandbox: {allowNetworks: [10.0.0.1]}}}", `"10.0.0.1" is not a CIDR prefix`},
		{"ai: {agent: {sandbox: {runAs: nobody}}}", `ai.agent.sandbox.runAs "nobody"`},
		{"ai: {agent: {sandbox: {limits: {tmpMiB: -5}}}}", "ai.agent.sandbox.limits.tmpMiB -5"},
		{"ai: {agent: {sandbox: {allowUnisolate: true}}}", "did you mean"},
	} {
		_, err := Parse([]byte(tt.yaml))
		if err == nil || !strings.Contains(err.Error(), tt.want) || (!errors.Is(err, ErrInvalid) && !errors.Is(err, ErrUnknownKey)) {
			t.Errorf("%s: err = %v, want %q", tt.yaml, err, tt.want)
		}
	}
}
