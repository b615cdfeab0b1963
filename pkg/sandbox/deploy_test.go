package sandbox

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestContainerGetsSandbox: the tool worker's image installs what the
// sandbox needs, and docker-compose.yml starts it with the seccomp profile
// that lets bubblewrap create namespaces (TestSeccompProfileRunsSandbox
// enforces that profile), AppArmor and /proc masking lifted for it.
func TestContainerGetsSandbox(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(raw)
	stage := df[strings.Index(df, "AS tool-worker"):]
	if i := strings.Index(stage, "\nFROM "); i > 0 {
		stage = stage[:i]
	}
	for _, pkg := range []string{"bubblewrap", "util-linux", "slirp4netns", "iproute2"} {
		if !regexp.MustCompile(`apt-get install[^&]*\b` + pkg + `\b`).MatchString(stage) {
			t.Errorf("the tool-worker image does not install %s", pkg)
		}
	}
	raw, err = os.ReadFile(filepath.Join("..", "..", "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Services map[string]struct {
			SecurityOpt []string `yaml:"security_opt"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	opts := c.Services["tool-worker"].SecurityOpt
	for _, want := range []string{"apparmor=unconfined", "systempaths=unconfined"} {
		if !slices.Contains(opts, want) {
			t.Errorf("tool-worker security_opt %v lacks %s", opts, want)
		}
	}
	var profile string
	for _, o := range opts {
		if p, ok := strings.CutPrefix(o, "seccomp="); ok {
			profile = p
		}
	}
	if profile == "" {
		t.Fatalf("tool-worker security_opt %v sets no seccomp profile", opts)
	}
	if _, err := os.Stat(filepath.Join("..", "..", profile)); err != nil || !strings.HasSuffix(profile, "deploy/seccomp-toolworker.json") {
		t.Errorf("seccomp profile %q: %v", profile, err)
	}
	for name, s := range c.Services {
		if name != "tool-worker" && len(s.SecurityOpt) > 0 {
			t.Errorf("%s loosens its security options too (%v): only the tool worker runs the sandbox", name, s.SecurityOpt)
		}
	}
}
