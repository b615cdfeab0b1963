package main

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/webconsole"
)

// consoleURL waits until out holds the console's login URL.
func consoleURL(t *testing.T, out *syncBuffer) string {
	t.Helper()
	re := regexp.MustCompile(`Console: +(http://\S+/\?token=[0-9a-f]{64})`)
	var m []string
	testwait.Eventually(t, 0, func() error {
		m = re.FindStringSubmatch(out.String())
		return testwait.Want(m != nil, "no console URL in:\n%s", out.String())
	})
	return m[1]
}

// `agentbus console` against a running agentbus: it finds the bus and its credentials through
// the data directory, generates a token into it (mode 0600), prints the login URL, and the URL
// logs in; without the token the console answers 401.
func TestConsoleCommand(t *testing.T) {
	p := startWithModel(t, fakeopenai.Echo)
	dir := p.Config.DataDir
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- cmdConsole(ctx, []string{"--data", dir, "--listen", "127.0.0.1:0"}, &out) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agentbus console: %v", err)
		}
	})
	login := consoleURL(t, &out)
	st, err := os.Stat(filepath.Join(dir, webconsole.TokenFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, %v (want mode 0600)", st, err)
	}
	base := login[:strings.Index(login, "/?token=")]
	resp, err := http.Get(base + "/sessions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /sessions without token: %d, want 401", resp.StatusCode)
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	resp, err = c.Get(login)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "Overview") {
		t.Fatalf("login URL: %d %.300s", resp.StatusCode, body)
	}
	if strings.Contains(out.String(), "WARNING") {
		t.Errorf("a loopback console printed a warning:\n%s", out.String())
	}
}

// A console bound to a non-loopback address says so.
func TestConsoleWarnsOffLoopback(t *testing.T) {
	if webconsole.IsLoopback("0.0.0.0:8089") || !webconsole.IsLoopback("127.0.0.1:8089") || !webconsole.IsLoopback("[::1]:1") || !webconsole.IsLoopback("localhost:1") {
		t.Fatal("IsLoopback")
	}
	p := startWithModel(t, fakeopenai.Echo)
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- cmdConsole(ctx, []string{"--data", p.Config.DataDir, "--listen", "0.0.0.0:0"}, &out) }()
	consoleURL(t, &out)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "WARNING: the console listens on ") {
		t.Errorf("no warning:\n%s", out.String())
	}
}

func TestConsoleHelp(t *testing.T) {
	var out, errOut strings.Builder
	if code := run([]string{"console", "--help"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
}

// `agentbus up` serves the console on console.listen and prints its login URL.
func TestUpServesConsole(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	dir := t.TempDir()
	yml := "log: {level: error}\nnats:\n  listen: 127.0.0.1:0\nconsole:\n  listen: 127.0.0.1:0\n"
	if err := os.WriteFile(filepath.Join(dir, "agentbus.yml"), []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	p, stdout, _ := startChild(t, dir, "agentbus", "up")
	line := waitLine(t, stdout, "Console:")
	m := regexp.MustCompile(`http://\S+/\?token=[0-9a-f]{64}`).FindString(line)
	if m == "" {
		t.Fatalf("console line %q", line)
	}
	jar, _ := cookiejar.New(nil)
	resp, err := (&http.Client{Jar: jar}).Get(m)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("login URL: %d", resp.StatusCode)
	}
	stopChild(t, p)
}

// docs/console.md: its configuration block loads, and its `agentbus console` command lines use
// flags the command has.
func TestConsoleDocs(t *testing.T) {
	b, err := os.ReadFile("../../docs/console.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(doc, -1)
	if len(blocks) == 0 {
		t.Fatal("no yaml block in docs/console.md")
	}
	t.Setenv("AGENTBUS_CONSOLE_TOKEN", "a-token-of-at-least-16-chars")
	for _, blk := range blocks {
		cfg, err := config.Parse([]byte(blk[1]))
		if err != nil {
			t.Fatalf("docs/console.md block does not load: %v\n%s", err, blk[1])
		}
		if cfg.Console.Listen != config.DefaultConsoleListen || cfg.Console.Token != "a-token-of-at-least-16-chars" {
			t.Errorf("console block: %+v", cfg.Console)
		}
	}
	cmds := regexp.MustCompile(`(?m)^agentbus console( .*)?$`).FindAllString(doc, -1)
	if len(cmds) == 0 {
		t.Fatal("no agentbus console command line in docs/console.md")
	}
	for _, line := range cmds {
		args := append(strings.Fields(line)[1:], "--help")
		var out, errOut strings.Builder
		if code := run(args, &out, &errOut); code != 0 {
			t.Errorf("%s: exit %d: %s", line, code, errOut.String())
		}
	}
}
