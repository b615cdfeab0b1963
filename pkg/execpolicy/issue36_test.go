package execpolicy

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/filepolicy"
)

// The exec-policy reproductions of the second red team (issue 36), each
// run under every mode x preset x approval mode x owner approvals
// (allPolicies). Lines that hide code from the judge must be denied in all
// of them: not even the owner's approval can approve what the policy
// cannot show.

// hiddenCode are lines in which bash runs a command the judge would not
// list: quoted or expanded subscripts and arithmetic, names filled with
// text and then evaluated, compound values given to assignment builtins,
// and options that name a shell.
var hiddenCode = []string{
	// Quoted array subscripts are evaluated arithmetically by bash.
	`echo ${a['$(rm -f victim.txt)']}`,
	`a['$(touch x)']=1`,
	`echo "${a['$(touch x)']}"`,
	": ${x['`touch x`']:-y}",
	`[[ -n "${a['$(touch x)']}" ]]`,
	`[[ ${a['$(touch x)']} == y ]]`,
	`case ${a['$(touch x)']} in *) ;; esac`,
	`case x in ${a['$(touch x)']}) ;; esac`,
	"cat <<EOF\n${a['$(touch x)']}\nEOF\n",
	`echo ${PIPESTATUS['$(touch x)']}`,
	`echo ${a["$(touch x)"]}`,
	`echo ${a[$'\x24(touch x)']}`,
	`echo ${a[$i]}`,
	`echo ${a[${i}]}`,
	`echo ${a[i]:'$(touch x)'}`,
	`echo ${a[@]:0:'$(touch x)'}`,
	`declare a['$(touch x)']=1`,
	`x=(['$(touch x)']=1)`,
	`echo $(( a['$(touch x)'] ))`,
	`echo $(( '$(touch x)' ))`,
	`echo $[ a['$(touch x)'] ]`,
	`(( a['$(touch x)'] ))`,
	`(( $x ))`,
	`let "a['\$(touch x)']"`,
	`let 'x=a[$(touch x)]'`,
	`for (( i='$(touch x)'; i<1; i++ )); do :; done`,
	`[[ a['$(touch x)'] -eq 1 ]]`,
	`[[ $x -eq 1 ]]`,
	`[[ "a[\$(touch x)]" -lt 1 ]]`,
	// A name filled with text, then evaluated as arithmetic.
	`x='b[$(touch x)]'; echo ${a[x]}`,
	`x='b[$(touch x)]'; echo $((x))`,
	`read i; echo ${a[i]}`,
	`read -r i < f; (( i ))`,
	`mapfile -t arr < f; echo ${a[arr]}`,
	`printf -v i '%s' 'b[$(touch x)]'; echo ${a[i]}`,
	`for i in 'b[$(touch x)]'; do echo ${a[i]}; done`,
	`for i in *; do echo ${a[i]}; done`,
	`getopts ab i; echo ${a[i]}`,
	`: ${i:='b[$(touch x)]'}; echo $((i))`,
	`export i='b[$(touch x)]'; bash -c 'echo ${a[i]}'`,
	`i='b[$(touch x)]' bash -c 'echo $((i))'`,
	`read; echo ${a[REPLY]}`,
	`read < f; export REPLY; echo $((REPLY))`,
	`REPLY=1; read < f; echo $((REPLY))`,
	`OPTARG=0; getopts a: o; echo $((OPTARG))`,
	`MAPFILE=0; mapfile < f; echo $((MAPFILE))`,
	`REPLY=0; select s in a; do echo $((REPLY)); done`,
	`read -r x < f; declare x; echo $((x))`,
	`[[ x =~ (.*) ]]; echo $((BASH_REMATCH))`,
	`echo ${a[OPTARG]}`,
	`echo $((PWD))`,
	// Compound values given to assignment builtins are parsed again.
	`declare -a x='($(touch f))'`,
	`declare x='($(touch f))'`,
	`typeset -a x='($(touch f))'`,
	`readonly -a x='($(touch f))'`,
	`export -a x='($(touch f))'`,
	`local -a x='($(touch f))'`,
	`declare -A x='([k]=$(touch f))'`,
	`declare -a x=\(\$\(touch f\)\)`,
	`declare -a x=$'(\x24(touch f))'`,
	`declare -a x="($(touch f))"`,
	`declare -a x+='($(touch f))'`,
	`declare -a x='y' z='($(touch f))'`,
	`declare -a 'x=($(touch f))'`,
	`declare -a x=([$(touch f)]=1)`,
	`declare -a x=(1 '$(touch f)')`,
	`declare -a x="$y"`,
	`builtin declare -a x='($(touch f))'`,
	`command typeset -a x='($(touch f))'`,
	`\declare -a x='($(touch f))'`,
	// Options that name a shell.
	`wget --use-askpass=/bin/sh http://x`,
	`wget --use-askpass /bin/sh http://x`,
	`wget --use-ask=/bin/sh http://x`,
	`wget --use-a=sh http://x`,
	`wget -e use_askpass=/bin/sh http://x`,
	`wget -e 'use_askpass = /bin/sh' http://x`,
	`wget -qeuse_askpass=/bin/sh http://x`,
	`wget -e useaskpass=bash http://x`,
	`wget -e USE-ASKPASS=/bin/sh http://x`,
	`wget --execute=use_askpass=/bin/sh http://x`,
	`wget --exec use_askpass=sh http://x`,
	`wget http://x --use-askpass=/bin/sh`,
	`wget --use-askpass='sh -c sudo' http://x`,
	`WGETRC=x.rc wget http://x`,
	`env WGETRC=x.rc wget http://x`,
	`tar --to-command=sh -xf a.tar`,
	`tar --to-comm=sh -xf a.tar`,
	`tar --use-compress-program=sh -xf a.tar`,
	`tar --use=sh -xf a.tar`,
	`tar -Ish -xf a.tar`,
	`tar -x -I sh -f a.tar`,
	`tar --checkpoint=1 --checkpoint-action=exec=sh -cf a.tar .`,
	`tar --info-script=sh -cf a.tar .`,
	`TAR_OPTIONS=--to-command=sh tar -xf a.tar`,
	`rsync -e sh a b:c`,
	`rsync -ave sh a b:c`,
	`rsync --rsh=sh a b:c`,
	`rsync --rs=sh a b:c`,
	`RSYNC_RSH=sh rsync a b:c`,
	`sort --compress-program=sh x`,
	`sort --compress-p=sh x`,
	`man -P sh ls`,
	`man --pager=sh ls`,
	`zip --unzip-command=sh a.zip x`,
	`git -c core.pager=sh log`,
	`git -c core.sshCommand=sh fetch`,
	`git -c alias.x='!touch f' x`,
	`git -c core.fsmonitor=bash status`,
	`git config core.fsmonitor 'sudo id'`,
	`OPENSSL_CONF=x.cnf curl https://x`,
	`XDG_CONFIG_HOME=. git log`,
}

// The nesting bomb of the issue: a line of about 64 KiB with 32,000
// nested braces made the check allocate until the process died.
func nestingBomb() string { return "echo " + strings.Repeat("{", 32000) + strings.Repeat("}", 32000) }

func TestIssue36HiddenCodeDeniedEverywhere(t *testing.T) {
	for _, pc := range allPolicies(t) {
		for _, line := range hiddenCode {
			if v := pc.p.Check(line, pc.ap); v.Decision != Deny {
				t.Errorf("%s\n  %q = %s (%s), want deny", pc.name, line, v.Decision, v.Reason)
			}
		}
	}
}

// The harmless forms the issue names stay allowed (they used to be
// refused), in allowlist mode under every preset and approval mode, and in
// full mode.
func TestIssue36HarmlessArraysAllowed(t *testing.T) {
	lines := []string{
		`echo "${a[@]}"`, `echo ${#a[@]}`, `echo "${a[*]}"`, `echo ${a[0]}`, `echo ${a[i]}`, `echo ${!a[@]}`,
		`echo ${#a[0]}`, `echo "${a[12]}" ${a[0x1f]}`, `a=(x y); echo "${a[@]}" ${#a[@]}`,
		`a=(x y); for i in 0 1; do echo "${a[i]}"; done`, `i=1; echo ${a[i]} $((i + 1))`, `echo $((1 + 2 * 3))`,
		`(( n = 2 + 3 )); echo $n`, `for (( i = 0; i < 3; i++ )); do echo $i; done`, `echo ${a[i+1]} ${a[n-1]}`,
		`x=1; [[ x -eq 1 ]] && echo yes`, `a[0]=x; a[i]=y`, `declare -a arr; arr[1]=z`, `echo ${a[@]:1:2}`,
		`wget -e robots=off http://x`, `wget -q -O out.html http://x`,
	}
	for _, mode := range []Mode{ModeAllowlist, ModeFull} {
		for _, preset := range []string{"readonly", "network", "development", "custom"} {
			for _, am := range []ApprovalMode{ApprovalDeny, ApprovalAsk, ApprovalAllow} {
				p, err := New(Options{Mode: mode, Preset: preset, Approval: am})
				if err != nil {
					t.Fatal(err)
				}
				for _, line := range lines {
					if strings.HasPrefix(line, "wget") && mode == ModeAllowlist && (preset == "readonly" || preset == "custom") {
						continue // wget is not in these allowlists
					}
					if v := p.Check(line, nil); v.Decision != Allow {
						t.Errorf("mode=%s preset=%s approval=%s %q = %s (%s), want allow", mode, preset, am, line, v.Decision, v.Reason)
					}
				}
			}
		}
	}
}

// Lines whose effect the policy cannot read (a settings file, a wgetrc
// command it does not know, paths read from a file at run time, a script
// named by an option) are never allowed in allowlist mode without the
// owner's word: not through execApprovalMode allow, not through the
// workspace file policy.
func TestIssue36NeedsTheOwnersWord(t *testing.T) {
	ws := fixtureWorkspace(t)
	fp, err := filepolicy.New(filepolicy.Options{Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	lines := []string{
		`find . -files0-from list -delete`, `find -files0-from list -delete`, `find . -files0-from list -fprint out`,
		`find . -files0-from list -exec touch {} \;`, `wget -e use_askpass=./ask.sh http://x`, `wget --config=x.rc http://x`,
		`wget -e logfile=/etc/x http://x`, `tar -I ./z.sh -xf a.tar`, `tar xIf ./z.sh a.tar`, `git grep -Opager x`,
		`git --exec-path=. log`, `git rebase -x ./t.sh main`, `git difftool -x ./d.sh`, `git -c include.path=./x.cfg status`,
	}
	for _, files := range []*filepolicy.Policy{nil, fp} {
		for _, preset := range []string{"readonly", "network", "development", "custom"} {
			for _, am := range []ApprovalMode{ApprovalDeny, ApprovalAsk, ApprovalAllow} {
				p, err := New(Options{Mode: ModeAllowlist, Preset: preset, Approval: am, Files: files})
				if err != nil {
					t.Fatal(err)
				}
				for _, line := range lines {
					v := p.Check(line, nil)
					if v.Decision == Allow {
						t.Errorf("files=%v preset=%s approval=%s %q = allow (%s), want deny or ask", files != nil, preset, am, line, v.Reason)
					}
					if am != ApprovalAsk && v.Decision != Deny {
						t.Errorf("files=%v preset=%s approval=%s %q = %s (%s), want deny", files != nil, preset, am, line, v.Decision, v.Reason)
					}
				}
			}
		}
	}
}

// icqq: a flag or another case anywhere before the subcommand, or an id
// between its words, is unknown syntax and counts as sensitive: the
// variant gets the verdict of "icqq group kick 1" under every policy.
func TestIssue36IcqqUnknownSyntaxIsSensitive(t *testing.T) {
	variants := []string{
		`icqq -v group kick 1`, `icqq Group KICK 1`, `icqq GROUP kick 1`, `icqq group Kick 1`, `icqq group -v kick 1`,
		`icqq --debug group kick 1`, `icqq group 1 kick`, `icqq 1 group kick`, `icqq group kick 1 --force`,
		`icqq grоup kick 1`, `icqq 'group' "kick" 1`, `icqq group  kick  1`, `icqq Friend DELETE 1`, `icqq -- group kick 1`,
	}
	for _, pc := range allPolicies(t) {
		ref := pc.p.Check(`icqq group kick 1`, pc.ap)
		for _, line := range variants {
			v := pc.p.Check(line, pc.ap)
			if v.Decision != ref.Decision && !(ref.Decision == Ask && v.Decision == Deny) {
				t.Errorf("%s\n  %q = %s (%s), want %s like icqq group kick 1", pc.name, line, v.Decision, v.Reason, ref.Decision)
			}
		}
	}
	p, _ := New(Options{Mode: ModeAllowlist, Preset: "readonly"})
	for _, ok := range []string{`icqq friend like 1`, `icqq status`, `icqq send-msg 123 hello`} {
		if v := p.Check(ok, nil); v.Decision != Allow {
			t.Errorf("%q = %s (%s), want allow", ok, v.Decision, v.Reason)
		}
	}
}

// TestIssue36NestingBounded: deep nesting and brace expansion are refused
// before the parser and mvdan.cc/sh's expanders see them, in little time
// and memory (the 32,000-brace line used to end the process with "out of
// memory"). The figures are logged.
func TestIssue36NestingBounded(t *testing.T) {
	shapes := map[string]string{
		"32000 nested braces":       nestingBomb(),
		"nested brace expansion":    "echo " + strings.Repeat("{a,", 16000) + "b" + strings.Repeat("}", 16000),
		"nested ${x:-…}":            "echo " + strings.Repeat("${x:-", 10000) + "y" + strings.Repeat("}", 10000),
		"nested $((…))":             "echo $" + strings.Repeat("((", 15000) + "1" + strings.Repeat("))", 15000),
		"nested { …; }":             strings.Repeat("{ ", 16000) + "ls" + strings.Repeat(";}", 16000),
		"nested subshells":          strings.Repeat("(", 30000) + "ls" + strings.Repeat(")", 30000),
		"brace product 2^40":        "echo " + strings.Repeat("{a,b}", 40),
		"brace sequence 10^9":       "echo {1..1000000000}",
		"brace product in bash -c":  `bash -c 'echo ` + strings.Repeat("{a,b}", 30) + `'`,
		"64 KiB of ${a[x]} in echo": "echo " + strings.Repeat("${a[x]}", 9000),
		"1,200 words of 1,024":      "echo " + strings.Repeat(strings.Repeat("{a,b}", 10)+" ", 1200),
		"depth 60, 1,000 times":     strings.Repeat(strings.Repeat("(", 30)+"ls"+strings.Repeat(")", 30)+";", 1000),
	}
	p, err := New(Options{Mode: ModeFull})
	if err != nil {
		t.Fatal(err)
	}
	for name, line := range shapes {
		if len(line) > MaxCommandLine {
			t.Fatalf("%s: %d bytes, over MaxCommandLine: the test would not reach the parser", name, len(line))
		}
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		start := time.Now()
		v := p.Check(line, nil)
		took := time.Since(start)
		runtime.ReadMemStats(&m1)
		alloc := m1.TotalAlloc - m0.TotalAlloc
		t.Logf("%-26s %6d bytes: %-5s in %v, %.1f MiB allocated (%s)", name, len(line), v.Decision, took.Round(time.Microsecond), float64(alloc)/(1<<20), v.Reason)
		if name != "64 KiB of ${a[x]} in echo" && name != "depth 60, 1,000 times" && v.Decision != Deny {
			t.Errorf("%s: %s (%s), want deny", name, v.Decision, v.Reason)
		}
		// Wide margins for a busy machine; the figures are in the log.
		if took > 3*time.Second {
			t.Errorf("%s: check took %v", name, took)
		}
		// A refused bomb allocates next to nothing; a long line that is
		// judged allocates a few MiB (much more under -race, which drops
		// what sync.Pool would keep for the parser).
		limit := uint64(32 << 20)
		if v.Decision == Allow {
			limit = 256 << 20
		}
		if alloc > limit {
			t.Errorf("%s: check allocated %d MiB", name, alloc>>20)
		}
	}
}

// Run-time arguments where an option could stand, to a tool with options
// that name programs, need the owner's word in allowlist mode: $OPTS could
// be --use-askpass=/bin/sh or --compress-program=sh.
func TestIssue36RuntimeOptionsNeedTheOwner(t *testing.T) {
	lines := []string{
		`OPT=--use-askpass=/bin/sh; wget $OPT http://x`, `wget "$URL"`, `X=--compress-program=sh; sort $X f`,
		`git $X log`, `git ${X} -c core.pager=sh log`, `git log $X`, `tar $OPTS -xf a.tar`, `rsync $O a b`,
	}
	for _, preset := range []string{"readonly", "network", "development"} {
		for _, am := range []ApprovalMode{ApprovalDeny, ApprovalAsk, ApprovalAllow} {
			p, err := New(Options{Mode: ModeAllowlist, Preset: preset, Approval: am})
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range lines {
				if v := p.Check(line, nil); v.Decision == Allow {
					t.Errorf("preset=%s approval=%s %q = allow (%s), want deny or ask", preset, am, line, v.Reason)
				}
			}
		}
	}
	p, _ := New(Options{Mode: ModeAllowlist, Preset: "network"})
	for _, ok := range []string{`wget "https://$HOST/x"`, `wget -O "$OUT" https://x`, `echo $((RANDOM % 6 + 1))`, `for i in {1..3}; do echo ${a[i]}; done`} {
		if v := p.Check(ok, nil); v.Decision != Allow {
			t.Errorf("%q = %s (%s), want allow", ok, v.Decision, v.Reason)
		}
	}
}
