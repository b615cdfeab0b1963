//go:build unix

package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestIsolation runs hostile commands in the bubblewrap sandbox: none may
// read the secrets of the process that runs it or write outside the
// workspace.
func TestIsolation(t *testing.T) {
	if i := Probe(); !i.Available {
		t.Skipf("bubblewrap isolation unavailable here (%s); CI installs the Debian package bubblewrap", i.Reason)
	}
	const secret = "sk-parent-secret-0123456789"
	t.Setenv("OPENAI_API_KEY", secret)
	t.Setenv("SOME_SETTING", secret) // not secret-looking by name: still must not pass
	root := workdir(t)
	ws := filepath.Join(root, "ws")
	outside := filepath.Join(root, "outside")
	for _, d := range []string{ws, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(outside, "agentbus.yml")
	if err := os.WriteFile(cfg, []byte("apiKey: "+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hidden := filepath.Join(ws, "data", "creds")
	if err := os.MkdirAll(filepath.Dir(hidden), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hidden, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	self := strconv.Itoa(os.Getpid())
	tests := []struct {
		name, cmd string
	}{
		{"environment", "env"},
		{"init environment", "cat /proc/1/environ"},
		{"parent environment", "cat /proc/$PPID/environ"},
		{"every environ", "cat /proc/*/environ"},
		{"host pid environ", "cat /proc/" + self + "/environ"},
		{"host pid memory", "head -c 100000 /proc/" + self + "/mem"},
		{"host processes", "cat /proc/*/cmdline"},
		{"config file", "cat " + cfg},
		{"config dir", "ls -la " + outside + "; cat " + outside + "/*"},
		{"hidden data", "cat " + hidden + "; ls data"},
		{"shadow", "cat /etc/shadow"},
		{"home", "cat /root/.bash_history ~/.ssh/* 2>&1; ls /root /home"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Run(context.Background(), Spec{Command: tt.cmd, Dir: ws, RequireIsolation: true, Hide: []string{filepath.Dir(hidden)}})
			if err != nil {
				t.Fatal(err)
			}
			if out := res.Stdout + res.Stderr; strings.Contains(out, secret) || strings.Contains(out, "sandbox.test") {
				t.Fatalf("%q leaked a secret of the parent:\n%s", tt.cmd, out)
			}
		})
	}

	writes := []struct {
		name, cmd, mustNotExist string
	}{
		{"parent of workspace", "echo x > ../escape", filepath.Join(root, "escape")},
		{"outside dir", "mkdir -p " + outside + " && echo x > " + outside + "/w", filepath.Join(outside, "w")},
		{"host tmp", "echo x > /tmp/agentbus-sandbox-escape", "/tmp/agentbus-sandbox-escape"},
		{"system dir", "echo x > /usr/agentbus-escape", "/usr/agentbus-escape"},
		{"etc", "echo x >> /etc/passwd; echo x > /etc/agentbus-escape", "/etc/agentbus-escape"},
		{"symlink out", "ln -s " + outside + " out; echo x > out/link", filepath.Join(outside, "link")},
	}
	for _, tt := range writes {
		t.Run("write "+tt.name, func(t *testing.T) {
			before, _ := os.ReadFile("/etc/passwd")
			if _, err := Run(context.Background(), Spec{Command: tt.cmd, Dir: ws, RequireIsolation: true}); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(tt.mustNotExist); err == nil {
				os.Remove(tt.mustNotExist)
				t.Fatalf("%q wrote %s outside the workspace", tt.cmd, tt.mustNotExist)
			}
			if after, _ := os.ReadFile("/etc/passwd"); string(after) != string(before) {
				t.Fatalf("%q changed /etc/passwd", tt.cmd)
			}
		})
	}
	// The control: unconfined, the same command does read the parent.
	plain, err := Run(context.Background(), Spec{Command: "cat " + cfg + "; tr '\\0' ' ' < /proc/$PPID/cmdline", Dir: ws, NoIsolation: true})
	if err != nil || !strings.Contains(plain.Stdout, secret) || !strings.Contains(plain.Stdout, "sandbox.test") {
		t.Fatalf("control: the unconfined run did not see the config file and the parent process (%v), so the test proves nothing", err)
	}
	res, err := Run(context.Background(), Spec{Command: "echo ok > inside && cat inside", Dir: ws, RequireIsolation: true})
	if err != nil || res.Stdout != "ok\n" {
		t.Fatalf("workspace write: %+v %v", res, err)
	}
}

func TestRequireIsolation(t *testing.T) {
	i := Probe()
	if !strings.Contains(i.String(), "bash sandbox") {
		t.Fatalf("status line %q", i.String())
	}
	if HealthLine() == "" {
		t.Fatal("no health line after Probe")
	}
	_, err := Run(context.Background(), Spec{Command: "true", Dir: workdir(t), RequireIsolation: true})
	if i.Available != (err == nil) {
		t.Fatalf("available=%v, Run error %v", i.Available, err)
	}
}
