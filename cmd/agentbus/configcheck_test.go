package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// agentbus config check fails with exactly the line agentbus up fails with, exit 1, for every
// problem up finds before it serves (the file, its values, providers, tools, log:), and
// accepts a valid file with a summary, exit 0, touching nothing (no data directory).
func TestConfigCheckSameErrorsAsUp(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	const quiet = "log: {level: error}\nnats:\n  listen: 127.0.0.1:0\n"
	tests := []struct {
		name  string
		files map[string]string
		want  string // in the line
	}{
		{"unknown key", map[string]string{"agentbus.yml": quiet + "ai:\n  agnets:\n    zhin: {provider: p}\n"}, "did you mean ai.agents?"},
		{"invalid value", map[string]string{"agentbus.yml": quiet + "ai:\n  agent: {concurrency: race}\n"}, `ai.agent.concurrency "race"`},
		{"yaml syntax", map[string]string{"agentbus.yml": quiet + "ai:\n  providers:\n    openai: {api: openai-completions, apiKey: ${OPENAI_API_KEY}}\n"}, "parse yaml"},
		{"unknown api", map[string]string{"agentbus.yml": quiet + "ai:\n  providers:\n    p: {api: openai-chat, apiKey: k}\n"}, `api "openai-chat" is not known`},
		{"unknown compat key", map[string]string{"agentbus.yml": quiet + "ai:\n  providers:\n    p: {api: openai-completions, apiKey: k, compat: {nope: 1}}\n"}, `compat: json: unknown field "nope"`},
		{"apiKey variable unset", map[string]string{"agentbus.yml": quiet + "ai:\n  providers:\n    openai: {api: openai-completions, apiKey: \"${AB_TEST_UNSET_KEY}\"}\n"}, "which is not set"},
		{"unknown tool", map[string]string{"agentbus.yml": quiet + "ai:\n  tools:\n    enabled: [bash, no_such_tool]\n"}, `unknown tool "no_such_tool"`},
		{"web search backend", map[string]string{"agentbus.yml": quiet + "ai:\n  agent:\n    webSearch: {backend: google}\n"}, `want searxng`},
		{"bad tool.md", map[string]string{"agentbus.yml": quiet, "tools/bad.tool.md": "---\nname: x\nbogus: [\n---\nbody\n"}, "tools/bad.tool.md"},
		{"bad log format", map[string]string{"agentbus.yml": "log: {level: error, format: xml}\nnats:\n  listen: 127.0.0.1:0\n"}, `log.format "xml"`},
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
			code, stdout, stderr := child(t, dir, "agentbus", "config", "check")
			if code != 1 || stdout != "" {
				t.Fatalf("config check: exit %d, stdout %q, want 1 and nothing", code, stdout)
			}
			if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
				t.Errorf("config check created a data directory")
			}
			check := messageLines(stderr)
			upCode, _, upStderr := child(t, dir, "agentbus", "up")
			up := messageLines(upStderr)
			if upCode != 1 || len(up) != 1 || len(check) != 1 {
				t.Fatalf("want one line and exit 1 from both:\nconfig check:\n%s\nup (exit %d):\n%s", stderr, upCode, upStderr)
			}
			if check[0] != up[0] {
				t.Errorf("config check and up say different things:\ncheck: %s\nup:    %s", check[0], up[0])
			}
			if !strings.Contains(check[0], tt.want) || !strings.HasPrefix(check[0], "agentbus: ") {
				t.Errorf("line %q lacks %q", check[0], tt.want)
			}
		})
	}
	t.Run("valid", func(t *testing.T) {
		dir := t.TempDir()
		cfg := "ai:\n  providers:\n    main: {api: openai-completions, apiKey: \"${AB_TEST_KEY}\"}\n  agents:\n    zhin: {provider: main, model: m1}\n" +
			"im:\n  webhook:\n    bots: [{id: b1, secret: s}]\n"
		if err := os.WriteFile(filepath.Join(dir, "my.yml"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Setenv("AB_TEST_KEY", "k") // childEnviron drops *_API_KEY only
		code, stdout, stderr := child(t, dir, "agentbus", "config", "check", "my.yml")
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, stderr)
		}
		for _, want := range []string{"config my.yml: valid", "providers: main (openai-completions)", "zhin → main/m1", "webhook 1"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("summary lacks %q:\n%s", want, stdout)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
			t.Errorf("config check created a data directory")
		}
	})
	t.Run("usage", func(t *testing.T) {
		if code, _, _ := child(t, t.TempDir(), "agentbus", "config"); code != 64 {
			t.Errorf("agentbus config: exit %d, want 64", code)
		}
		if code, stdout, _ := child(t, t.TempDir(), "agentbus", "config", "check", "--help"); code != 0 || !strings.Contains(stdout, "agentbus config check [FILE]") {
			t.Errorf("agentbus config check --help: exit %d, stdout %q", code, stdout)
		}
	})
}
