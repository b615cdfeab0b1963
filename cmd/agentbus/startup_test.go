package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbus/agentbus/cmd/internal/rolemain"
	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/bench"
	"github.com/agentbus/agentbus/pkg/buildinfo"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

// childEnv, when set, makes the test binary run a main instead of the tests: "agentbus" or
// a role binary's name. The start-up tests run every binary's real main in a child process
// this way, without building the binaries.
const childEnv = "AGENTBUS_TEST_CHILD_MAIN"

var roleOf = map[string]app.Roles{
	"ingest":      {Ingest: true},
	"turn-worker": {TurnWorker: true},
	"tool-worker": {ToolWorker: true},
	"egress":      {Egress: true},
}

func TestMain(m *testing.M) {
	// `agentbus bench --outside` (docs/benchmarks.md) re-executes this binary as its relay.
	if code, ok := bench.ChildMain(); ok {
		os.Exit(code)
	}
	switch name := os.Getenv(childEnv); name {
	case "":
		os.Exit(m.Run())
	case "agentbus":
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	default:
		os.Exit(rolemain.Main(name, roleOf[name]))
	}
}

// child runs binary's main with args in dir and returns its exit code, stdout and stderr.
func child(t *testing.T, dir, binary string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Dir = dir
	cmd.Env = childEnviron(binary)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %s %v: %v", binary, args, err)
	}
	return code, out.String(), errb.String()
}

// childEnviron is the test's environment without what would change the children's
// configuration, plus the child marker.
func childEnviron(binary string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "AGENTBUS_") || strings.HasSuffix(k, "_API_KEY") || k == "OLLAMA_HOST" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, childEnv+"="+binary, "OLLAMA_HOST=http://127.0.0.1:1")
}

// messageLines drops log lines (text and JSON slog records) and returns the rest.
func messageLines(stderr string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if l == "" || strings.HasPrefix(l, "time=") || strings.HasPrefix(l, "{") {
			continue
		}
		out = append(out, l)
	}
	return out
}

// busyPort holds a loopback port for the test's lifetime.
func busyPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// closedPort is a loopback port nothing listens on (it was free a moment ago).
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// Every start-up failure of every binary ends with exit code 1 and one line that names what
// to fix, and never a panic.
func TestStartupFailuresOneLineExit1(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	busy := busyPort(t)
	deadNATS := "nats://" + closedPort(t)
	// quiet keeps `agentbus up`'s info logs out of stderr.
	const quiet = "log: {level: error}\nnats:\n  listen: 127.0.0.1:0\n"
	tests := []struct {
		name   string
		binary string
		files  map[string]string // written into the child's working directory
		args   []string
		want   []string // in the one line
	}{
		{"config typo", "agentbus", map[string]string{"agentbus.yml": quiet + "ai:\n  agnets:\n    zhin: {provider: p}\n"}, []string{"up"},
			[]string{"agentbus: config agentbus.yml:", "ai.agnets (line 5): unknown key (did you mean ai.agents?)"}},
		{"invalid value", "agentbus", map[string]string{"agentbus.yml": quiet + "ai:\n  agent: {concurrency: race}\n"}, []string{"up"},
			[]string{`ai.agent.concurrency "race"`}},
		{"nats port in use", "agentbus", map[string]string{"agentbus.yml": "log: {level: error}\nnats:\n  listen: " + busy + "\n"}, []string{"up"},
			[]string{"nats.listen " + busy + " cannot be used", "set nats.listen to a free port"}},
		{"webhook port in use", "agentbus", map[string]string{"agentbus.yml": quiet + "im:\n  webhook:\n    listen: " + busy + "\n    bots: [{id: b, secret: s}]\n"}, []string{"up"},
			[]string{"ingest: im.webhook.listen " + busy + " cannot be used", "set im.webhook.listen to a free address"}},
		{"unknown tool", "agentbus", map[string]string{"agentbus.yml": quiet + "ai:\n  tools:\n    enabled: [bash, no_such_tool]\n"}, []string{"up"},
			[]string{"tool-worker:", `unknown tool "no_such_tool" in ai.tools`}},
		{"bad tool.md", "agentbus", map[string]string{"agentbus.yml": quiet, "tools/bad.tool.md": "---\nname: x\nbogus: [\n---\nbody\n"}, []string{"up"},
			[]string{"tool-worker:", "tools/bad.tool.md"}},
		{"unreachable nats.url", "agentbus", map[string]string{"agentbus.yml": "log: {level: error}\nnats: {url: " + deadNATS + "}\n"}, []string{"up"},
			[]string{"agentbus: connect to " + deadNATS, "is the NATS server running"}},
		{"missing config file", "agentbus", nil, []string{"up", "--config", "nope.yml"}, []string{"read config", "nope.yml"}},
		{"apiKey variable unset", "agentbus", map[string]string{"agentbus.yml": quiet + "ai:\n  providers:\n    openai: {api: openai-completions, apiKey: \"${AB_TEST_UNSET_KEY}\"}\n"}, []string{"up"},
			[]string{"turn-worker:", "ai.providers.openai.apiKey refers to ${AB_TEST_UNSET_KEY}, which is not set"}},
		{"bad log format", "agentbus", map[string]string{"agentbus.yml": "log: {level: error, format: xml}\nnats:\n  listen: 127.0.0.1:0\n"}, []string{"up"},
			[]string{`log.format "xml": want text or json`}},
	}
	for _, role := range []string{"ingest", "turn-worker", "tool-worker", "egress"} {
		tests = append(tests,
			struct {
				name, binary string
				files        map[string]string
				args, want   []string
			}{role + " unreachable NATS", role, nil, []string{"--nats", deadNATS}, []string{role + ": connect to " + deadNATS, "is the NATS server running"}},
			struct {
				name, binary string
				files        map[string]string
				args, want   []string
			}{role + " without a NATS server", role, nil, nil, []string{role + ": a single role needs a NATS server"}},
			struct {
				name, binary string
				files        map[string]string
				args, want   []string
			}{role + " config typo", role, map[string]string{"agentbus.yml": "nats: {url: " + deadNATS + ", replica: 3}\n"}, nil,
				[]string{role + ": config agentbus.yml:", "nats.replica (line 1): unknown key (did you mean nats.replicas?)"}},
		)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, body := range tt.files {
				p := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			code, stdout, stderr := child(t, dir, tt.binary, tt.args...)
			if code != 1 {
				t.Errorf("exit code %d, want 1", code)
			}
			if strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine ") {
				t.Fatalf("panicked:\n%s", stderr)
			}
			lines := messageLines(stderr)
			if len(lines) != 1 {
				t.Fatalf("want one line on stderr, got %d:\n%s\nstdout:\n%s", len(lines), stderr, stdout)
			}
			for _, w := range tt.want {
				if !strings.Contains(lines[0], w) {
					t.Errorf("line %q lacks %q", lines[0], w)
				}
			}
		})
	}
}

// `agentbus version` and every role's --version print the build's version and revision.
func TestVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	want := buildinfo.Get().String()
	for _, tt := range []struct {
		binary string
		args   []string
	}{{"agentbus", []string{"version"}}, {"ingest", []string{"--version"}}, {"turn-worker", []string{"--version"}},
		{"tool-worker", []string{"--version"}}, {"egress", []string{"--version"}}} {
		code, stdout, stderr := child(t, t.TempDir(), tt.binary, tt.args...)
		if code != 0 || strings.TrimSpace(stdout) != tt.binary+" "+want {
			t.Errorf("%s %v: exit %d, stdout %q (want %q), stderr %q", tt.binary, tt.args, code, stdout, tt.binary+" "+want, stderr)
		}
	}
}

// Two `agentbus up` on one data directory: the second fails at once with one line naming the
// data directory and the pid holding it, and the first keeps running.
func TestDataDirectoryLock(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "agentbus.yml"), []byte("log: {level: error}\nnats:\n  listen: 127.0.0.1:0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	first, stdout, _ := startChild(t, dir, "agentbus", "up")
	waitLine(t, stdout, "agentbus is running.")
	code, _, stderr := child(t, dir, "agentbus", "up")
	lines := messageLines(stderr)
	if code != 1 || len(lines) != 1 || !strings.Contains(lines[0], "already runs on data directory data") ||
		!strings.Contains(lines[0], fmt.Sprintf("pid %d", first.Process.Pid)) {
		t.Fatalf("second up: exit %d, stderr:\n%s", code, stderr)
	}
	url, err := app.ReadURLFile(filepath.Join(dir, "data"))
	if err != nil || !strings.HasPrefix(url, "nats://127.0.0.1:") {
		t.Fatalf("data/nats.url = %q, %v", url, err)
	}
	// The first still serves: chat finds it through the data directory, without flags.
	var out bytes.Buffer
	if err := cmdChat(context.Background(), []string{"--data", filepath.Join(dir, "data"), "--user", "ann", "--wait", "60s"},
		strings.NewReader("hello lock\n"), &out); err != nil || !strings.Contains(out.String(), "hello lock") {
		t.Fatalf("chat through data/nats.url: %v\n%s", err, out.String())
	}
	stopChild(t, first)
	if _, err := os.Stat(filepath.Join(dir, "data", app.URLFile)); !os.IsNotExist(err) {
		t.Errorf("data/nats.url left behind after a clean stop: %v", err)
	}
}

// When 4222 (here: the configured default) is taken, `agentbus up` moves to a free port, says
// which, and records it, so chat without --nats still connects.
func TestUpMovesOffATakenDefaultPort(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	ln, err := net.Listen("tcp", app.DefaultNATSListen)
	if err != nil {
		t.Skipf("%s is in use by something else already: %v", app.DefaultNATSListen, err)
	}
	defer ln.Close()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "agentbus.yml"), []byte("log: {level: error}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, stdout, _ := startChild(t, dir, "agentbus", "up")
	banner := waitLine(t, stdout, "was taken, so the server chose this port")
	if !strings.Contains(banner, app.DefaultNATSListen) {
		t.Errorf("banner line %q", banner)
	}
	var out bytes.Buffer
	if err := cmdChat(context.Background(), []string{"--data", filepath.Join(dir, "data"), "--user", "bo", "--wait", "60s"},
		strings.NewReader("moved?\n"), &out); err != nil || !strings.Contains(out.String(), "moved?") {
		t.Fatalf("chat: %v\n%s", err, out.String())
	}
	stopChild(t, p)
}

// A role started in a fresh directory creates what it needs (egress: its data directory for
// the transcript archive) and runs; SIGTERM stops it with exit code 0.
func TestRoleInFreshDirectory(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	srv := natstest.New(t, natstest.WithListen())
	for _, role := range []string{"egress", "tool-worker"} {
		t.Run(role, func(t *testing.T) {
			dir := t.TempDir()
			p, _, stderr := startChild(t, dir, role, "--nats", srv.URL, "--health", "127.0.0.1:0")
			stderr.wait(t, `"msg":"running"`)
			if role == "egress" {
				if fi, err := os.Stat(filepath.Join(dir, "data")); err != nil || !fi.IsDir() {
					t.Errorf("egress made no data directory: %v", err)
				}
			}
			stopChild(t, p)
		})
	}
}

// lineBuffer collects a child's output and lets a test wait for a line.
type lineBuffer struct {
	ch  chan string
	buf bytes.Buffer
}

func newLineBuffer(r io.Reader) *lineBuffer {
	lb := &lineBuffer{ch: make(chan string, 1024)}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lb.ch <- sc.Text()
		}
		close(lb.ch)
	}()
	return lb
}

func (lb *lineBuffer) wait(t *testing.T, sub string) string {
	t.Helper()
	deadline := time.After(90 * time.Second)
	for {
		select {
		case l, ok := <-lb.ch:
			if !ok {
				t.Fatalf("output ended before %q:\n%s", sub, lb.buf.String())
			}
			lb.buf.WriteString(l + "\n")
			if strings.Contains(l, sub) {
				return l
			}
		case <-deadline:
			t.Fatalf("no %q within 90s:\n%s", sub, lb.buf.String())
		}
	}
}

// startChild starts binary's main in dir; its stdout and stderr can be waited on.
func startChild(t *testing.T, dir, binary string, args ...string) (*exec.Cmd, *lineBuffer, *lineBuffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Dir = dir
	cmd.Env = childEnviron(binary)
	so, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	se, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out, errs := newLineBuffer(so), newLineBuffer(se)
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, out, errs
}

// waitLine waits for a line containing sub on lb.
func waitLine(t *testing.T, lb *lineBuffer, sub string) string {
	t.Helper()
	return lb.wait(t, sub)
}

// stopChild sends SIGTERM and expects a clean exit.
func stopChild(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("did not stop within 60s of SIGTERM")
	}
}
