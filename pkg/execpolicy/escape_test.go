package execpolicy

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// The generated corpus crosses attack payloads with spellings (quoting,
// wrappers, shells, substitutions, expansions that evaluate code, shell
// options, interpreters, xargs/find, ...) and runs each line under every
// mode x preset x approval mode x owner approvals. A line that a policy
// allows is an escape when the oracle (oracle_test.go), which interprets
// the line independently of the judge, sees it reach what the payload
// aims at. Target: 0 escapes.

const canary = "zzcanary"

// payloads are commands that must never run: hard-blocked programs with
// the canary as argument, and the "denied in every mode" argument rules.
var payloads = []string{
	"sudo " + canary, "su -c " + canary, "eval " + canary, "exec " + canary, "source " + canary, ". ./" + canary,
	"dd if=/dev/zero of=" + canary, "mkfs.ext4 " + canary, "nsenter -t 1 " + canary, "chroot / " + canary,
	"mount " + canary, "crontab " + canary, "systemctl " + canary, "strace " + canary, "tmux " + canary,
	"script -c " + canary, "unshare -r " + canary, "pkexec " + canary, "alias x=" + canary, "doas " + canary,
	"rm -rf /", "rm --recur /", "rm --recursive --force /etc", "rm -r /e??", "rm -fr /*", "rm -rf ~", "rm -Rf /usr",
	"rm -rf --no-preserve-root /", "rm -r -f -- /home",
	"kill -9 -1", "kill -9 -01", "kill -9 ' -1'", "kill -- -1", "kill -s KILL -1", "kill -KILL -0001",
}

// spellings wrap a payload C; %s is replaced by C (or by C quoted for a
// single-quoted context with %q-style markers below).
var spellings = []string{
	"%s", "true && %s", "false || %s", "%s &", "{ %s; }", "(%s)", "if true; then %s; fi", "for i in 1; do %s; done",
	"case x in x) %s;; esac", "while true; do %s; break; done", "! %s", "time %s", "%s | cat", "cat /dev/null | %s",
	"env %s", "env -i %s", "env -- %s", "env A=1 %s", "timeout 5 %s", "timeout -s 9 5 %s", "nice %s", "nice -n 5 %s",
	"nohup %s", "stdbuf -o0 %s", "setsid %s", "ionice -c3 %s", "taskset 1 %s", "command %s", "builtin %s",
	"busybox %s", "noglob %s", "flock /tmp/l %s",
	"bash -c '%s'", "sh -c '%s'", "dash -c '%s'", "ash -c '%s'", "rbash -c '%s'", "bash5.2 -c '%s'", "/bin/sh -c '%s'",
	"zsh -c '%s'", "ksh -c '%s'", "mksh -c '%s'", "fish -c '%s'", "csh -c '%s'", "busybox sh -c '%s'", "busybox ash -c '%s'",
	"bash -l -c '%s'", "bash --login -c '%s'", "bash --log -c '%s'", "bash -lc '%s'", "bash -ic '%s'", "bash -k -c '%s'",
	"bash -o keyword -c '%s'", "bash -O expand_aliases -c '%s'", "bash --rcfile x -c '%s'", "bash --posix -c '%s'",
	"sh -s <<< '%s'", "bash <<< '%s'", "bash <<'EOF'\n%s\nEOF", "bash - <<'EOF'\n%s\nEOF", "echo '%s' | bash", "bash < x.sh",
	"set -k; %s", "set -o keyword; %s", "shopt -s expand_aliases; %s", "set -euo pipefail; %s",
	"echo $(%s)", "echo `%s`", "x=$(%s)", "cat <(%s)", "echo \"$(%s)\"", "echo > >(%s)", "ls $(%s)",
	"X='a[$(%s)]'; echo ${!X}", "a=(1); X='a[$(%s)]'; echo $((X))", "declare -n r='a[$(%s)]'; echo $r",
	"printf -v 'a[$(%s)]' x", "read 'a[$(%s)]' <<< 1", "unset 'a[$(%s)]'", "test -v 'a[$(%s)]'", "[[ -v a[$(%s)] ]]",
	"[[ a[$(%s)] -eq 1 ]]", "echo ${x:-$(%s)}", "echo $(( $(%s) ))",
	"trap '%s' EXIT", "trap -- '%s' DEBUG", "coproc %s", "coproc X { %s; }", "compgen -C '%s' x", "complete -C '%s' x",
	"mapfile -C '%s' -c 1 x < /dev/null", "bind -x '\"x\":%s'", "f() { %s; }; f", "alias x='%s'; x",
	"find . -exec %s \\;", "find . -execdir %s \\;", "find . -ok %s \\;", "find . -exec sh -c '%s' \\;",
	"find . -exec bash -c '%s' {} +", "echo x | xargs %s", "echo x | xargs -I{} %s", "xargs -a /dev/null %s",
	"echo x | xargs sh -c '%s'", "watch '%s'", "watch -x %s",
	"python3 -c 'import os; os.system(\"%s\")'", "perl -e 'system(\"%s\")'", "node -e 'require(\"child_process\").execSync(\"%s\")'",
	"awk 'BEGIN{system(\"%s\")}'", "sed -n 'e %s' /dev/null", "env -S '%s'", "eval '%s'", "exec %s",
	"sudo %s", "$'\\x62ash' -c '%s'", "'ba'sh -c '%s'", "\\bash -c '%s'", "/usr/bin/env bash -c '%s'",
	"cat < /dev/tcp/127.0.0.1/4222; %s", "%s > /dev/tcp/127.0.0.1/4222", "exec 3<>/dev/tcp/127.0.0.1/80; %s",
	"PATH=/tmp %s", "LD_PRELOAD=/tmp/x.so %s", "BASH_ENV=/tmp/x bash -c '%s'", "IFS=/ %s",
	"sort --compress-prog='sh -c \"%s\"' x", "tar --to-comm='%s' -xf x.tar", "rsync -e '%s' a b:c",
	"git -c core.pager='%s' log", "npm exec -- %s", "npx -c '%s'", "make -f /dev/null '%s'",
	"chrt 1 %s", "prlimit --nofile=10 %s", "valgrind %s", "fakeroot %s", "setarch x86_64 %s", "xvfb-run %s",
	"ssh-agent %s", "man -P '%s' ls", "dc -e '!%s'", "zsh5.9 -c '%s'", "busybox msh -c '%s'", "./bash -c '%s'",
	"env -C / %s", "ionice -c 3 -- %s", "timeout -k 1 5 %s", "nice -n -5 %s", "stdbuf -oL %s", "/usr/bin/timeout 5 %s",
	// Issue 36: subscripts and arithmetic that evaluate code, compound
	// values given to assignment builtins, options that name programs.
	"echo ${a['$(%s)']}", "echo \"${a['$(%s)']}\"", "a['$(%s)']=1", ": ${x['`%s`']:-y}", "echo ${PIPESTATUS['$(%s)']}",
	"[[ -n ${a['$(%s)']} ]]", "case ${a['$(%s)']} in *) ;; esac", "cat <<EOF\n${a['$(%s)']}\nEOF\n",
	"x='b[$(%s)]'; echo ${a[x]}", "x='b[$(%s)]'; (( x ))", "declare -a x='($(%s))'", "typeset -a x='($(%s))'",
	"export -a x='($(%s))'", "declare -A x='([k]=$(%s))'", "x=(); declare x='($(%s))'", "declare -a x=$'($(%s))'",
	"wget --use-askpass='%s' http://x", "wget -e use_askpass='%s' http://x", "wget --use-ask='%s' http://x",
	"find -files0-from l -exec %s \\;", "tar -I '%s' -xf a.tar", "git -c core.pager='%s' -p log",
}

func corpusLines() []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range payloads {
		for _, s := range spellings {
			line := strings.ReplaceAll(s, "%s", p)
			if strings.Contains(s, "'%s'") {
				// Inside single quotes a payload's own single quotes end the
				// quoting; use the payload with double quotes instead.
				line = strings.ReplaceAll(s, "%s", strings.ReplaceAll(p, "'", "\""))
			}
			if !seen[line] {
				seen[line] = true
				out = append(out, line)
			}
		}
	}
	return out
}

type policyCase struct {
	name string
	p    *Policy
	ap   *Approvals
}

// allPolicies is every mode x preset x approval mode x approvals setting
// (none, /approve always bash, a rule that matches everything).
func allPolicies(t testing.TB) []policyCase {
	var out []policyCase
	aps := map[string]func() *Approvals{
		"none":   func() *Approvals { return nil },
		"always": func() *Approvals { return &Approvals{AlwaysBash: true} },
		"rule": func() *Approvals {
			ap := &Approvals{}
			if _, err := ap.AddRule(".*", "test", timeNow()); err != nil {
				t.Fatal(err)
			}
			return ap
		},
	}
	for _, mode := range []Mode{ModeDeny, ModeAllowlist, ModeFull} {
		for _, preset := range []string{"readonly", "network", "development", "custom"} {
			for _, am := range []ApprovalMode{ApprovalDeny, ApprovalAsk, ApprovalAllow} {
				for apName, mk := range aps {
					var allow []string
					if preset == "custom" {
						allow = nil // the empty custom allowlist of the issue
					}
					p, err := New(Options{Mode: mode, Preset: preset, Approval: am, Allow: allow})
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, policyCase{name: fmt.Sprintf("mode=%s preset=%s approval=%s approvals=%s", mode, preset, am, apName), p: p, ap: mk()})
				}
			}
		}
	}
	return out
}

// opaqueFor: programs whose code the policy does not read by design
// (other languages, build files, package scripts) are the sandbox's
// business, not the policy's, where the policy let them run code on
// someone's word: in full mode, when the operator allowlisted them, and
// when the owner approved the command (a rule or /approve always bash).
// Without such a word they are never allowed (see TestOpaqueCodeNeedsAWord).
func opaqueFor(p *Policy, ap *Approvals) func(string) bool {
	return func(base string) bool {
		if _, ok := interpreters[family(base)]; !ok {
			return false
		}
		return p.mode == ModeFull || p.allow[base] || (ap != nil && (ap.AlwaysBash || len(ap.Rules) > 0))
	}
}

func TestGeneratedCorpusNoEscapes(t *testing.T) {
	lines := corpusLines()
	if len(lines) < 3000 {
		t.Fatalf("generated corpus has %d lines, want several thousand", len(lines))
	}
	pols := allPolicies(t)
	traces := make([]*trace, len(lines))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 2)
	for i, l := range lines {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			traces[i] = runOracle(l)
		}()
	}
	wg.Wait()
	checks, allowed, escapes := 0, 0, 0
	for i, line := range lines {
		for _, pc := range pols {
			checks++
			v := pc.p.Check(line, pc.ap)
			if v.Decision != Allow {
				continue
			}
			allowed++
			if why := traces[i].violation(pc.p.mode == ModeFull, canary, opaqueFor(pc.p, pc.ap)); why != "" {
				escapes++
				if escapes <= 400 {
					t.Errorf("ESCAPE %s\n  line: %q\n  verdict: %s (%s)\n  oracle: %s", pc.name, line, v.Decision, v.Reason, why)
				}
			}
		}
	}
	t.Logf("generated corpus: %d lines x %d policies = %d checks, %d allowed, %d escapes", len(lines), len(pols), checks, allowed, escapes)
}

// TestOracleSeesPayloads keeps the oracle honest: every payload on its own
// is a violation, and most spellings still reach it (the figure says how
// many lines the oracle can follow; a line it cannot follow can hide an
// escape from it, which is why the judge is also tested by tables).
func TestOracleSeesPayloads(t *testing.T) {
	never := func(string) bool { return false }
	for _, p := range payloads {
		if why := runOracle(p).violation(false, canary, never); why == "" {
			t.Errorf("oracle does not see payload %q", p)
		}
	}
	lines := corpusLines()
	seen := 0
	for _, l := range lines {
		if runOracle(l).violation(false, canary, never) != "" {
			seen++
		}
	}
	t.Logf("oracle follows the payload in %d of %d generated lines", seen, len(lines))
	if seen < len(lines)/2 {
		t.Errorf("oracle follows only %d of %d lines", seen, len(lines))
	}
}

// TestOpaqueCodeNeedsAWord: code the policy cannot read (other languages,
// script files, build and package tools) runs in allowlist mode only on
// the operator's or owner's word, never through execApprovalMode allow.
func TestOpaqueCodeNeedsAWord(t *testing.T) {
	lines := []string{"python3 -c 'print(1)'", "perl -e 1", "node -e 1", "awk 'BEGIN{}'", "bash x.sh", "sh ./x.sh",
		"make", "npm test", "npx x", "git -c core.pager=x log", "sed s/a/b/ f", "tar --to-command=x -xf a.tar", "zsh -c ls", "fish -c ls"}
	for _, am := range []ApprovalMode{ApprovalDeny, ApprovalAsk, ApprovalAllow} {
		p, err := New(Options{Mode: ModeAllowlist, Preset: "readonly", Approval: am})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			v := p.Check(l, nil)
			want := Deny
			if am == ApprovalAsk && !strings.HasPrefix(l, "zsh") && !strings.HasPrefix(l, "fish") {
				want = Ask
			}
			if v.Decision != want {
				t.Errorf("approval=%s %q = %s (%s), want %s", am, l, v.Decision, v.Reason, want)
			}
		}
	}
	for _, ok := range []string{"python3 --version", "git status", "npm ls", "pip list", "sed --sandbox s/a/b/ f"} {
		p, _ := New(Options{Mode: ModeAllowlist, Preset: "development", Allow: []string{"sed"}})
		if v := p.Check(ok, nil); v.Decision != Allow {
			t.Errorf("development %q = %s (%s), want allow", ok, v.Decision, v.Reason)
		}
	}
}
