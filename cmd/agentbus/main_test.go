package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/config"
)

// startUp runs what `agentbus up` runs, on a free port, with the demo model.
func startUp(t *testing.T) *app.Process {
	t.Helper()
	dir := t.TempDir()
	cfg, err := config.Parse([]byte("dataDir: " + dir + "\nnats:\n  listen: 127.0.0.1:0\n  storeDir: " + filepath.Join(dir, "nats") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.AI.Agent.Workspace = filepath.Join(dir, "workspace")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	p, err := app.Start(ctx, cfg, app.Options{Roles: app.AllRoles, Out: io.Discard, NoProbe: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	return p
}

// A newcomer's first minute: up, then chat in another terminal, then look at the session.
func TestUpChatSessionsReplay(t *testing.T) {
	p := startUp(t)
	url := p.Embedded.ClientURL()
	var out bytes.Buffer
	in := strings.NewReader("hello agentbus\n/health\nplease call list_dir\n")
	if err := cmdChat(context.Background(), []string{"--nats", url, "--user", "ann", "--wait", "90s"}, in, &out); err != nil {
		t.Fatalf("chat: %v\n%s", err, out.String())
	}
	for _, want := range []string{"hello agentbus", "ok — worker", "list_dir"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("chat output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := cmdSessions(context.Background(), []string{"--nats", url}, &out); err != nil || !strings.Contains(out.String(), "console:console:private:ann") {
		t.Errorf("sessions: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := cmdReplay(context.Background(), []string{"--nats", url, "console:console:private:ann"}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"── turn", "user: hello agentbus", "→ list_dir(", "← list_dir", "✓ committed"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("replay lacks %q:\n%s", want, out.String())
		}
	}
}

func TestExecPolicyCLIExitCodes(t *testing.T) {
	tests := []struct {
		args []string
		code int
	}{
		{[]string{"exec-policy", "check", "--mode", "allowlist", "--preset", "readonly", "--", "ls -la"}, 0},
		{[]string{"exec-policy", "check", "--mode", "full", "--", "sudo rm -rf /"}, 1},
		{[]string{"exec-policy", "check", "--mode", "allowlist", "--approval", "ask", "--", "npm install"}, 2},
		{[]string{"nope"}, 64},
	}
	for _, tt := range tests {
		var o, e bytes.Buffer
		if got := run(tt.args, &o, &e); got != tt.code {
			t.Errorf("%v: exit %d, want %d (%s%s)", tt.args, got, tt.code, o.String(), e.String())
		}
	}
}

// With nats.token set, the embedded server refuses clients without it, and chat works with it
// in the URL.
func TestEmbeddedServerToken(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.Parse([]byte("dataDir: " + dir + "\nnats:\n  listen: 127.0.0.1:0\n  token: s3cret\n  storeDir: " + filepath.Join(dir, "nats") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.AI.Agent.Workspace = filepath.Join(dir, "workspace")
	p, err := app.Start(context.Background(), cfg, app.Options{Roles: app.AllRoles, Out: io.Discard, NoProbe: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	url := p.Embedded.ClientURL()
	var out bytes.Buffer
	if err := cmdSessions(context.Background(), []string{"--nats", url}, &out); err == nil {
		t.Fatal("a client without the token was let in")
	}
	withToken := strings.Replace(url, "nats://", "nats://s3cret@", 1)
	if err := cmdChat(context.Background(), []string{"--nats", withToken, "--user", "ann", "--wait", "90s"}, strings.NewReader("hi\n"), &out); err != nil {
		t.Fatalf("chat with token: %v\n%s", err, out.String())
	}
}
