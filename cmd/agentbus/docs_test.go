package main

// The docs test: every configuration block and every shell command of README.md and
// docs/**/*.md either runs here or is marked with why it cannot. The conventions are in
// docs/README.md ("Blocks the docs test runs").

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/config"
)

// docBlock is one fenced block of a Markdown file.
type docBlock struct {
	file   string // relative to the repository root
	line   int    // of the opening fence
	lang   string // the fence's info string (first word)
	text   string // the content, the fence's indentation removed
	mark   string // the doctest marker before the fence: "", "skip" or "rejected"
	reason string // the marker's text
}

func (b docBlock) where() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

var (
	fenceRE  = regexp.MustCompile("^([ \t]*)(```+|~~~+)[ \t]*([^ \t`]*)")
	markerRE = regexp.MustCompile(`^[ \t]*<!--[ \t]*doctest:[ \t]*([a-z-]+)[ \t]*:?[ \t]*(.*?)[ \t]*-->[ \t]*$`)
	// docEnvVar is a ${VAR} without a default; placeholders are set for them.
	docEnvVar = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)
	// inlineUp is an inline `agentbus up ...` of a quickstart step, with optional VAR=... before.
	inlineUp = regexp.MustCompile("`((?:[A-Z_][A-Z0-9_]*=\\S* )*)agentbus up([^`]*)`")
)

// docFiles is README.md and every docs/**/*.md, relative to the repository root.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(pkgRoot, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(pkgRoot, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files[1:])
	return files
}

// readBlocks returns the fenced blocks of a file, with the doctest marker of each (a
// <!-- doctest: ... --> comment among the one-line HTML comments right above the fence).
func readBlocks(t *testing.T, file string) []docBlock {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(pkgRoot, file))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	var out []docBlock
	for i := 0; i < len(lines); i++ {
		m := fenceRE.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		b := docBlock{file: file, line: i + 1, lang: strings.ToLower(m[3])}
		for j := i - 1; j >= 0; j-- { // the HTML comments right above the fence
			l := strings.TrimSpace(lines[j])
			if l == "" {
				continue
			}
			if mm := markerRE.FindStringSubmatch(lines[j]); mm != nil {
				b.mark, b.reason = mm[1], mm[2]
				break
			}
			if !strings.HasPrefix(l, "<!--") || !strings.HasSuffix(l, "-->") {
				break
			}
		}
		indent, fence := m[1], m[2]
		var body []string
		for i++; i < len(lines); i++ {
			if strings.HasPrefix(strings.TrimLeft(lines[i], " \t"), fence) && strings.TrimSpace(strings.TrimLeft(lines[i], " \t")[len(fence):]) == "" {
				break
			}
			body = append(body, strings.TrimPrefix(lines[i], indent))
		}
		b.text = strings.Join(body, "\n") + "\n"
		switch b.mark {
		case "", "skip", "rejected":
		default:
			t.Errorf("%s: unknown doctest marker %q (want skip or rejected)", b.where(), b.mark)
		}
		if b.mark == "skip" && b.reason == "" {
			t.Errorf("%s: <!-- doctest: skip --> needs a reason: <!-- doctest: skip: why it cannot run here -->", b.where())
		}
		out = append(out, b)
	}
	return out
}

func allBlocks(t *testing.T) []docBlock {
	var out []docBlock
	for _, f := range docFiles(t) {
		out = append(out, readBlocks(t, f)...)
	}
	return out
}

// configKeys are the top-level keys of agentbus.yml, from the config type itself.
func configKeys() map[string]bool {
	keys := map[string]bool{}
	t := reflect.TypeFor[config.Config]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name != "" && name != "-" {
			keys[name] = true
		}
	}
	return keys
}

// isConfig reports whether a yaml block is a configuration: a mapping with at least one
// top-level key of agentbus.yml. err is set when a yaml block does not parse at all.
func isConfig(b docBlock, keys map[string]bool) (bool, error) {
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(b.text), &root); err != nil {
		return false, err
	}
	if len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return false, nil
	}
	m := root.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if keys[m.Content[i].Value] {
			return true, nil
		}
	}
	return false, nil
}

// setPlaceholders sets every ${VAR} (without a default) a text names to a placeholder.
func setPlaceholders(t *testing.T, text string) {
	for _, m := range docEnvVar.FindAllStringSubmatch(text, -1) {
		t.Setenv(m[1], "doc-"+strings.ToLower(m[1]))
	}
}

// TestDocsConfigBlocks loads every configuration block of README.md and docs/ (a ```yaml block
// with a top-level key of agentbus.yml), and deploy/agentbus.yml, through checkConfig — what
// agentbus config check and agentbus up run — with every ${VAR} they name set. A yaml block
// that does not parse fails too, config or not, unless it is marked skip.
func TestDocsConfigBlocks(t *testing.T) {
	keys := configKeys()
	t.Chdir(t.TempDir()) // relative toolsDir, agentsDir, ... resolve in an empty directory
	var configs, others, skipped int
	check := func(where, text, mark string) {
		t.Run(where, func(t *testing.T) {
			setPlaceholders(t, text)
			path := filepath.Join(t.TempDir(), "agentbus.yml")
			if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := checkConfig(path)
			switch {
			case mark == "rejected" && err == nil:
				t.Errorf("%s: the block is marked <!-- doctest: rejected --> but agentbus config check accepts it", where)
			case mark != "rejected" && err != nil:
				t.Errorf("%s: agentbus config check fails on this configuration block: %s\n%s", where, oneLine(err.Error()), text)
			}
		})
	}
	for _, b := range allBlocks(t) {
		if b.lang != "yaml" && b.lang != "yml" {
			continue
		}
		if b.mark == "skip" {
			skipped++
			t.Logf("%s: skipped: %s", b.where(), b.reason)
			continue
		}
		ok, err := isConfig(b, keys)
		if err != nil {
			t.Errorf("%s: yaml block does not parse: %v (fix it, or mark it <!-- doctest: skip: why -->)\n%s", b.where(), err, b.text)
			continue
		}
		if !ok {
			others++
			continue
		}
		configs++
		check(b.where(), b.text, b.mark)
	}
	raw, err := os.ReadFile(filepath.Join(pkgRoot, "deploy", "agentbus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	configs++
	check("deploy/agentbus.yml", string(raw), "")
	if configs < 10 {
		t.Fatalf("only %d configuration blocks found; the extraction is broken", configs)
	}
	t.Logf("%d configuration blocks checked, %d other yaml blocks parsed, %d skipped", configs, others, skipped)
}

// pkgRoot is the repository root (the tests start in cmd/agentbus).
var pkgRoot = func() string {
	d, _ := filepath.Abs("../..")
	return d
}()

// shellLangs are the fence languages of commands for a user to type.
var shellLangs = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true}

// docEnv is what a documented command runs with: the test binary as agentbus (and the role
// binaries) on PATH, the local agentbus up's data directory, and the variables the docs use.
type docEnv struct {
	dir     string // working directory: agentbus.yml and data/ of the agentbus up
	env     []string
	webhook string // the address that replaces 127.0.0.1:8088
}

func (e *docEnv) script(text string) string {
	text = strings.ReplaceAll(text, "go run ./cmd/agentbus", "agentbus")
	return strings.ReplaceAll(text, "127.0.0.1:8088", e.webhook)
}

// run runs a shell script in the environment; it returns the exit code and the output.
func (e *docEnv) run(t *testing.T, script string, timeout time.Duration) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", script)
	cmd.Dir, cmd.Env = e.dir, e.env
	cmd.Stdin = strings.NewReader("hello\n") // agentbus chat: one message, then wait for its reply
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("sh: %v", err)
	}
	if ctx.Err() != nil {
		code = -1
		errb.WriteString("\n(timed out after " + timeout.String() + ")")
	}
	return code, out.String(), errb.String()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startDocEnv starts agentbus up (the test binary's main, as a child process) with the
// README's webhook configuration, its model a fake OpenAI server that echoes, and returns
// the environment the documented commands run in.
func startDocEnv(t *testing.T, readme []docBlock) *docEnv {
	t.Helper()
	var cfg string
	for _, b := range readme {
		if b.lang == "yaml" && strings.Contains(b.text, "webhook:") {
			cfg = b.text
		}
	}
	if cfg == "" {
		t.Fatal("README.md: no webhook configuration block (```yaml with im.webhook) to start agentbus up with")
	}
	model := fakeopenai.New(t, fakeopenai.Echo)
	e := &docEnv{dir: t.TempDir(), webhook: freeAddr(t)}
	if err := os.WriteFile(filepath.Join(e.dir, "agentbus.yml"), []byte(e.script(cfg)), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := filepath.Abs(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"agentbus", "ingest", "turn-worker", "tool-worker", "egress"} {
		sh := fmt.Sprintf("#!/bin/sh\n%s=%s exec %q \"$@\"\n", childEnv, name, self)
		if err := os.WriteFile(filepath.Join(bin, name), []byte(sh), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, kv := range childEnviron("") {
		k, _, _ := strings.Cut(kv, "=")
		if k == childEnv || k == "PATH" || k == "USER" {
			continue
		}
		e.env = append(e.env, kv)
	}
	e.env = append(e.env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "USER=docs",
		"AGENTBUS_DATA_DIR="+filepath.Join(e.dir, "data"), "OPENAI_API_KEY=doc-key",
		"OPENAI_BASE_URL="+model.BaseURL(), "BOT_SECRET=doc-bot-secret")

	cmd := exec.Command(filepath.Join(bin, "agentbus"), "up")
	cmd.Dir, cmd.Env = e.dir, e.env
	var logs syncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	testwait.Eventually(t, 3*time.Minute, func() error { // a busy 2-core machine
		select {
		case err := <-exited:
			t.Fatalf("agentbus up exited: %v\n%s", err, logs.String())
		default:
		}
		if !strings.Contains(logs.String(), "Stop with Ctrl-C") {
			return fmt.Errorf("agentbus up has not started:\n%s", logs.String())
		}
		c, err := net.DialTimeout("tcp", e.webhook, time.Second)
		if err != nil {
			return fmt.Errorf("agentbus up started, its webhook listener not: %w", err)
		}
		c.Close()
		return nil
	})
	return e
}

// consoleCommands splits a ```console block into its commands ("$ " lines, with "\" line
// continuations) and the exit code each one documents ("(exit N)" in its output; 0 without).
func consoleCommands(text string) (cmds []string, codes []int) {
	exitRE := regexp.MustCompile(`\(exit (\d+)\)`)
	sc := bufio.NewScanner(strings.NewReader(text))
	cont := false
	for sc.Scan() {
		l := sc.Text()
		switch {
		case cont:
			cmds[len(cmds)-1] += "\n" + l
		case strings.HasPrefix(l, "$ "):
			cmds = append(cmds, strings.TrimPrefix(l, "$ "))
			codes = append(codes, 0)
		case len(cmds) > 0:
			if m := exitRE.FindStringSubmatch(l); m != nil {
				codes[len(codes)-1], _ = strconv.Atoi(m[1])
			}
		}
		cont = strings.HasSuffix(l, "\\") && len(cmds) > 0
	}
	return cmds, codes
}

// TestDocsShellBlocks runs every ```sh, ```bash, ```shell and ```console block of README.md and
// docs/ that is not marked skip, in file order (README.md first: its webhook message is the
// session the later pages replay), against an agentbus up this test starts with the README's
// configuration. A sh block is one script (set -e: every command must succeed); a console
// block's "$ " commands must exit with the code their output shows. Every inline `agentbus up
// FLAGS` of a page must accept its flags.
func TestDocsShellBlocks(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agentbus up")
	}
	var blocks []docBlock
	for _, b := range allBlocks(t) {
		if shellLangs[b.lang] {
			blocks = append(blocks, b)
		}
	}
	var readme []docBlock
	for _, b := range readBlocks(t, "README.md") {
		readme = append(readme, b)
	}
	e := startDocEnv(t, readme)
	ran, commands, skipped := 0, 0, 0
	for _, b := range blocks {
		if b.mark == "skip" {
			skipped++
			t.Logf("%s: not run: %s", b.where(), b.reason)
			continue
		}
		ran++
		if b.lang == "console" {
			cmds, codes := consoleCommands(b.text)
			if len(cmds) == 0 {
				t.Errorf("%s: console block without a \"$ \" command", b.where())
			}
			for i, c := range cmds {
				commands++
				code, out, errs := e.run(t, e.script(c), 3*time.Minute)
				if code != codes[i] {
					t.Errorf("%s: `%s` exited %d, the page shows %d\n--- stdout\n%s--- stderr\n%s", b.where(), c, code, codes[i], out, tail(errs, 30))
				}
			}
			continue
		}
		n := countCommands(b.text)
		commands += n
		code, out, errs := e.run(t, "set -ex\n"+e.script(b.text), 4*time.Minute)
		if code != 0 {
			t.Errorf("%s: %s block failed (exit %d); fix it, or mark it <!-- doctest: skip: why -->\n%s--- stdout\n%s--- stderr (last lines; + is the command run)\n%s",
				b.where(), b.lang, code, b.text, tail(out, 20), tail(errs, 30))
		} else {
			t.Logf("%s: %d commands ran; the output ends:\n%s", b.where(), n, tail(out, 6))
		}
	}
	inline := checkInlineUp(t)
	t.Logf("%d shell blocks run (%d commands), %d skipped with a reason, %d inline `agentbus up` commands' flags checked", ran, commands, skipped, inline)
	if ran < 5 || inline < 5 {
		t.Fatalf("only %d shell blocks and %d inline commands found; the extraction is broken", ran, inline)
	}
}

// checkInlineUp parses the flags of every inline `agentbus up FLAGS` of README.md and docs/
// with agentbus up's own flag set (a quickstart's `agentbus up -c FILE` fails here); a
// synopsis with [optional] parts is not a command and is left alone. It returns how many it
// parsed.
func checkInlineUp(t *testing.T) int {
	n := 0
	for _, f := range docFiles(t) {
		raw, err := os.ReadFile(filepath.Join(pkgRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(raw), "\n") {
			for _, m := range inlineUp.FindAllStringSubmatch(line, -1) {
				args := strings.Fields(m[2])
				if strings.ContainsAny(m[2], "[]…") || strings.Contains(m[2], "...") {
					continue
				}
				n++
				fs := flag.NewFlagSet("up", flag.ContinueOnError)
				fs.SetOutput(io.Discard)
				upFlags(fs)
				if err := fs.Parse(args); err != nil && !errors.Is(err, flag.ErrHelp) {
					t.Errorf("%s:%d: `agentbus up%s`: %v", f, i+1, m[2], err)
				} else if fs.NArg() > 0 {
					t.Errorf("%s:%d: `agentbus up%s`: up takes no arguments, got %q", f, i+1, m[2], fs.Args())
				}
			}
		}
	}
	return n
}

// TestDocsInlineUp is checkInlineUp on its own (TestDocsShellBlocks runs it too): it needs no
// running agentbus.
func TestDocsInlineUp(t *testing.T) {
	if n := checkInlineUp(t); n < 5 {
		t.Fatalf("only %d inline `agentbus up` commands found; the extraction is broken", n)
	} else {
		t.Logf("%d inline `agentbus up` commands parse", n)
	}
}

// countCommands counts the command lines of a sh block (not comments, blank lines or "\"
// continuations).
func countCommands(text string) int {
	n, cont := 0, false
	for _, l := range strings.Split(text, "\n") {
		s := strings.TrimSpace(l)
		if !cont && s != "" && !strings.HasPrefix(s, "#") {
			n++
		}
		cont = strings.HasSuffix(s, "\\")
	}
	return n
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n") + "\n"
}

// docCommands are the commands of agentbus whose documented flags TestDocsCommandFlags checks,
// with their subcommands.
var docCommands = map[string][]string{
	"up": nil, "chat": nil, "sessions": nil, "replay": nil, "console": nil, "bench": nil,
	"provision": nil, "status": nil, "doctor": nil, "health": nil,
	"dlq": {"list", "show", "retry", "discard", "purge"}, "exec-policy": {"check"}, "config": {"check"},
	"region": {"promote", "status"},
}

var (
	docCommandRE = regexp.MustCompile(`agentbus ([a-z-]+)((?: [a-z]+)?)([^` + "`" + `|#&;)]*)`)
	docFlagRE    = regexp.MustCompile(`(?:^|[\s\[])--?([a-zA-Z][\w-]*)`)
	helpFlagRE   = regexp.MustCompile(`(?m)^  -([a-zA-Z][\w-]*)`)
)

// helpOf is the --help text of an agentbus command (a child process: some commands print
// their flags on the process's own stderr).
func helpOf(t *testing.T, args ...string) string {
	code, out, errOut := child(t, t.TempDir(), "agentbus", append(args, "--help")...)
	if code != 0 {
		t.Errorf("agentbus %s --help: exit %d, want 0\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out + errOut
}

// TestDocsCommandFlags: --help of every agentbus command exits 0 and lists flags, and every
// flag README.md and docs/ write after an agentbus command (inline, in a block, in a synopsis)
// is one of that command's flags.
func TestDocsCommandFlags(t *testing.T) {
	flags := map[string]map[string]bool{}
	for cmd, subs := range docCommands {
		names := [][]string{{cmd}}
		for _, s := range subs {
			names = append(names, []string{cmd, s})
		}
		for _, n := range names {
			set := map[string]bool{"help": true, "h": true}
			for _, m := range helpFlagRE.FindAllStringSubmatch(helpOf(t, n...), -1) {
				set[m[1]] = true
			}
			flags[strings.Join(n, " ")] = set
		}
	}
	checked := 0
	for _, f := range docFiles(t) {
		raw, err := os.ReadFile(filepath.Join(pkgRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(raw), "\n") {
			for _, m := range docCommandRE.FindAllStringSubmatch(line, -1) {
				subs, ok := docCommands[m[1]]
				if !ok {
					continue
				}
				name, rest := m[1], m[2]+m[3]
				if sub := strings.TrimSpace(m[2]); sub != "" && slices.Contains(subs, sub) {
					name, rest = m[1]+" "+sub, m[3]
				}
				rest, _, _ = strings.Cut(rest, " -- ") // what follows is the checked command line
				for _, fm := range docFlagRE.FindAllStringSubmatch(rest, -1) {
					checked++
					if !flags[name][fm[1]] {
						t.Errorf("%s:%d: `agentbus %s` has no flag -%s (its --help lists %v)", f, i+1, name, fm[1], slices.Sorted(maps.Keys(flags[name])))
					}
				}
			}
		}
	}
	t.Logf("%d documented flags of agentbus commands exist", checked)
	if checked < 20 {
		t.Fatalf("only %d flags found; the extraction is broken", checked)
	}
}
