//go:build unix

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/testwait"
)

func workdir(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestRunBasics(t *testing.T) {
	dir := workdir(t)
	res, err := Run(context.Background(), Spec{Command: "pwd; echo out; echo err >&2; exit 3", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || res.TimedOut || res.Truncated {
		t.Fatalf("result %+v", res)
	}
	if res.Stdout != dir+"\nout\n" || res.Stderr != "err\n" {
		t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
}

func TestRunStdin(t *testing.T) {
	res, err := Run(context.Background(), Spec{Command: "tr a-z A-Z", Dir: workdir(t), Stdin: []byte("hello")})
	if err != nil || res.Stdout != "HELLO" {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestEnvHasNoSecrets(t *testing.T) {
	t.Setenv("FOO_API_KEY", "sk-should-not-leak")
	t.Setenv("GITHUB_TOKEN", "ghp-should-not-leak")
	t.Setenv("NATS_URL", "nats://user:pass@host")
	t.Setenv("DB_PASSWORD", "hunter2")
	t.Setenv("HARMLESS_SETTING", "parent-only")
	dir := workdir(t)
	res, err := Run(context.Background(), Spec{Command: "env", Dir: dir, Env: []string{"VISIBLE=1", "EXTRA_SECRET=nope", "bad entry"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, leak := range []string{"should-not-leak", "hunter2", "user:pass", "FOO_API_KEY", "EXTRA_SECRET", "HARMLESS_SETTING"} {
		if strings.Contains(res.Stdout, leak) {
			t.Errorf("child environment contains %q:\n%s", leak, res.Stdout)
		}
	}
	for _, want := range []string{"VISIBLE=1", "HOME=", "PWD=" + dir, "TERM=dumb", "PATH="} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("child environment lacks %q:\n%s", want, res.Stdout)
		}
	}
	if strings.Contains(res.Stdout, "HOME="+dir+"\n") {
		t.Errorf("HOME is the workspace (dotfiles there would configure programs):\n%s", res.Stdout)
	}
}

// modes are the two ways Run can run a command; the isolated one is
// skipped (with the reason) where bwrap cannot create namespaces.
func modes(t *testing.T) []struct {
	name string
	spec func(Spec) Spec
} {
	return []struct {
		name string
		spec func(Spec) Spec
	}{
		{"plain", func(s Spec) Spec { s.NoIsolation = true; return s }},
		{"bwrap", func(s Spec) Spec { s.RequireIsolation = true; return s }},
	}
}

func skipUnisolated(t *testing.T, name string) {
	t.Helper()
	if name == "bwrap" {
		if i := Probe(); !i.Available {
			t.Skipf("bubblewrap isolation unavailable here (%s); install the Debian package bubblewrap", i.Reason)
		}
	}
}

// markerGone waits until no process on the host has marker in its
// command line (PIDs inside a PID namespace are not the host's).
func markerGone(t *testing.T, marker string) {
	t.Helper()
	testwait.Eventually(t, 0, func() error {
		found := ""
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			if _, err := strconv.Atoi(e.Name()); err != nil {
				continue
			}
			b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			if err == nil && strings.Contains(string(b), marker) && alive(mustAtoi(e.Name())) {
				found = e.Name()
			}
		}
		return testwait.Want(found == "", "process %s (%s) still alive", found, marker)
	})
}

func mustAtoi(s string) int { n, _ := strconv.Atoi(s); return n }

func uniqueSleep() string {
	return fmt.Sprintf("%d.%03d", 30+time.Now().UnixNano()%50, time.Now().UnixNano()%1000)
}

// alive reports whether pid exists and is not a zombie waiting for its
// (possibly non-reaping) new parent.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return err == nil
	}
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(fields) == 0 || fields[0] != "Z"
}

func TestTimeoutKillsProcessGroup(t *testing.T) {
	for _, m := range modes(t) {
		t.Run(m.name, func(t *testing.T) {
			skipUnisolated(t, m.name)
			n := uniqueSleep()
			res, err := Run(context.Background(), m.spec(Spec{
				Command: "sleep " + n + " & sleep " + n,
				Dir:     workdir(t),
				Timeout: 300 * time.Millisecond,
			}))
			if err != nil {
				t.Fatal(err)
			}
			if !res.TimedOut || res.ExitCode != -1 {
				t.Fatalf("result %+v", res)
			}
			markerGone(t, n)
		})
	}
}

func TestBackgroundJobDoesNotOutliveCall(t *testing.T) {
	for _, m := range modes(t) {
		t.Run(m.name, func(t *testing.T) {
			skipUnisolated(t, m.name)
			n := uniqueSleep()
			res, err := Run(context.Background(), m.spec(Spec{Command: "sleep " + n + " & echo started", Dir: workdir(t), Timeout: 10 * time.Second}))
			if err != nil {
				t.Fatal(err)
			}
			if res.TimedOut || res.ExitCode != 0 || !strings.Contains(res.Stdout, "started") {
				t.Fatalf("result %+v", res)
			}
			markerGone(t, n)
		})
	}
}

func TestCancelKillsProcessGroup(t *testing.T) {
	for _, m := range modes(t) {
		t.Run(m.name, func(t *testing.T) {
			skipUnisolated(t, m.name)
			dir := workdir(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				for ctx.Err() == nil {
					if _, err := os.Stat(filepath.Join(dir, "started")); err == nil {
						cancel()
						return
					}
					time.Sleep(10 * time.Millisecond) // a poll off the test goroutine: cancel once the command started
				}
			}()
			n := uniqueSleep()
			res, err := Run(ctx, m.spec(Spec{Command: "sh -c 'sleep " + n + "' & touch started; wait", Dir: dir, Timeout: 20 * time.Second}))
			if err != nil {
				t.Fatal(err)
			}
			if !res.Canceled || res.TimedOut {
				t.Fatalf("result %+v", res)
			}
			markerGone(t, n)
		})
	}
}

func TestOutputCap(t *testing.T) {
	res, err := Run(context.Background(), Spec{Command: "seq 1 100000", Dir: workdir(t), OutputLimit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated {
		t.Fatal("not truncated")
	}
	if len(res.Stdout) > 1100 {
		t.Fatalf("kept %d bytes", len(res.Stdout))
	}
	if !strings.HasPrefix(res.Stdout, "1\n2\n3\n") || !strings.HasSuffix(res.Stdout, "99999\n100000\n") || !strings.Contains(res.Stdout, "bytes truncated") {
		t.Fatalf("head/tail not kept:\n%s", res.Stdout)
	}
}

func TestSpecErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := Run(ctx, Spec{Command: " ", Dir: workdir(t)}); !errors.Is(err, ErrEmptyCommand) {
		t.Fatalf("empty command: %v", err)
	}
	if _, err := Run(ctx, Spec{Command: "ls"}); !errors.Is(err, ErrNoDir) {
		t.Fatalf("no dir: %v", err)
	}
	if _, err := Run(ctx, Spec{Command: "ls", Dir: "/does/not/exist"}); !errors.Is(err, ErrNoDir) {
		t.Fatalf("missing dir: %v", err)
	}
	f := filepath.Join(workdir(t), "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(ctx, Spec{Command: "ls", Dir: f}); !errors.Is(err, ErrNoDir) {
		t.Fatalf("file as dir: %v", err)
	}
	if _, err := Run(ctx, Spec{Command: "ls", Dir: workdir(t), Shell: "/no/such/shell"}); err == nil {
		t.Fatal("missing shell: no error")
	}
}

func TestCapBuffer(t *testing.T) {
	b := newCapBuffer(10)
	for i := 0; i < 100; i++ {
		b.Write([]byte{byte('a' + i%26)})
	}
	s, trunc := b.String()
	if !trunc || !strings.HasPrefix(s, "abcde\n") || !strings.HasSuffix(s, "\nrstuv") {
		t.Fatalf("%q %v", s, trunc)
	}
	b = newCapBuffer(10)
	b.Write([]byte("0123456789"))
	if s, trunc := b.String(); trunc || s != "0123456789" {
		t.Fatalf("%q %v", s, trunc)
	}
	b.Write([]byte("ABCDEFGHIJKLMNOP"))
	if s, _ := b.String(); !strings.HasPrefix(s, "01234\n") || !strings.HasSuffix(s, "LMNOP") {
		t.Fatalf("%q", s)
	}
}

func TestIsSecretName(t *testing.T) {
	for _, n := range []string{"OPENAI_API_KEY", "GITHUB_TOKEN", "DB_PASSWORD", "NATS_URL", "NATS_CREDS", "AWS_ACCESS_KEY_ID", "MY_SECRET", "anthropic_api_key", "AGENTBUS_CONFIG"} {
		if !IsSecretName(n) {
			t.Errorf("%s not treated as secret", n)
		}
	}
	for _, n := range []string{"PATH", "HOME", "LANG", "VISIBLE", "TZ"} {
		if IsSecretName(n) {
			t.Errorf("%s treated as secret", n)
		}
	}
}

func BenchmarkRunTrue(b *testing.B) {
	dir := b.TempDir()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Run(context.Background(), Spec{Command: "true", Dir: dir}); err != nil {
			b.Fatal(err)
		}
	}
}
