package execpolicy

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/filepolicy"
	"github.com/agentbus/agentbus/pkg/sandbox"
)

// The real-bash oracle: command lines run in the real bash inside
// pkg/sandbox (bubblewrap), each in a working directory of its own with
// canary files, and with a marker program (zzmark) first on PATH that
// records every run. What a line did — the marker run, a file created,
// removed or changed — is compared with what the policy said the line
// does (Verdict.Commands): an effect that no judged command names is code
// the policy did not see. Without bubblewrap nothing runs (the tests skip:
// a hostile line must not run on the host unconfined).

const (
	marker      = "zzmark"
	victimFile  = "victim.txt"
	victimText  = "canary\n"
	taintedFile = "f" // holds a value that runs the marker when evaluated as arithmetic
)

// labFixtures are the files every line's directory starts with.
func labFixtures() map[string][]byte {
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	_ = tw.WriteHeader(&tar.Header{Name: "member.txt", Mode: 0o644, Size: 3})
	_, _ = tw.Write([]byte("hi\n"))
	_ = tw.Close()
	return map[string][]byte{
		victimFile:  []byte(victimText),
		taintedFile: []byte("b[$(" + marker + " from-file)]\n"),
		"list":      []byte(victimFile + "\x00"),
		"wgetrc":    []byte("use_askpass = " + marker + "\n"),
		"a.tar":     tb.Bytes(),
	}
}

// bashLab runs lines through the sandbox.
type bashLab struct {
	stub string // directory holding the marker program
}

// newBashLab skips the test unless pkg/sandbox isolates with bubblewrap.
func newBashLab(t testing.TB) *bashLab {
	t.Helper()
	if iso := sandbox.Probe(); !iso.Available {
		t.Skipf("real-bash oracle needs bubblewrap (pkg/sandbox isolation): %s; hostile lines are never run unconfined", iso.Reason)
	}
	stub := t.TempDir()
	script := "#!/bin/sh\nprintf '%s\\n' \"" + marker + " $*\" >> \"$ZZWS/.zzran\"\n"
	if err := os.WriteFile(filepath.Join(stub, marker), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return &bashLab{stub: stub}
}

// effects are what one line did, in a stable order: "ran zzmark …",
// "created X", "removed X", "changed X".
type effects []string

// runBatch runs every line in real bash, each as `bash -c LINE` in its own
// directory under one sandboxed run (a sandbox start costs ~100 ms on a
// busy machine; a bash start a few), and returns each line's effects.
func (b *bashLab) runBatch(t testing.TB, lines []string, perLine time.Duration) []effects {
	t.Helper()
	ws, err := os.MkdirTemp("", "execpolicy-redteam-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(ws)
	fixtures := labFixtures()
	if err := os.Mkdir(filepath.Join(ws, "lines"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i, l := range lines {
		d := filepath.Join(ws, fmt.Sprintf("d%d", i))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, body := range fixtures {
			if err := os.WriteFile(filepath.Join(d, name), body, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(ws, "lines", fmt.Sprint(i)), []byte(l), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The driver: every line in its own directory and bash, stdin empty,
	// files capped at 64 KiB, killed after perLine.
	// The driver: every line in its own directory and bash (a forked
	// subshell that execs bash: no other process per line), stdin empty,
	// files capped at 64 KiB, CPU time capped; eight at a time.
	driver := fmt.Sprintf(`ulimit -f 64
ws=$PWD
i=0
while [ -e "lines/$i" ]; do
  IFS= read -r -d '' s < "lines/$i"
  (cd "d$i" && ulimit -t %d && ZZWS=$ws/d$i exec bash -c "$s" </dev/null >/dev/null 2>&1) &
  i=$((i+1))
  [ $((i %% 8)) -eq 0 ] && wait
done
wait
echo done $i`, int(perLine.Seconds()+0.5))
	ctx := context.Background()
	res, err := sandbox.Run(ctx, sandbox.Spec{
		Command:          driver,
		Dir:              ws,
		Timeout:          time.Duration(len(lines)/8+10) * perLine,
		Env:              []string{"PATH=" + b.stub + ":" + sandbox.DefaultPath},
		ReadOnly:         []string{b.stub},
		RequireIsolation: true, // the zero Network: a namespace of its own, loopback only
		// Room for eight lines at a time and what each starts: a refused fork must not hide
		// an escape the line would otherwise show.
		Limits: sandbox.Limits{Processes: 512},
	})
	if err != nil {
		t.Fatalf("sandbox: %v", err)
	}
	if !strings.Contains(res.Stdout, fmt.Sprintf("done %d", len(lines))) {
		t.Fatalf("driver did not finish (timed out %v, exit %d): %s %s", res.TimedOut, res.ExitCode, res.Stdout, res.Stderr)
	}
	out := make([]effects, len(lines))
	for i := range lines {
		out[i] = dirEffects(filepath.Join(ws, fmt.Sprintf("d%d", i)), fixtures)
	}
	return out
}

// dirEffects compares a line's directory with the fixtures.
func dirEffects(dir string, fixtures map[string][]byte) effects {
	var eff effects
	seen := map[string]bool{}
	n := 0
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return nil
		}
		if n++; n > 200 {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == ".zzran" {
			body, _ := os.ReadFile(p)
			for _, l := range strings.Split(strings.TrimSpace(string(body)), "\n") {
				eff = append(eff, "ran "+l)
			}
			return nil
		}
		seen[rel] = true
		want, fixture := fixtures[rel]
		switch {
		case !fixture:
			eff = append(eff, "created "+rel)
		case !fi.Mode().IsRegular():
			eff = append(eff, "changed "+rel)
		default:
			if got, _ := os.ReadFile(p); !bytes.Equal(got, want) {
				eff = append(eff, "changed "+rel)
			}
		}
		return nil
	})
	for name := range fixtures {
		if !seen[name] {
			eff = append(eff, "removed "+name)
		}
	}
	sort.Strings(eff)
	return eff
}

// unexplained returns the effects no judged command names: the marker run
// without a judged "zzmark" command, a file touched that no judged command
// or redirection mentions.
func unexplained(eff effects, v Verdict) []string {
	var out []string
	for _, e := range eff {
		what, name, _ := strings.Cut(e, " ")
		if what == "ran" {
			name = marker
		}
		found := false
		for _, c := range v.Commands {
			prog, _, _ := strings.Cut(c, " ")
			// A judged writer with a run-time argument (rm <dynamic>, in
			// full mode) or a judged find -delete changes what it finds:
			// the verdict said so, whatever the names. A read-only
			// command (echo <dynamic>) explains nothing.
			writer := !filepolicy.IsReadOnlyName(prog) && !harmlessBuiltins[prog] &&
				(strings.Contains(c, "<dynamic>") || strings.Contains(c, "*"))
			if (what == "ran" && strings.HasPrefix(c, marker)) || (what != "ran" && (strings.Contains(c, name) || writer)) ||
				(what == "removed" && prog == "find" && strings.Contains(c, " -delete")) {
				found = true
				break
			}
		}
		if !found {
			out = append(out, e)
		}
	}
	return out
}

// settingsFile matches judged commands that read settings, which can
// name programs, from a file (wget --config=…).
var settingsFile = regexp.MustCompile(`(^| )--config(=| |$)`)

// opaqueVerdict: the verdict allows code or settings the policy cannot
// read (an interpreter, a script, a settings file) on someone's word
// (execSecurity full, the operator's allowlist, the owner's approval):
// what that code does is the sandbox's business, not the policy's (see
// opaqueFor), so the oracle does not hold it against the policy.
func opaqueVerdict(p *Policy, ap *Approvals, v Verdict) bool {
	word := func(base string) bool {
		return p.mode == ModeFull || p.allow[base] || (ap != nil && (ap.AlwaysBash || len(ap.Rules) > 0))
	}
	for _, c := range v.Commands {
		base, _, _ := strings.Cut(c, " ")
		_, interp := interpreters[family(base)]
		if (interp || settingsFile.MatchString(c)) && word(base) {
			return true
		}
	}
	return false
}

// Red-team corpus: hidden code of every class of issue 36, the payload
// being the marker program or a change of the canary files.

var rtPayloads = []string{marker, "touch ESCAPED", "rm -f " + victimFile}

// rtFragments put code C (for {C}) where bash evaluates it in an argument.
var rtFragments = []string{
	`${a['$({C})']}`, `"${a['$({C})']}"`, `${a["$({C})"]}`, "${x['`{C}`']:-y}", `${PIPESTATUS['$({C})']}`, `${a[$'\x24({C})']}`,
}

// rtStatements are statements in which bash runs C.
var rtStatements = []string{
	`a['$({C})']=1`, `declare a['$({C})']=1`, `declare -a x='($({C}))'`, `typeset -a x='($({C}))'`, `readonly -a x='($({C}))'`,
	`export -a x='($({C}))'`, `declare -A x='([k]=$({C}))'`, `x=(); declare x='($({C}))'`, `declare -a x+='($({C}))'`,
	`declare -a 'x=($({C}))'`, `x='b[$({C})]'; (( x ))`, `x='b[$({C})]'; echo $((x))`, `x='b[$({C})]'; echo ${a[x]}`,
	`a=(1 2); x='b[$({C})]'; echo ${a[@]:x}`, `x='b[$({C})]'; [[ x -eq 1 ]]`, `x='b[$({C})]'; [[ $x -eq 1 ]]`, `x='b[$({C})]'; let x+1`,
	`for i in 'b[$({C})]'; do echo ${a[i]}; done`, `: ${i:='b[$({C})]'}; echo $((i))`, `x=(['$({C})']=1)`,
	`printf -v i %s 'b[$({C})]'; echo $((i))`, `export i='b[$({C})]'; bash -c 'echo $((i))'`,
}

// rtWhole are hostile lines that are not built from a payload.
var rtWhole = []string{
	`read i < f; echo ${a[i]}`, `read -r i < f; (( i ))`, `read < f; echo $((REPLY))`, `mapfile -t m < f; echo $((m))`,
	`read < f; export REPLY; echo $((REPLY))`, `REPLY=1; read < f; echo $((REPLY))`, `read -r x < f; declare x; echo $((x))`,
	`wget --use-askpass=zzmark http://127.0.0.1:9/`, `wget --use-ask=zzmark http://127.0.0.1:9/`,
	`wget -e use_askpass=zzmark http://127.0.0.1:9/`, `wget -qeuse_askpass=zzmark http://127.0.0.1:9/`,
	`wget --execute=use_askpass=zzmark http://127.0.0.1:9/`, `wget -e USE-ASKPASS=zzmark http://127.0.0.1:9/`,
	`wget -O /dev/null http://127.0.0.1:9/ --use-askpass zzmark`, `WGETRC=wgetrc wget http://127.0.0.1:9/`,
	`find -files0-from list -delete`, `find -files0-from list -exec rm {} \;`, `wget --config=wgetrc http://127.0.0.1:9/`,
	`tar --to-command=zzmark -xf a.tar`, `tar --to-comm=zzmark -xf a.tar`, `tar -I zzmark -xf a.tar`, `tar --use-c=zzmark -xf a.tar`,
	`tar xIf zzmark a.tar`, `tar --checkpoint=1 --checkpoint-action=exec=zzmark -xf a.tar`,
}

// rtCommands are the presets' allowed commands (and read-only builtins)
// with the hidden fragment {X} as an argument.
var rtCommands = []string{
	"ls {X}", "cat {X}", "echo {X}", "printf '%s' {X}", "grep x {X}", "find . -name {X}", "head {X}", "tail {X}", "wc {X}",
	"stat {X}", "file {X}", "date -d {X}", "pwd {X}", "whoami {X}", "test -n {X}", "[ -n {X} ]", ": {X}", "true {X}",
	"curl {X}", "wget {X}", "ping -c1 {X}", "dig {X}", "nslookup {X}", "host {X}",
}

// rtContexts wrap a simple command X (for {X}).
var rtContexts = []string{
	"{X}", "true && {X}", "false || {X}", "{ {X}; }", "({X})", "if true; then {X}; fi", "for k in 1; do {X}; done",
	"{X} | cat", "timeout 5 {X}", "nice {X}", "env {X}", "command {X}", "bash <<'EOF'\n{X}\nEOF\n",
	"case y in y) {X};; esac", "while true; do {X}; break; done", "! {X}",
}

// rtExprContexts place a fragment outside a command's arguments.
var rtExprContexts = []string{
	"[[ -n {X} ]]", "case {X} in *) ;; esac", "case x in {X}) ;; esac", "cat <<EOF\n{X}\nEOF\n", "x={X}", ": ${y:-{X}}",
	"for j in {X}; do :; done", "echo > /dev/null {X}",
}

func redTeamCorpus() []string {
	seen := map[string]bool{}
	var out []string
	add := func(l string) {
		if !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	fill := func(tmpl, x string) string { return strings.ReplaceAll(tmpl, "{X}", x) }
	// The classes are crossed with the commands and contexts by rotation,
	// so that every fragment meets every allowed command and every
	// context once, with the payloads taking turns.
	k := 0
	next := func(list []string) string { k++; return list[k%len(list)] }
	for _, fr := range rtFragments {
		for _, cmd := range rtCommands {
			add(fill(next(rtContexts), fill(cmd, strings.ReplaceAll(fr, "{C}", next(rtPayloads)))))
		}
		for _, ctx := range rtContexts {
			add(fill(ctx, fill(next(rtCommands), strings.ReplaceAll(fr, "{C}", next(rtPayloads)))))
		}
		for _, ec := range rtExprContexts {
			add(fill(ec, strings.ReplaceAll(fr, "{C}", next(rtPayloads))))
		}
	}
	stmtContexts := []string{"true && {X}", "{ {X}; }", "if true; then {X}; fi", "bash <<'EOF'\n{X}\nEOF\n", "timeout 5 bash <<'EOF'\n{X}\nEOF\n", "for k in 1; do {X}; done"}
	for _, st := range rtStatements {
		for _, c := range rtPayloads {
			s := strings.ReplaceAll(st, "{C}", c)
			add(s)
			add(fill(next(stmtContexts), s))
		}
	}
	for _, w := range rtWhole {
		add(w)
		add(fill(next([]string{"timeout 5 {X}", "env {X}", "nice {X}", "bash <<'EOF'\n{X}\nEOF\n", "true && {X}"}), w))
	}
	return out
}

// TestRedTeamCorpus runs the generated corpus in real bash inside the
// sandbox and judges every line under every mode x preset x approval mode
// x owner approvals: a line a policy allows must not run the marker or
// touch a canary file unless the policy named that command. The corpus is
// checked to be hostile: most of its lines do escape when run unchecked.
func TestRedTeamCorpus(t *testing.T) {
	lab := newBashLab(t)
	lines := redTeamCorpus()
	if len(lines) < 400 {
		t.Fatalf("red-team corpus has %d lines, want hundreds", len(lines))
	}
	start := time.Now()
	eff := lab.runBatch(t, lines, 5*time.Second)
	ran := time.Since(start)
	hostile := 0
	for _, e := range eff {
		if len(e) > 0 {
			hostile++
		}
	}
	pols := allPolicies(t)
	checks, allowed, escapes, opaque := 0, 0, 0, 0
	for i, line := range lines {
		for _, pc := range pols {
			checks++
			v := pc.p.Check(line, pc.ap)
			if v.Decision != Allow {
				continue
			}
			allowed++
			if opaqueVerdict(pc.p, pc.ap, v) {
				opaque++
				continue
			}
			if bad := unexplained(eff[i], v); len(bad) > 0 {
				escapes++
				if escapes <= 20 {
					t.Errorf("ESCAPE %s\n  line: %q\n  verdict: %s; commands %q\n  bash did: %v", pc.name, line, v.Reason, v.Commands, bad)
				}
			}
		}
	}
	t.Logf("red team: %d lines run in real bash under bubblewrap in %v; %d of them escape when run unchecked; %d checks, %d allowed (%d of them code or settings the policy cannot read, on the operator's or owner's word), %d escapes",
		len(lines), ran.Round(time.Millisecond), hostile, checks, allowed, opaque, escapes)
	// The corpus must be hostile, or the test proves nothing: most lines
	// run the marker or touch a canary in real bash.
	if hostile < len(lines)*6/10 {
		t.Errorf("only %d of %d corpus lines have an effect in real bash: the corpus is not testing escapes", hostile, len(lines))
	}
}

// FuzzRealBash: a line that any policy allows is run in real bash in the
// sandbox; running the marker or touching a canary file that the policy's
// verdict does not name is a failure. Only allowlist-mode policies without
// owner approvals are used (their allowed programs cannot fill the disk or
// run code the policy cannot read); the file size is capped.
//
//	go test -run '^$' -fuzz FuzzRealBash -fuzztime 3m ./pkg/execpolicy
func FuzzRealBash(f *testing.F) {
	corpus := redTeamCorpus()
	for i, l := range corpus {
		if i%3 == 0 {
			f.Add(l)
		}
	}
	for _, l := range hiddenCode {
		f.Add(l)
	}
	for _, l := range []string{`echo "${a[@]}" ${#a[@]} ${a[0]} ${a[i]}`, `i=1; echo $((i+1))`, `a=(1 2); echo ${a[i]}`, `echo x > out`} {
		f.Add(l)
	}
	lab := newBashLab(f)
	var pols []*Policy
	for _, preset := range []string{"readonly", "network"} {
		for _, am := range []ApprovalMode{ApprovalDeny, ApprovalAsk, ApprovalAllow} {
			p, err := New(Options{Mode: ModeAllowlist, Preset: preset, Approval: am})
			if err != nil {
				f.Fatal(err)
			}
			pols = append(pols, p)
		}
	}
	f.Fuzz(func(t *testing.T, line string) {
		if len(line) > 1024 || strings.ContainsRune(line, 0) {
			return
		}
		var allowed []Verdict
		for _, p := range pols {
			if v := p.Check(line, nil); v.Decision == Allow {
				allowed = append(allowed, v)
			}
		}
		if len(allowed) == 0 {
			return
		}
		eff := lab.runBatch(t, []string{line}, 3*time.Second)[0]
		for _, v := range allowed {
			if bad := unexplained(eff, v); len(bad) > 0 {
				t.Fatalf("ESCAPE\n  line: %q\n  verdict: %s; commands %q\n  bash did: %v", line, v.Reason, v.Commands, bad)
			}
		}
	})
}
