package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/nats-io/nats.go"
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
	// No URL: chat, sessions and replay find the server and its credentials in the data dir.
	data := p.Config.DataDir
	var out bytes.Buffer
	in := strings.NewReader("hello agentbus\n/health\nplease call list_dir\n")
	if err := cmdChat(context.Background(), []string{"--data", data, "--user", "ann", "--wait", "90s"}, in, &out); err != nil {
		t.Fatalf("chat: %v\n%s", err, out.String())
	}
	for _, want := range []string{"hello agentbus", "ok — worker", "list_dir"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("chat output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := cmdSessions(context.Background(), []string{"--data", data}, &out); err != nil || !strings.Contains(out.String(), "console:console:private:ann") {
		t.Errorf("sessions: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := cmdReplay(context.Background(), []string{"--data", data, "console:console:private:ann"}, &out); err != nil {
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

// Without configured credentials the embedded server still refuses anonymous clients: the
// generated ones are in the data directory, mode 0600, and nothing else gets in.
func TestEmbeddedServerRefusesAnonymous(t *testing.T) {
	p := startUp(t)
	url := p.Embedded.ClientURL()
	path := filepath.Join(p.Config.DataDir, natsutil.CredentialsFile)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %o, want 600", path, fi.Mode().Perm())
	}
	creds, err := natsutil.ReadCredentials(path)
	if err != nil || creds.URL != url {
		t.Fatalf("credentials %+v, %v; want url %s", creds, err, url)
	}
	for name, opts := range map[string][]nats.Option{
		"anonymous":      nil,
		"wrong password": {nats.UserInfo(creds.User, "guess")},
		"token":          {nats.Token(creds.Password)},
	} {
		if nc, err := nats.Connect(url, opts...); err == nil {
			nc.Close()
			t.Errorf("%s client was let in", name)
		}
	}
	var out bytes.Buffer
	if err := cmdSessions(context.Background(), []string{"--nats", url, "--data", t.TempDir()}, &out); err == nil {
		t.Error("sessions without the credentials file was let in")
	}
	// A credentials file others can read is refused rather than used.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cmdSessions(context.Background(), []string{"--data", p.Config.DataDir}, &out); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Errorf("sessions with a 0644 credentials file: %v", err)
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
