package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/execpolicy"
	"github.com/agentbus/agentbus/pkg/filepolicy"
	"github.com/agentbus/agentbus/pkg/netguard"
	"github.com/agentbus/agentbus/pkg/sandbox"
	"github.com/agentbus/agentbus/pkg/skills"
	"github.com/agentbus/agentbus/pkg/tools"
)

type fixture struct {
	ws    string
	tools map[string]tools.Tool
}

func newFixture(t *testing.T, mut func(*Config)) *fixture {
	t.Helper()
	root := t.TempDir()
	ws := filepath.Join(root, "ws")
	fp, err := filepolicy.New(filepolicy.Options{Workspace: ws, Home: filepath.Join(root, "home")})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Files: fp, Log: slog.New(slog.DiscardHandler)}
	if mut != nil {
		mut(&cfg)
	}
	ts, err := All(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{ws: fp.Workspace(), tools: map[string]tools.Tool{}}
	for _, tl := range ts {
		f.tools[tl.Name] = tl
	}
	return f
}

func (f *fixture) call(t *testing.T, name string, args map[string]any) tools.Result {
	t.Helper()
	return f.callEnv(t, name, args, tools.Env{})
}

func (f *fixture) callEnv(t *testing.T, name string, args map[string]any, env tools.Env) tools.Result {
	t.Helper()
	tl, ok := f.tools[name]
	if !ok {
		t.Fatalf("tool %s not built", name)
	}
	if _, err := json.Marshal(args); err != nil {
		t.Fatal(err)
	}
	return tl.Run(context.Background(), tools.Call{ID: "c1", Args: args, Env: env})
}

func want(t *testing.T, r tools.Result, isErr bool, substr ...string) {
	t.Helper()
	if r.IsError != isErr {
		t.Errorf("IsError = %v, want %v: %s", r.IsError, isErr, r.Text())
	}
	for _, s := range substr {
		if !strings.Contains(r.Text(), s) {
			t.Errorf("result lacks %q:\n%s", s, r.Text())
		}
	}
}

func TestFileTools(t *testing.T) {
	f := newFixture(t, nil)
	want(t, f.call(t, "write_file", map[string]any{"path": "src/a.go", "content": "package a\n\nfunc A() {}\nfunc B() {}\n"}), false, "Wrote 35 bytes to src/a.go")
	want(t, f.call(t, "write_file", map[string]any{"path": "src/a.go", "content": "// end\n", "append": true}), false, "Appended")
	want(t, f.call(t, "read_file", map[string]any{"path": "src/a.go"}), false, "func A() {}", "// end")
	want(t, f.call(t, "read_file", map[string]any{"path": "src/a.go", "offset": 3, "limit": 1}), false, "func A() {}\n\n[showing lines 3-3")
	want(t, f.call(t, "read_file", map[string]any{"path": "src"}), true, "directory")
	want(t, f.call(t, "read_file", map[string]any{"path": "missing.txt"}), true, "no such file")

	// edit_file uniqueness
	want(t, f.call(t, "edit_file", map[string]any{"path": "src/a.go", "old_string": "func", "new_string": "fn"}), true, "occurs 2 times")
	want(t, f.call(t, "edit_file", map[string]any{"path": "src/a.go", "old_string": "nope", "new_string": "x"}), true, "not found")
	want(t, f.call(t, "edit_file", map[string]any{"path": "src/a.go", "old_string": "func A", "new_string": "func Alpha"}), false, "Replaced 1")
	want(t, f.call(t, "edit_file", map[string]any{"path": "src/a.go", "old_string": "func", "new_string": "fn", "replace_all": true}), false, "Replaced 2")
	data, _ := os.ReadFile(filepath.Join(f.ws, "src/a.go"))
	if string(data) != "package a\n\nfn Alpha() {}\nfn B() {}\n// end\n" {
		t.Fatalf("after edits: %q", data)
	}

	os.WriteFile(filepath.Join(f.ws, "src/b_test.go"), []byte("package a\n// TODO: test B\n"), 0o644)
	os.MkdirAll(filepath.Join(f.ws, "docs/deep/er"), 0o755)
	os.WriteFile(filepath.Join(f.ws, "docs/deep/er/x.md"), []byte("todo: docs\n"), 0o644)
	os.WriteFile(filepath.Join(f.ws, ".env"), []byte("API_KEY=TODO-secret\n"), 0o644)
	os.WriteFile(filepath.Join(f.ws, "bin.dat"), []byte("TODO\x00\x01"), 0o644)

	want(t, f.call(t, "list_dir", map[string]any{}), false, "src/", "docs/", "bin.dat\t6")
	want(t, f.call(t, "glob", map[string]any{"pattern": "**/*.go"}), false, "src/a.go\nsrc/b_test.go")
	want(t, f.call(t, "glob", map[string]any{"pattern": "**/x.md"}), false, "docs/deep/er/x.md")
	want(t, f.call(t, "glob", map[string]any{"pattern": "*.go", "path": "src"}), false, "a.go\nb_test.go")
	want(t, f.call(t, "glob", map[string]any{"pattern": "[bad"}), true, "bad pattern")

	r := f.call(t, "grep", map[string]any{"pattern": "todo", "ignore_case": true})
	want(t, r, false, "src/b_test.go:2: // TODO: test B", "docs/deep/er/x.md:1: todo: docs")
	if strings.Contains(r.Text(), "secret") || strings.Contains(r.Text(), "bin.dat") {
		t.Errorf("grep read a secret or binary file:\n%s", r.Text())
	}
	want(t, f.call(t, "grep", map[string]any{"pattern": "TODO", "glob": "**/*.go"}), false, "b_test.go:2")
	want(t, f.call(t, "grep", map[string]any{"pattern": "(", "path": "src"}), true, "bad pattern")
	want(t, f.call(t, "grep", map[string]any{"pattern": "package", "max_results": 1}), false, "[stopped after 1 matches")
}

func TestFileToolsRespectPolicy(t *testing.T) {
	f := newFixture(t, nil)
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("s3cret"), 0o644)
	os.Symlink(outside, filepath.Join(f.ws, "escape"))
	os.WriteFile(filepath.Join(f.ws, ".env"), []byte("K=v"), 0o644)
	cases := []struct {
		tool string
		args map[string]any
	}{
		{"read_file", map[string]any{"path": "../outside.txt"}},
		{"read_file", map[string]any{"path": filepath.Join(outside, "secret.txt")}},
		{"read_file", map[string]any{"path": "escape/secret.txt"}},
		{"read_file", map[string]any{"path": ".env"}},
		{"read_file", map[string]any{"path": "/proc/self/environ"}},
		{"write_file", map[string]any{"path": "escape/new.txt", "content": "x"}},
		{"write_file", map[string]any{"path": "/etc/passwd", "content": "x"}},
		{"edit_file", map[string]any{"path": "escape/secret.txt", "old_string": "s3", "new_string": "x"}},
		{"list_dir", map[string]any{"path": "escape"}},
		{"glob", map[string]any{"pattern": "*", "path": ".."}},
		{"grep", map[string]any{"pattern": ".", "path": "escape"}},
	}
	for _, c := range cases {
		r := f.call(t, c.tool, c.args)
		if !r.IsError || !strings.Contains(r.Text(), "refused") {
			t.Errorf("%s %v: want refusal, got %s", c.tool, c.args, r.Text())
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "new.txt")); err == nil {
		t.Fatal("write through a symlink escaped the workspace")
	}
	// The walk of grep does not follow the escape link either.
	if r := f.call(t, "grep", map[string]any{"pattern": "s3cret"}); strings.Contains(r.Text(), "secret.txt") {
		t.Errorf("grep followed a symlink out: %s", r.Text())
	}
}

func TestMatchGlob(t *testing.T) {
	cases := []struct {
		pat, name string
		ok        bool
	}{
		{"**/*.go", "a.go", true},
		{"**/*.go", "x/y/a.go", true},
		{"src/**", "src/a/b", true},
		{"src/**/test/*.ts", "src/test/a.ts", true},
		{"src/**/test/*.ts", "src/a/b/test/a.ts", true},
		{"src/**/test/*.ts", "src/a/b/tests/a.ts", false},
		{"*.go", "x/a.go", false},
		{"a/*/c", "a/b/c", true},
		{"a/*/c", "a/b/b/c", false},
		{"**", "anything/at/all", true},
	}
	for _, c := range cases {
		if got := MatchGlob(c.pat, c.name); got != c.ok {
			t.Errorf("MatchGlob(%q, %q) = %v", c.pat, c.name, got)
		}
	}
}

// verdictChecker returns a fixed verdict: the exec policy's judgment is tested in its own
// package; here only the bash tool's handling of each decision is.
type verdictChecker struct {
	v    execpolicy.Verdict
	seen *[]string
}

func (c verdictChecker) Check(cmd string, ap *execpolicy.Approvals) execpolicy.Verdict {
	if c.seen != nil {
		*c.seen = append(*c.seen, cmd)
	}
	return c.v
}

func TestBash(t *testing.T) {
	allow := newFixture(t, func(c *Config) {
		c.Exec = verdictChecker{v: execpolicy.Verdict{Decision: execpolicy.Allow, Reason: "allowlisted"}}
	})
	want(t, allow.call(t, "bash", map[string]any{"command": "echo hello; echo oops >&2; pwd"}), false, "hello", "[stderr]\noops", allow.ws, "[exit code 0]")
	r := allow.call(t, "bash", map[string]any{"command": "exit 3"})
	want(t, r, true, "[exit code 3]")
	r = allow.call(t, "bash", map[string]any{"command": "echo $OPENAI_API_KEY-$HOME", "timeout_seconds": 5})
	if strings.Contains(r.Text(), "sk-test") {
		t.Fatal("secret leaked into bash")
	}
	r = allow.call(t, "bash", map[string]any{"command": "sleep 5", "timeout_seconds": 1})
	want(t, r, true, "timed out after 1s")

	ask := newFixture(t, func(c *Config) {
		c.Exec = verdictChecker{v: execpolicy.Verdict{Decision: execpolicy.Ask, Reason: "npm is not in the allowlist", Pending: []string{"npm install"}}}
	})
	r = ask.call(t, "bash", map[string]any{"command": "npm install"})
	want(t, r, true, execpolicy.OwnerApprovalSignal, "NOT run", "ask_user", "npm install")
	if !r.NeedsOwner {
		t.Error("Ask verdict must set NeedsOwner")
	}

	deny := newFixture(t, func(c *Config) {
		c.Exec = verdictChecker{v: execpolicy.Verdict{Decision: execpolicy.Deny, Reason: "sudo is on the hard blocklist"}}
	})
	r = deny.call(t, "bash", map[string]any{"command": "sudo rm -rf /"})
	want(t, r, true, "refused by the exec policy: sudo is on the hard blocklist")
	if r.NeedsOwner {
		t.Error("Deny must not ask the owner")
	}
}

func TestBashWithRealPolicyDenyMode(t *testing.T) {
	f := newFixture(t, func(c *Config) {
		p, err := execpolicy.New(execpolicy.Options{Mode: execpolicy.ModeDeny})
		if err != nil {
			t.Fatal(err)
		}
		c.Exec = p
	})
	want(t, f.call(t, "bash", map[string]any{"command": "touch pwned"}), true, "refused by the exec policy")
	if _, err := os.Stat(filepath.Join(f.ws, "pwned")); err == nil {
		t.Fatal("denied command ran")
	}
}

func TestBashAbsentWithoutPolicy(t *testing.T) {
	f := newFixture(t, nil)
	if _, ok := f.tools["bash"]; ok {
		t.Fatal("bash must be absent without an exec policy")
	}
	if _, ok := f.tools["web_search"]; ok {
		t.Fatal("web_search must be absent without a backend")
	}
}

func TestWebFetch(t *testing.T) {
	page := `<!doctype html><html><head><title>Test &amp; Page</title><style>body{color:red}</style>
<script>alert("x")</script></head><body><h1>Hello</h1><p>Some <b>bold</b> text and a <a href="/next">link</a>.</p>
<ul><li>one</li><li>two</li></ul><noscript>enable js</noscript></body></html>`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/json":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"a":1}`)
		case "/bin":
			w.Header().Set("Content-Type", "image/png")
			w.Write([]byte{0x89, 'P', 'N', 'G', 0})
		case "/404":
			http.Error(w, "gone", http.StatusNotFound)
		case "/big":
			fmt.Fprint(w, strings.Repeat("word ", 10000))
		default:
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, page)
		}
	}))
	defer srv.Close()

	blocked := newFixture(t, nil)
	want(t, blocked.call(t, "web_fetch", map[string]any{"url": srv.URL}), true, "refused", "loopback")

	f := newFixture(t, func(c *Config) { c.Guard = netguard.MustNew(netguard.Config{AllowHosts: []string{"127.0.0.1"}}) })
	r := f.call(t, "web_fetch", map[string]any{"url": srv.URL + "/page"})
	want(t, r, false, "Title: Test & Page", "# Hello", "Some bold text and a [link]("+srv.URL+"/next).", "- one\n- two")
	for _, bad := range []string{"alert", "color:red", "enable js"} {
		if strings.Contains(r.Text(), bad) {
			t.Errorf("page text contains %q:\n%s", bad, r.Text())
		}
	}
	want(t, f.call(t, "web_fetch", map[string]any{"url": srv.URL + "/json"}), false, `{"a":1}`)
	want(t, f.call(t, "web_fetch", map[string]any{"url": srv.URL + "/bin"}), true, "unsupported content type")
	want(t, f.call(t, "web_fetch", map[string]any{"url": srv.URL + "/404"}), true, "Status: 404")
	want(t, f.call(t, "web_fetch", map[string]any{"url": srv.URL + "/big", "max_chars": 100}), false, "[truncated at 100 characters of 50000]")
}

type mapResolver map[string]string

func (m mapResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	if a, ok := m[host]; ok {
		return []net.IPAddr{{IP: net.ParseIP(a)}}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func TestWebFetchRedirectToLoopbackBlocked(t *testing.T) {
	hits := 0
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits++; fmt.Fprint(w, "secret") }))
	defer internal.Close()
	public := httptest.NewServer(http.RedirectHandler(internal.URL+"/admin", http.StatusFound))
	defer public.Close()
	_, port, _ := net.SplitHostPort(public.Listener.Addr().String())
	f := newFixture(t, func(c *Config) {
		c.Guard = netguard.MustNew(netguard.Config{AllowHosts: []string{"public.example"}, Resolver: mapResolver{"public.example": "127.0.0.1"}})
	})
	want(t, f.call(t, "web_fetch", map[string]any{"url": "http://public.example:" + port + "/"}), true, "refused", "redirect to", "loopback")
	if hits != 0 {
		t.Fatal("the loopback target was reached")
	}
}

func TestHTMLToText(t *testing.T) {
	base, _ := url.Parse("https://ex.com/dir/page")
	cases := []struct{ in, title, text string }{
		{"<p>a</p><p>b</p>", "", "a\n\nb"},
		{"<title> T </title><div>x<br>y</div>", "T", "x\ny"},
		{"<pre>  keep\n   this</pre>", "", "keep\n   this"},
		{`<a href="x.html">rel</a> <a href="javascript:alert(1)">js</a> <a href="#top">top</a>`, "", "[rel](https://ex.com/dir/x.html) js top"},
		{"<table><tr><td>a</td><td>b</td></tr></table>", "", "| a | b"},
		{"<p>unclosed <b>bold", "", "unclosed bold"},
		{"<h2>Sub</h2>text", "", "## Sub\n\ntext"},
		{"&lt;tag&gt; &amp; &#20320;", "", "<tag> & 你"},
		{`<img alt="cat"><svg><text>no</text></svg>`, "", "[image: cat]"},
	}
	for _, c := range cases {
		title, text := HTMLToText(strings.NewReader(c.in), base)
		if title != c.title || text != c.text {
			t.Errorf("HTMLToText(%q) = %q, %q; want %q, %q", c.in, title, text, c.title, c.text)
		}
	}
}

func TestWebSearchSearxNG(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/search" || r.URL.Query().Get("format") != "json" || r.URL.Query().Get("q") != "nats jetstream" {
			http.Error(w, "bad request "+r.URL.String(), 400)
			return
		}
		fmt.Fprint(w, `{"query":"nats jetstream","results":[
{"title":"JetStream","url":"https://docs.nats.io/jetstream","content":"Persistence   for NATS","engine":"ddg"},
{"title":"Second","url":"https://example.com/2","content":""},
{"title":"Third","url":"https://example.com/3"}]}`)
	}))
	defer srv.Close()
	be, err := NewSearchBackend(config.WebSearch{Backend: "searxng", URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(c *Config) { c.Search = be })
	r := f.call(t, "web_search", map[string]any{"query": "nats jetstream", "limit": 2})
	want(t, r, false, "1. JetStream\n   https://docs.nats.io/jetstream\n   Persistence for NATS", "2. Second")
	if strings.Contains(r.Text(), "Third") {
		t.Error("limit ignored")
	}
	if be, err := NewSearchBackend(config.WebSearch{}); be != nil || err != nil {
		t.Errorf("no backend configured: %v %v", be, err)
	}
	if _, err := NewSearchBackend(config.WebSearch{Backend: "bing"}); err == nil {
		t.Error("unknown backend accepted")
	}
}

func TestAskUser(t *testing.T) {
	f := newFixture(t, nil)
	r := f.call(t, "ask_user", map[string]any{"question": "Run npm install?", "options": []any{"yes", "no"}})
	d, ok := tools.AskQuestion(r)
	if !ok || d.Ask != "Run npm install?" || !slices.Equal(d.Options, []string{"yes", "no"}) || r.IsError {
		t.Fatalf("%+v %v %s", d, ok, r.Details)
	}
	want(t, f.call(t, "ask_user", map[string]any{"question": " "}), true, "required")
}

const skillMD = "---\nname: greeter\ndescription: Greets people\ntools: [ask_user]\nkeywords: [hello]\n---\n# Greeter\nintro\n## Quick Actions\n1. say hi\n## Details\nlong text\n"

func TestSkillTools(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/greeter/SKILL.md":
			fmt.Fprint(w, skillMD)
		case "/bad/SKILL.md":
			fmt.Fprint(w, "---\nname: Bad Name\ndescription: x\n---\n")
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	skillsDir := filepath.Join(t.TempDir(), "skills")
	store := skills.NewStore(slog.New(slog.DiscardHandler), skillsDir)
	f := newFixture(t, func(c *Config) {
		c.Skills, c.SkillsDir = store, skillsDir
		c.Guard = netguard.MustNew(netguard.Config{AllowHosts: []string{"127.0.0.1"}})
	})
	master := tools.Env{SenderRoles: []string{tools.RoleMaster}, ModelID: "qwen3:8b"}
	tl := f.tools["install_skill"]
	if tl.AllowedFor(tools.Env{SenderRoles: []string{tools.RoleUser}}) {
		t.Error("install_skill must be gated to master/trusted by default")
	}
	want(t, f.callEnv(t, "activate_skill", map[string]any{"name": "greeter"}, master), true, "not found")
	want(t, f.callEnv(t, "install_skill", map[string]any{"url": srv.URL + "/greeter/SKILL.md"}, master), false, `Installed skill "greeter"`)
	if _, err := os.Stat(filepath.Join(skillsDir, "greeter", "SKILL.md")); err != nil {
		t.Fatal(err)
	}
	want(t, f.callEnv(t, "install_skill", map[string]any{"url": srv.URL + "/greeter/SKILL.md"}, master), true, "already installed")
	want(t, f.callEnv(t, "install_skill", map[string]any{"url": srv.URL + "/greeter/SKILL.md", "overwrite": true}, master), false, "Installed")
	want(t, f.callEnv(t, "install_skill", map[string]any{"url": srv.URL + "/bad/SKILL.md"}, master), true, "field name")
	want(t, f.callEnv(t, "install_skill", map[string]any{"url": srv.URL + "/missing"}, master), true, "HTTP 404")

	// small model: intro + quick actions only
	r := f.callEnv(t, "activate_skill", map[string]any{"name": "greeter"}, master)
	want(t, r, false, "# Skill: greeter", "1. say hi", "Tools for this skill: ask_user")
	if strings.Contains(r.Text(), "long text") {
		t.Error("small model got the full skill")
	}
	r = f.callEnv(t, "activate_skill", map[string]any{"name": "greeter"}, tools.Env{ModelID: "gpt-4o"})
	want(t, r, false, "long text")

	// install_skill goes through the SSRF guard like web_fetch.
	guarded := newFixture(t, func(c *Config) { c.Skills, c.SkillsDir = store, skillsDir })
	want(t, guarded.callEnv(t, "install_skill", map[string]any{"url": srv.URL + "/greeter/SKILL.md"}, master), true, "refused", "loopback")
}

func TestGithubRaw(t *testing.T) {
	if got := githubRaw("https://github.com/o/r/blob/main/skills/x/SKILL.md"); got != "https://raw.githubusercontent.com/o/r/main/skills/x/SKILL.md" {
		t.Error(got)
	}
	if got := githubRaw("https://example.com/a"); got != "https://example.com/a" {
		t.Error(got)
	}
}

func TestEnabledDisabled(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Disabled = []string{"web_fetch"} })
	if _, ok := f.tools["web_fetch"]; ok {
		t.Error("disabled tool present")
	}
	f = newFixture(t, func(c *Config) { c.Enabled = []string{"read_file"} })
	if len(f.tools) != 1 {
		t.Errorf("enabled list: %d tools", len(f.tools))
	}
	if _, err := All(Config{Disabled: []string{"nope"}}); err == nil {
		t.Error("unknown tool name accepted")
	}
}

func TestFromConfig(t *testing.T) {
	cfg, err := config.Parse([]byte("ai:\n  agent:\n    webFetch: {allowHosts: [wiki.corp]}\n    webSearch: {backend: searxng, url: 'http://127.0.0.1:8888'}\n  tools:\n    disabled: [install_skill]\n"))
	if err != nil {
		t.Fatal(err)
	}
	store := skills.NewStore(slog.New(slog.DiscardHandler), t.TempDir())
	c, err := FromConfig(cfg.AI, nil, nil, store)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := All(c)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range ts {
		names = append(names, tl.Name)
	}
	if got := strings.Join(names, " "); got != "web_fetch web_search ask_user activate_skill" {
		t.Fatalf("tools = %s", got)
	}
	if c.BashTimeout != 30*time.Second || c.SkillsDir != "skills" {
		t.Fatalf("%+v", c)
	}
	cfg.AI.Agent.WebSearch.Backend = "nope"
	if _, err := FromConfig(cfg.AI, nil, nil, nil); err == nil {
		t.Fatal("bad backend accepted")
	}
}

// TestBashWithRealPolicy drives the bash tool with the real exec policy in allowlist mode:
// read-only commands run, unknown ones ask the owner, blocklisted ones are refused, and an
// owner approval rule turns an ask into a run.
func TestBashWithRealPolicy(t *testing.T) {
	var rules *execpolicy.Approvals
	f := newFixture(t, func(c *Config) {
		p, err := execpolicy.New(execpolicy.Options{Mode: execpolicy.ModeAllowlist, Preset: "readonly", Approval: execpolicy.ApprovalAsk, Files: c.Files})
		if err != nil {
			t.Fatal(err)
		}
		c.Exec = p
		c.Approvals = func(context.Context, tools.Env) (*execpolicy.Approvals, error) { return rules, nil }
	})
	os.WriteFile(filepath.Join(f.ws, "a.txt"), []byte("alpha\nbeta\n"), 0o644)
	want(t, f.call(t, "bash", map[string]any{"command": "cat a.txt | grep beta"}), false, "beta", "[exit code 0]")
	r := f.call(t, "bash", map[string]any{"command": "touch b.txt"})
	want(t, r, true, execpolicy.OwnerApprovalSignal)
	if !r.NeedsOwner {
		t.Fatalf("ask verdict without NeedsOwner: %s", r.Text())
	}
	want(t, f.call(t, "bash", map[string]any{"command": "sudo cat /etc/shadow"}), true, "refused by the exec policy")
	rules = &execpolicy.Approvals{Version: execpolicy.ApprovalsVersion}
	if _, err := rules.AddRule(`^touch\s+b\.txt$`, "owner", time.Now()); err != nil {
		t.Fatal(err)
	}
	want(t, f.call(t, "bash", map[string]any{"command": "touch b.txt"}), false, "[exit code 0]")
	if _, err := os.Stat(filepath.Join(f.ws, "b.txt")); err != nil {
		t.Fatal("approved command did not run")
	}
}

// TestFileToolsTraversal: paths that reach outside the workspace through a
// component that does not exist followed by "..", through symlinks, or
// into secrets and program configuration are refused by every file tool,
// and nothing is created outside.
func TestFileToolsTraversal(t *testing.T) {
	f := newFixture(t, nil)
	root := filepath.Dir(f.ws)
	outside := filepath.Join(root, "outside")
	home := filepath.Join(root, "home")
	for _, d := range []string{outside, filepath.Join(home, ".ssh"), filepath.Join(f.ws, ".git", "hooks"), filepath.Join(f.ws, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(outside, "secret"), []byte("s3cret"), 0o644)
	os.Symlink(outside, filepath.Join(f.ws, "link"))
	os.Symlink(filepath.Join(home, ".ssh"), filepath.Join(f.ws, "sshlink"))
	for name, body := range map[string]string{".envrc": "export K=v", "server.key": "k", "id_rsa.pub": "ssh-rsa", "id_ed25519": "k",
		"app.pem": "k", "nats.creds": "k", ".npmrc": "//r/:_authToken=x", "credentials.json": "{}", ".git/config": "[core]"} {
		os.WriteFile(filepath.Join(f.ws, name), []byte(body), 0o644)
	}
	paths := []string{
		"nope/../link/secret", "nope/../../outside/secret", "sub/../nope/../link/secret", "link/secret", "link/../outside/secret",
		"sshlink/authorized_keys", "nope/../sshlink/authorized_keys", "~/.ssh/authorized_keys", filepath.Join(home, ".ssh", "authorized_keys"),
		"../outside/secret", "sub/../../outside/secret", filepath.Join(outside, "secret"),
	}
	secrets := []string{".envrc", "server.key", "id_rsa.pub", "id_ed25519", "app.pem", "nats.creds", ".npmrc", "credentials.json"}
	type tc struct {
		tool string
		args map[string]any
	}
	var cases []tc
	for _, p := range paths {
		cases = append(cases,
			tc{"read_file", map[string]any{"path": p}},
			tc{"write_file", map[string]any{"path": p, "content": "pwned"}},
			tc{"write_file", map[string]any{"path": p, "content": "pwned", "append": true}},
			tc{"edit_file", map[string]any{"path": p, "old_string": "s3cret", "new_string": "pwned"}},
			tc{"list_dir", map[string]any{"path": filepath.Dir(p)}},
			tc{"grep", map[string]any{"pattern": ".", "path": p}},
		)
	}
	for _, p := range secrets {
		cases = append(cases, tc{"read_file", map[string]any{"path": p}}, tc{"write_file", map[string]any{"path": p, "content": "x"}},
			tc{"grep", map[string]any{"pattern": ".", "path": p}})
	}
	for _, p := range []string{".git/config", ".git/hooks/pre-commit", "sub/../.git/hooks/post-checkout"} {
		cases = append(cases, tc{"write_file", map[string]any{"path": p, "content": "[core]\n\tfsmonitor = sh -c id\n"}},
			tc{"edit_file", map[string]any{"path": p, "old_string": "[core]", "new_string": "[alias]"}})
	}
	refused := 0
	for _, c := range cases {
		r := f.call(t, c.tool, c.args)
		text := r.Text()
		if strings.Contains(text, "s3cret") || strings.Contains(text, "authorized_keys\t") {
			t.Errorf("%s %v read outside the workspace: %s", c.tool, c.args, text)
		}
		if c.tool == "list_dir" {
			continue // listing the workspace itself (nope/.. -> .) is fine
		}
		if !r.IsError {
			t.Errorf("%s %v: want an error, got %s", c.tool, c.args, text)
			continue
		}
		refused++
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "s3cret" {
		t.Fatalf("outside file changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(home, ".ssh", "authorized_keys")); err == nil {
		t.Fatal("authorized_keys was written")
	}
	if b, _ := os.ReadFile(filepath.Join(f.ws, ".git", "config")); string(b) != "[core]" {
		t.Fatalf(".git/config changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(f.ws, ".git", "hooks", "pre-commit")); err == nil {
		t.Fatal("a git hook was written")
	}
	t.Logf("%d traversal and secret attempts, %d refused", len(cases), refused)
	// What stays allowed: ordinary files, also through a ".." that stays inside.
	want(t, f.call(t, "write_file", map[string]any{"path": "sub/../ok.txt", "content": "fine"}), false, "ok.txt")
	want(t, f.call(t, "read_file", map[string]any{"path": "ok.txt"}), false, "fine")
}

// TestBashBoundaryEndToEnd runs attacks through the real bash tool, the
// real exec policy and the real sandbox: refused ones must not run, and
// the ones full mode runs must not read the worker's secrets or write
// outside the workspace.
func TestBashBoundaryEndToEnd(t *testing.T) {
	const secret = "sk-worker-secret-42"
	t.Setenv("OPENAI_API_KEY", secret)
	outsideDir := t.TempDir()
	cfgFile := filepath.Join(outsideDir, "agentbus.yml")
	if err := os.WriteFile(cfgFile, []byte("apiKey: "+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	policy := func(mode execpolicy.Mode, preset string, am execpolicy.ApprovalMode) func(*Config) {
		return func(c *Config) {
			p, err := execpolicy.New(execpolicy.Options{Mode: mode, Preset: preset, Approval: am, Files: c.Files})
			if err != nil {
				t.Fatal(err)
			}
			c.Exec = p
		}
	}
	refused := []string{
		"sudo id > pwned", "X='a[$(touch pwned)]'; echo ${!X}", "set -k; env BASH_ENV=x touch pwned", "bash -l -c 'touch pwned'",
		"bash --log -c 'touch pwned'", "zsh -c 'touch pwned'", "sort --compress-prog=sudo x", "compgen -C 'touch pwned' x",
		"coproc touch pwned", "find . -execdir sudo touch pwned \\;", "cat < /dev/tcp/127.0.0.1/4222", "echo $(touch pwned)",
		"python3 -c 'open(\"pwned\",\"w\")'", "bash pwned.sh", "node -e 1", "echo pwned | xargs sudo touch",
	}
	// Not allowlisted and not read-only: refused unless execApprovalMode allow.
	unlisted := []string{"echo pwned | xargs touch", "sort --compress-prog=touch x", "find . -execdir touch pwned \\;", "file -C -m pwned"}
	for _, am := range []execpolicy.ApprovalMode{execpolicy.ApprovalDeny, execpolicy.ApprovalAllow} {
		f := newFixture(t, policy(execpolicy.ModeAllowlist, "readonly", am))
		cmds := refused
		if am == execpolicy.ApprovalDeny {
			cmds = append(append([]string(nil), refused...), unlisted...)
		}
		for _, cmd := range cmds {
			r := f.call(t, "bash", map[string]any{"command": cmd})
			if !r.IsError || !strings.Contains(r.Text(), "refused by the exec policy") {
				t.Errorf("allowlist approval=%s %q: want refusal, got %s", am, cmd, r.Text())
			}
			if _, err := os.Stat(filepath.Join(f.ws, "pwned")); err == nil {
				t.Fatalf("allowlist approval=%s %q ran", am, cmd)
			}
		}
	}
	if i := sandbox.Probe(); !i.Available {
		// Without isolation execSecurity full is refused at start-up.
		_, err := All(Config{Files: newFixtureFiles(t), Exec: mustPolicy(t, execpolicy.ModeFull), Log: slog.New(slog.DiscardHandler)})
		if !errors.Is(err, ErrNoIsolation) {
			t.Fatalf("full mode without isolation: All = %v, want ErrNoIsolation", err)
		}
		t.Skipf("the full-mode half needs bubblewrap isolation (%s); CI installs the Debian package bubblewrap", i.Reason)
	}
	full := newFixture(t, policy(execpolicy.ModeFull, "", ""))
	for _, cmd := range []string{"rm --recur /", "rm -r /e??", "kill -9 -01", "kill -9 ' -1'", "rm -rf $(echo /)", "echo / | xargs rm -rf", "sudo id"} {
		want(t, full.call(t, "bash", map[string]any{"command": cmd}), true, "refused by the exec policy")
	}
	for _, cmd := range []string{"env", "cat /proc/$PPID/environ /proc/1/environ", "cat /proc/*/environ", "cat " + cfgFile,
		"python3 -c 'import os; print(open(\"/proc/%d/environ\" % os.getppid()).read())'", "echo $OPENAI_API_KEY"} {
		r := full.call(t, "bash", map[string]any{"command": cmd})
		if strings.Contains(r.Text(), secret) {
			t.Errorf("full %q read the worker's secret:\n%s", cmd, r.Text())
		}
	}
	for _, cmd := range []string{"echo x > " + filepath.Join(outsideDir, "w"), "echo x > ../w", "cp /etc/hostname /usr/w"} {
		full.call(t, "bash", map[string]any{"command": cmd})
	}
	if _, err := os.Stat(filepath.Join(outsideDir, "w")); err == nil {
		t.Error("full mode wrote outside the workspace")
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(full.ws), "w")); err == nil {
		t.Error("full mode wrote into the workspace's parent")
	}
	want(t, full.call(t, "bash", map[string]any{"command": "echo ok > inside.txt && cat inside.txt"}), false, "ok")
}

func newFixtureFiles(t *testing.T) *filepolicy.Policy {
	t.Helper()
	fp, err := filepolicy.New(filepolicy.Options{Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return fp
}

func mustPolicy(t *testing.T, mode execpolicy.Mode) *execpolicy.Policy {
	t.Helper()
	p, err := execpolicy.New(execpolicy.Options{Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFullModeNeedsIsolation: on a host where the sandbox cannot isolate,
// execSecurity full is refused at start-up and the other modes still build.
func TestFullModeNeedsIsolation(t *testing.T) {
	orig := probeIsolation
	t.Cleanup(func() { probeIsolation = orig })
	probeIsolation = func() sandbox.Isolation { return sandbox.Isolation{Reason: "user namespaces are not permitted"} }
	for _, tt := range []struct {
		mode execpolicy.Mode
		ok   bool
	}{{execpolicy.ModeFull, false}, {execpolicy.ModeAllowlist, true}, {execpolicy.ModeDeny, true}} {
		_, err := All(Config{Files: newFixtureFiles(t), Exec: mustPolicy(t, tt.mode), Log: slog.New(slog.DiscardHandler)})
		if tt.ok != (err == nil) || (!tt.ok && !errors.Is(err, ErrNoIsolation)) {
			t.Errorf("mode %s without isolation: All = %v", tt.mode, err)
		}
	}
}
