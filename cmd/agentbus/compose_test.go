package main

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// composeFile is the part of docker-compose.yml the test reads (anchors and merge keys
// resolved by the decoder).
type composeFile struct {
	Services map[string]struct {
		Ports       []string          `yaml:"ports"`
		Volumes     []string          `yaml:"volumes"`
		Environment map[string]string `yaml:"environment"`
		Entrypoint  []string          `yaml:"entrypoint"`
		Deploy      struct {
			Replicas int `yaml:"replicas"`
		} `yaml:"deploy"`
	} `yaml:"services"`
	Volumes map[string]any `yaml:"volumes"`
}

// TestComposeFile checks what docker compose would do with docker-compose.yml without Docker
// (which cannot run here): a variable deploy/agentbus.yml needs is required (${X:?...}), not
// silently empty; nothing but the signed webhook port is published beyond the host's loopback
// (the NATS monitoring port 8222 has no authentication); the tool-worker replicas share a
// named workspace volume where ai.agent.workspace points; every role still mounts its config.
func TestComposeFile(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(pkgRoot, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatalf("docker-compose.yml does not parse: %v", err)
	}
	deploy, err := os.ReadFile(filepath.Join(pkgRoot, "deploy", "agentbus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	// Variables deploy/agentbus.yml uses without a default.
	needed := map[string]bool{}
	for _, m := range docEnvVar.FindAllStringSubmatch(string(deploy), -1) {
		needed[m[1]] = true
	}
	if !needed["OPENAI_API_KEY"] {
		t.Fatalf("deploy/agentbus.yml no longer uses ${OPENAI_API_KEY}; update this test")
	}
	required := regexp.MustCompile(`^\$\{([A-Za-z_][A-Za-z0-9_]*):\?[^}]+\}$`)
	optional := regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*(:?-[^}]*)?\}`)
	roles := 0
	for _, name := range slices.Sorted(maps.Keys(c.Services)) {
		s := c.Services[name]
		for k, v := range s.Environment {
			if needed[k] && optional.MatchString(v) && !required.MatchString(v) {
				t.Errorf("services.%s.environment.%s = %q: deploy/agentbus.yml needs it; write ${%s:?set %s} so compose refuses to start without it", name, k, v, k, k)
			}
		}
		for _, p := range s.Ports {
			if strings.HasSuffix(p, ":8088") && !strings.Contains(p, "127.0.0.1") {
				continue // the webhook: every request is signed
			}
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("services.%s.ports %q is published on every interface; bind it to 127.0.0.1 (8222, NATS monitoring, has no authentication)", name, p)
			}
		}
		if len(s.Entrypoint) > 0 && strings.HasPrefix(s.Entrypoint[0], "/usr/local/bin/") {
			roles++
			if !slices.ContainsFunc(s.Volumes, func(v string) bool { return strings.HasSuffix(v, ":/etc/agentbus/agentbus.yml:ro") }) {
				t.Errorf("services.%s mounts no /etc/agentbus/agentbus.yml (a service's own volumes: replace the anchor's)", name)
			}
		}
	}
	if roles < 5 {
		t.Fatalf("%d role services found; the compose file's shape changed, update this test", roles)
	}
	if env := c.Services["turn-worker"].Environment; !required.MatchString(env["OPENAI_API_KEY"]) {
		t.Errorf("services.turn-worker.environment.OPENAI_API_KEY = %q, want ${OPENAI_API_KEY:?...}", env["OPENAI_API_KEY"])
	}
	tw := c.Services["tool-worker"]
	if tw.Deploy.Replicas < 2 {
		t.Errorf("tool-worker replicas = %d; this test checks the shared workspace of several", tw.Deploy.Replicas)
	}
	// The images' working directory is /home/nonroot and ai.agent.workspace defaults to
	// <dataDir>/workspace = ./data/workspace.
	var ws string
	for _, v := range tw.Volumes {
		if src, dst, ok := strings.Cut(v, ":"); ok && strings.TrimSuffix(dst, ":rw") == "/home/nonroot/data/workspace" {
			ws = src
		}
	}
	switch {
	case ws == "":
		t.Errorf("tool-worker mounts nothing on /home/nonroot/data/workspace: its replicas do not share a workspace (volumes %q)", tw.Volumes)
	case strings.HasPrefix(ws, ".") || strings.HasPrefix(ws, "/"):
		t.Errorf("tool-worker workspace %q is a bind mount; use a named volume (it starts out owned by the image's user)", ws)
	default:
		if _, ok := c.Volumes[ws]; !ok {
			t.Errorf("tool-worker workspace volume %q is not declared under volumes:", ws)
		}
	}
}
