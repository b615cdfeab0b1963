package app_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

// dockerStage is one FROM ... AS name stage of the Dockerfile, its instructions joined.
type dockerStage struct {
	from, name string
	lines      []string
}

func readDockerfile(t *testing.T) map[string]*dockerStage {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	text := regexp.MustCompile(`\\\n\s*`).ReplaceAllString(string(raw), " ") // line continuations
	stages := map[string]*dockerStage{}
	var cur *dockerStage
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if f := strings.Fields(l); f[0] == "FROM" {
			cur = &dockerStage{from: f[1]}
			if len(f) == 4 && strings.EqualFold(f[2], "AS") {
				cur.name = f[3]
			}
			stages[cur.name] = cur
			continue
		}
		if cur != nil {
			cur.lines = append(cur.lines, l)
		}
	}
	return stages
}

func (s *dockerStage) has(prefix string) []string {
	var out []string
	for _, l := range s.lines {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}

type composeFile struct {
	Services map[string]struct {
		Build struct {
			Context string `yaml:"context"`
			Target  string `yaml:"target"`
		} `yaml:"build"`
		Entrypoint  []string          `yaml:"entrypoint"`
		Volumes     []string          `yaml:"volumes"`
		Healthcheck map[string]any    `yaml:"healthcheck"`
		Environment map[string]string `yaml:"environment"`
		DependsOn   map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
	} `yaml:"services"`
}

func readCompose(t *testing.T) composeFile {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(raw, &c); err != nil { // yaml.v3 resolves the <<: merge keys
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return c
}

// The container files, read the way Docker would: the tool worker's image has a shell and the
// tools it needs, every image has a health check that asks /healthz where the roles serve it,
// the egress volume's directory belongs to the image's user, and the build context leaves
// local state and configs out.
func TestContainerFiles(t *testing.T) {
	stages := readDockerfile(t)
	for _, name := range []string{"build", "tool-worker", "agentbus"} {
		if stages[name] == nil {
			t.Fatalf("Dockerfile has no stage %q (stages: %v)", name, stages)
		}
	}
	tw := stages["tool-worker"]
	if !strings.HasPrefix(tw.from, "debian:") {
		t.Errorf("tool-worker image is based on %s, want Debian slim", tw.from)
	}
	install := strings.Join(tw.has("RUN"), " ")
	for _, pkg := range []string{"bash", "coreutils", "bubblewrap"} {
		if !regexp.MustCompile(`apt-get install[^&]*\b` + pkg + `\b`).MatchString(install) {
			t.Errorf("tool-worker image does not install %s: %s", pkg, install)
		}
	}
	for _, name := range []string{"tool-worker", "agentbus"} {
		s := stages[name]
		if u := s.has("USER"); len(u) != 1 || u[0] != "USER 65532:65532" {
			t.Errorf("%s: USER %v, want 65532:65532", name, u)
		}
		env := strings.Join(s.has("ENV"), " ")
		m := regexp.MustCompile(`AGENTBUS_HEALTH_LISTEN=(\S+)`).FindStringSubmatch(env)
		if m == nil {
			t.Errorf("%s: no AGENTBUS_HEALTH_LISTEN", name)
			continue
		}
		hc := strings.Join(s.has("HEALTHCHECK"), " ")
		if !strings.Contains(hc, `"/usr/local/bin/agentbus", "health", "http://`+m[1]+`/healthz"`) {
			t.Errorf("%s: HEALTHCHECK %q does not ask http://%s/healthz with agentbus health", name, hc, m[1])
		}
		if c := s.has("COPY --from=build --chown=65532:65532 /out/home/ /home/nonroot/"); len(c) != 1 {
			t.Errorf("%s: /home/nonroot (with data/) is not copied owned by the image's user", name)
		}
	}
	if !strings.Contains(strings.Join(stages["build"].has("RUN"), " "), "mkdir -p /out/home/data") {
		t.Error("the build stage does not make the data directory the images copy")
	}

	c := readCompose(t)
	roles := map[string]string{"ingest": "agentbus", "turn-worker": "agentbus", "tool-worker": "tool-worker", "egress": "agentbus"}
	for svc, target := range roles {
		s, ok := c.Services[svc]
		if !ok {
			t.Errorf("compose has no %s service", svc)
			continue
		}
		if s.Build.Target != target || stages[s.Build.Target] == nil {
			t.Errorf("%s: build target %q, want %q", svc, s.Build.Target, target)
		}
		if len(s.Entrypoint) == 0 || s.Entrypoint[0] != "/usr/local/bin/"+svc {
			t.Errorf("%s: entrypoint %v", svc, s.Entrypoint)
		} else if _, err := os.Stat(filepath.Join("..", "..", "cmd", svc, "main.go")); err != nil {
			t.Errorf("%s: no cmd/%s to build its binary: %v", svc, svc, err)
		}
		for _, n := range []string{"nats1", "nats2", "nats3"} {
			if s.DependsOn[n].Condition != "service_healthy" {
				t.Errorf("%s: starts before %s is healthy (%+v)", svc, n, s.DependsOn)
			}
		}
		if s.Environment["AGENTBUS_NATS_URL"] == "" {
			t.Errorf("%s: no AGENTBUS_NATS_URL", svc)
		}
	}
	var egressVol string
	for _, v := range c.Services["egress"].Volumes {
		if strings.HasPrefix(v, "egress-data:") {
			egressVol = strings.TrimPrefix(v, "egress-data:")
		}
	}
	if egressVol != "/home/nonroot/data" {
		t.Errorf("egress volume mounted on %q, want the image's /home/nonroot/data (owned by its user)", egressVol)
	}
	for _, n := range []string{"nats1", "nats2", "nats3"} {
		if c.Services[n].Healthcheck == nil {
			t.Errorf("%s has no healthcheck", n)
		}
	}

	raw, err := os.ReadFile(filepath.Join("..", "..", ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	ignored := func(p string) bool { // .dockerignore semantics for the paths checked here: last match wins
		out := false
		for _, l := range strings.Split(string(raw), "\n") {
			l = strings.TrimSpace(l)
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			neg := strings.HasPrefix(l, "!")
			pat := strings.TrimSuffix(strings.TrimPrefix(l, "!"), "/")
			match := false
			for q := p; q != "." && q != "/"; q = path.Dir(q) { // a pattern on a directory covers what is under it
				if ok, _ := path.Match(pat, q); ok {
					match = true
				}
				if strings.HasPrefix(pat, "**/") {
					for s := q; ; {
						if ok, _ := path.Match(strings.TrimPrefix(pat, "**/"), s); ok {
							match = true
						}
						i := strings.Index(s, "/")
						if i < 0 {
							break
						}
						s = s[i+1:]
					}
				}
			}
			if match {
				out = !neg
			}
		}
		return out
	}
	for p, want := range map[string]bool{
		"data/nats/jetstream/x": true, "data/transcripts.db": true, "agentbus.yml": true, "deploy/data/x": true, ".env": true,
		"deploy/agentbus.yml": false, "go.mod": false, "cmd/agentbus/main.go": false, "pkg/app/app.go": false, "deploy/nats.conf": false,
	} {
		if got := ignored(p); got != want {
			t.Errorf(".dockerignore: %s ignored = %v, want %v", p, got, want)
		}
	}
}

// /healthz reflects the process: 200 naming the bus and each role while they run, 503 naming
// the bus once the connection is gone.
func TestHealthz(t *testing.T) {
	srv := natstest.New(t, natstest.WithListen())
	dir := t.TempDir()
	cfg, err := config.Parse([]byte("dataDir: " + dir + "\nnats: {url: " + srv.URL + "}\nhealth: {listen: 127.0.0.1:0}\nai: {agent: {workspace: " + filepath.Join(dir, "ws") + "}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := app.Start(context.Background(), cfg, app.Options{Roles: app.Roles{ToolWorker: true, Egress: true}, Out: io.Discard, Log: testLogger(), NoProbe: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	get := func() (int, string) {
		resp, err := http.Get(p.HealthURL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get()
	for _, want := range []string{"nats: connected", "jetstream: ok", "tool-worker: running", "egress: running"} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Fatalf("healthy process: %d %q, want 200 with %q", code, body, want)
		}
	}
	srv.Embedded.Close()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		code, body = get()
		if code == http.StatusServiceUnavailable && strings.Contains(body, "nats: ") && !strings.Contains(body, "nats: connected") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("60s after the server stopped: %d %q", code, body)
		}
	}
}
