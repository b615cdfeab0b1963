package execpolicy

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/agentbus/agentbus/pkg/filepolicy"
)

type corpusCase struct {
	line     int
	section  string
	want     string
	cmd      string
	policy   *Policy
	approval *Approvals
}

// fixtureWorkspace builds the workspace the workspace=1 sections run
// against: plain files, a .env, symlinks that leave the workspace
// (directly, through a chain, dangling), and a named pipe.
func fixtureWorkspace(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	ws := filepath.Join(root, "ws")
	outside := filepath.Join(root, "outside")
	for _, d := range []string{ws, outside, filepath.Join(ws, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"ws/notes.txt":     "hello\n",
		"ws/sub/inner.txt": "inner\n",
		"ws/.env":          "API_KEY=x\n",
		"ws/.env.example":  "API_KEY=\n",
		"secret":           "top secret\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"link_out":    "/etc",
		"chain2":      "link_out",
		"chain1":      "chain2",
		"linkdir_out": outside,
		"dangling":    filepath.Join(outside, "missing", "x"),
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(ws, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	return ws
}

func loadCorpus(t *testing.T) []corpusCase {
	t.Helper()
	f, err := os.Open("testdata/corpus.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ws string
	var cases []corpusCase
	var pol *Policy
	var ap *Approvals
	section := ""
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = line
			opts := Options{}
			ap = &Approvals{}
			for _, kv := range strings.Fields(strings.Trim(line, "[]")) {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "mode":
					opts.Mode = Mode(v)
				case "preset":
					opts.Preset = v
				case "approval":
					opts.Approval = ApprovalMode(v)
				case "allow":
					opts.Allow = strings.Split(v, ",")
				case "rule":
					if _, err := ap.AddRule(v, "test", timeNow()); err != nil {
						t.Fatalf("line %d: %v", n, err)
					}
				case "always":
					ap.AlwaysBash = v == "1"
				case "workspace":
					if ws == "" {
						ws = fixtureWorkspace(t)
					}
					fp, err := filepolicy.New(filepolicy.Options{Workspace: ws})
					if err != nil {
						t.Fatal(err)
					}
					opts.Files = fp
				default:
					t.Fatalf("line %d: unknown section key %q", n, k)
				}
			}
			pol, err = New(opts)
			if err != nil {
				t.Fatalf("line %d: %v", n, err)
			}
			continue
		}
		want, cmd, ok := strings.Cut(line, " ")
		if !ok && want != "deny" {
			t.Fatalf("line %d: want '<verdict> <command>'", n)
		}
		cmd = strings.TrimLeft(cmd, " ")
		if strings.HasPrefix(cmd, "q:") {
			u, err := strconv.Unquote(cmd[2:])
			if err != nil {
				t.Fatalf("line %d: bad q: string: %v", n, err)
			}
			cmd = u
		}
		if pol == nil {
			t.Fatalf("line %d: case before any [section]", n)
		}
		cases = append(cases, corpusCase{line: n, section: section, want: want, cmd: cmd, policy: pol, approval: ap})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cases
}

// TestCorpus runs testdata/corpus.txt: at least 150 command lines,
// bypass attempts of every kind, with the verdict each must get.
func TestCorpus(t *testing.T) {
	cases := loadCorpus(t)
	if len(cases) < 150 {
		t.Fatalf("corpus has %d cases, want at least 150", len(cases))
	}
	counts := map[string]int{}
	for _, c := range cases {
		v := c.policy.Check(c.cmd, c.approval)
		counts[v.Decision.String()]++
		if v.Decision.String() != c.want {
			t.Errorf("corpus.txt:%d %s\n  command: %q\n  got %s (%s), want %s", c.line, c.section, c.cmd, v.Decision, v.Reason, c.want)
		}
		if v.Reason == "" {
			t.Errorf("corpus.txt:%d: empty reason", c.line)
		}
		if v.Decision == Ask && len(v.Pending) == 0 {
			t.Errorf("corpus.txt:%d: ask without pending commands", c.line)
		}
	}
	t.Logf("%d corpus cases: %d allow, %d ask, %d deny", len(cases), counts["allow"], counts["ask"], counts["deny"])
}
