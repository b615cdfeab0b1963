package execpolicy

import (
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/agentbus/agentbus/pkg/filepolicy"
)

// Shell options. Options that change how the shell parses or expands
// words make the policy's reading of the line wrong (set -k turns every
// NAME=value argument into an environment entry of the command), so only
// options known not to do that are accepted, in every mode, for `set`,
// `shopt` and the flags of a shell invocation.
const shellFlagsOK = "abBCeEfhHmnPtTuvxr"

var setONamesOK = map[string]bool{
	"allexport": true, "braceexpand": true, "errexit": true, "errtrace": true, "functrace": true, "hashall": true,
	"histexpand": true, "history": true, "ignoreeof": true, "monitor": true, "noclobber": true, "noexec": true,
	"noglob": true, "nolog": true, "notify": true, "nounset": true, "onecmd": true, "physical": true,
	"pipefail": true, "verbose": true, "xtrace": true, "emacs": true, "vi": true,
}

var shoptNamesOK = map[string]bool{
	"nullglob": true, "failglob": true, "dotglob": true, "globstar": true, "nocaseglob": true, "nocasematch": true,
	"extglob": true, "globasciiranges": true, "lastpipe": true, "inherit_errexit": true, "checkwinsize": true,
	"cmdhist": true, "lithist": true, "histappend": true, "checkhash": true, "shift_verbose": true, "xpg_echo": true,
}

// setArgs judges the arguments of `set` (also used for a shell's own
// flags): it reports false after denying.
func (j *judge) setArgs(what string, args []token) bool {
	for i := 0; i < len(args); i++ {
		t := args[i]
		if t.dyn {
			j.deny("%s with a dynamic argument (it could change how the shell parses)", what)
			return false
		}
		a := t.val
		if a == "--" || a == "-" || len(a) < 2 || (a[0] != '-' && a[0] != '+') {
			return true // positional parameters follow
		}
		if strings.HasPrefix(a, "--") {
			j.deny("%s %s is not understood by the policy", what, a)
			return false
		}
		for k := 1; k < len(a); k++ {
			c := a[k]
			if c == 'o' {
				if i+1 >= len(args) {
					break // set -o: prints the options
				}
				i++
				if args[i].dyn || !setONamesOK[args[i].val] {
					j.deny("%s -o %s changes how the shell parses or expands words; it is not allowed", what, args[i])
					return false
				}
				continue
			}
			if strings.IndexByte(shellFlagsOK, c) < 0 {
				j.deny("%s %c%c changes how the shell parses or runs commands; it is not allowed", what, a[0], c)
				return false
			}
		}
	}
	return true
}

// shoptArgs judges shopt: -s/-u only of options that leave parsing alone.
func (j *judge) shoptArgs(args []token) bool {
	setting, oNames := false, false
	var names []token
	for _, t := range args {
		if t.dyn {
			j.deny("shopt with a dynamic argument")
			return false
		}
		if strings.HasPrefix(t.val, "-") && len(t.val) > 1 {
			for _, c := range t.val[1:] {
				switch c {
				case 's', 'u':
					setting = true
				case 'o':
					oNames = true
				case 'p', 'q':
				default:
					j.deny("shopt -%c is not understood by the policy", c)
					return false
				}
			}
			continue
		}
		names = append(names, t)
	}
	if !setting {
		return true
	}
	for _, t := range names {
		ok := shoptNamesOK[t.val]
		if oNames {
			ok = setONamesOK[t.val]
		}
		if !ok {
			j.deny("shopt %s changes how the shell parses or expands words; it is not allowed", t.val)
			return false
		}
	}
	return true
}

// codeStringBuiltins run a string argument as shell code later
// (completion functions and commands, readline bindings). Denied in every
// mode: the policy cannot follow when or with what they run.
func (j *judge) codeStringBuiltin(base string, args []token) bool {
	opts := map[string]string{"compgen": "CF", "complete": "CF", "bind": "x"}[base]
	if opts == "" {
		return true
	}
	for _, t := range args {
		if t.dyn {
			j.deny("%s with a dynamic argument", base)
			return false
		}
		if strings.HasPrefix(t.val, "-") && strings.ContainsAny(t.val[1:], opts) {
			j.deny("%s %s runs a string as code later; it is not allowed", base, t.val)
			return false
		}
	}
	return true
}

// protectedDirs are the directories "rm -r" must never be pointed at, in
// any mode (the home directory is added from "~").
var protectedDirs = []string{"/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
	"/media", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var", "/workspace"}

var rmLong = []string{"--force", "--interactive", "--one-file-system", "--no-preserve-root", "--preserve-root",
	"--recursive", "--dir", "--verbose", "--help", "--version"}

// rmRule is the "rm -r of / or the home directory" rule. It parses rm's
// options as rm does (clusters, long options by unique prefix, "--") and
// is denied when the recursion could reach a protected directory: a
// target that is, or is a glob that matches, a protected directory, "~",
// a relative path that leaves the working directory (or any relative path
// once the line changed directory), and any run-time value at all when the
// removal is or may be recursive.
func (j *judge) rmRule(args []token) string {
	recursive, maybe, dyn := false, false, false
	var targets []token
	opts := true
	for _, t := range args {
		if t.dyn {
			dyn = true
			if opts && !t.safe {
				maybe = true
			}
			targets = append(targets, t)
			continue
		}
		a := t.val
		switch {
		case !opts || a == "-" || !strings.HasPrefix(a, "-"):
			targets = append(targets, t)
		case a == "--":
			opts = false
		case strings.HasPrefix(a, "--"):
			name, _, _ := strings.Cut(a, "=")
			full, ok := filepolicy.LongOption(name, rmLong)
			switch {
			case !ok:
				maybe = true // rm refuses it, but do not guess
			case full == "--recursive":
				recursive = true
			case full == "--no-preserve-root":
				return "rm --no-preserve-root"
			}
		default:
			if strings.ContainsAny(a[1:], "rR") {
				recursive = true
			}
		}
	}
	if !recursive && !maybe {
		return ""
	}
	if dyn {
		if !recursive {
			return "rm with an argument only known at run time (it could be -r and a target)"
		}
		return "rm -r with an argument only known at run time"
	}
	for _, t := range targets {
		if why := j.protectedTarget(t.val, t.glob); why != "" {
			return "rm -r of " + why
		}
	}
	return ""
}

// protectedTarget says why a recursive removal or deletion of p is
// catastrophic, or "" when it is not.
func (j *judge) protectedTarget(p string, glob bool) string {
	if strings.HasPrefix(p, "~") {
		return "the home directory"
	}
	if !strings.HasPrefix(p, "/") {
		c := path.Clean(p)
		if c == ".." || strings.HasPrefix(c, "../") {
			return "a path above the working directory"
		}
		if j.cwdChanged {
			return "a relative path after the command line changed directory"
		}
		return ""
	}
	c := path.Clean(p)
	for _, d := range protectedDirs {
		if c == d {
			return d
		}
		if glob {
			if ok, err := path.Match(c, d); err != nil || ok {
				return d + " (through the glob " + p + ")"
			}
		}
	}
	if glob && (strings.HasPrefix(c, "/*") || strings.HasPrefix(c, "/?") || strings.HasPrefix(c, "/[")) {
		return "top-level directories (through the glob " + p + ")"
	}
	return ""
}

// killRule denies signals to every process: a pid operand that is a
// run-time value or that kill reads as -1 (kill parses numbers with
// strtol: " -1", "-01", "-0001" are all -1).
func killRule(base string, args []token) string {
	if base == "pkill" || base == "killall" {
		return pkillRule(base, args)
	}
	sigDone := false
	for i := 0; i < len(args); i++ {
		t := args[i]
		if t.dyn {
			return base + " with an argument only known at run time"
		}
		a := t.val
		if !sigDone {
			switch {
			case a == "--":
				sigDone = true
				continue
			case a == "-s" || a == "-n" || a == "--signal":
				i++
				sigDone = true
				continue
			case a == "-l" || a == "-L" || a == "--list" || a == "--table":
				return ""
			case strings.HasPrefix(a, "-") && i+1 < len(args):
				sigDone = true // -9, -KILL, -SIGKILL, -1 (SIGHUP) before the pids
				continue
			}
			sigDone = true
		}
		if n, ok := strtol(a); ok && n == -1 {
			return base + " of every process (pid -1)"
		}
	}
	// A lone "kill -1": the shell reads it as a pid for some spellings.
	if len(args) == 1 {
		if n, ok := strtol(args[0].val); ok && n == -1 {
			return base + " of every process (pid -1)"
		}
	}
	return ""
}

// strtol reads an integer the way kill does: surrounding blanks, a sign,
// leading zeros.
func strtol(s string) (int64, bool) {
	s = strings.Trim(s, " \t\n\v\f\r")
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// pkillRule: a pattern that matches every name, or selecting processes
// only by user, group, session, terminal or parent, signals everything.
func pkillRule(base string, args []token) string {
	var patterns []string
	for i := 0; i < len(args); i++ {
		t := args[i]
		if t.dyn {
			return base + " with an argument only known at run time"
		}
		a := t.val
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			// Options with a value: pkill -u/-U/-g/-G/-P/-s/-t/-F/--ns/--signal, killall -u/-s/-o/-y.
			if len(a) == 2 && strings.ContainsRune("uUgGPstFoyn", rune(a[1])) {
				i++
			}
			continue
		}
		patterns = append(patterns, a)
	}
	if len(patterns) == 0 {
		return base + " without a name pattern (it selects every process of a user, group or session)"
	}
	for _, p := range patterns {
		re, err := regexp.CompilePOSIX(p)
		if err != nil || re.MatchString("") || re.MatchString("agentbus") {
			return base + " with a pattern that matches every process"
		}
	}
	return ""
}

// Interpreters run code the policy cannot read (a script in another
// language, a script file, a build file, package scripts). families maps a
// program family to the invocations that run no such code: the exact
// argument lists, or the first argument (a subcommand) that is safe.
type interpSpec struct {
	safeArgs map[string]bool // a single argument that runs nothing (--version)
	safeSub  map[string]bool // a first argument (subcommand) that runs nothing
	// codeOpts are options that make an otherwise ordinary program run
	// code (tar --to-command, ssh -o ProxyCommand, rsync -e); with
	// codeOpts set, every other invocation is ordinary.
	codeShort string
	codeLong  []string
	allLong   []string // every long option, for prefix matching of codeLong
}

var versionHelp = map[string]bool{"--version": true, "-v": true, "-V": true, "--help": true, "-h": true, "version": true, "help": true}

func subs(s string) map[string]bool {
	m := map[string]bool{}
	for _, x := range strings.Fields(s) {
		m[x] = true
	}
	return m
}

var interpreters = map[string]interpSpec{
	"python": {safeArgs: versionHelp}, "pypy": {safeArgs: versionHelp}, "perl": {safeArgs: versionHelp},
	"ruby": {safeArgs: versionHelp}, "irb": {safeArgs: versionHelp}, "node": {safeArgs: versionHelp},
	"nodejs": {safeArgs: versionHelp}, "deno": {safeArgs: versionHelp}, "php": {safeArgs: versionHelp},
	"lua": {safeArgs: versionHelp}, "luajit": {safeArgs: versionHelp}, "tclsh": {safeArgs: versionHelp},
	"wish": {safeArgs: versionHelp}, "rscript": {safeArgs: versionHelp}, "julia": {safeArgs: versionHelp},
	"java": {safeArgs: versionHelp}, "jshell": {safeArgs: versionHelp}, "groovy": {safeArgs: versionHelp},
	"awk": {safeArgs: versionHelp}, "gawk": {safeArgs: versionHelp}, "mawk": {safeArgs: versionHelp}, "nawk": {safeArgs: versionHelp},
	"busybox-awk": {safeArgs: versionHelp},
	"vim":         {safeArgs: versionHelp}, "vi": {safeArgs: versionHelp}, "nvim": {safeArgs: versionHelp}, "ex": {safeArgs: versionHelp},
	"view": {safeArgs: versionHelp}, "ed": {safeArgs: versionHelp}, "emacs": {safeArgs: versionHelp},
	"make": {safeArgs: versionHelp}, "gmake": {safeArgs: versionHelp}, "cmake": {safeArgs: versionHelp}, "ninja": {safeArgs: versionHelp},
	"gradle": {safeArgs: versionHelp}, "mvn": {safeArgs: versionHelp}, "ant": {safeArgs: versionHelp},
	"npx": {safeArgs: versionHelp}, "bunx": {safeArgs: versionHelp}, "pnpx": {safeArgs: versionHelp},
	"npm":   {safeArgs: versionHelp, safeSub: subs("ls list ll la view info show v outdated search whoami ping root prefix bin fund explain why help-search")},
	"pnpm":  {safeArgs: versionHelp, safeSub: subs("ls list ll view info outdated search root bin why")},
	"yarn":  {safeArgs: versionHelp, safeSub: subs("list info outdated why bin")},
	"bun":   {safeArgs: versionHelp, safeSub: subs("pm outdated")},
	"pip":   {safeArgs: versionHelp, safeSub: subs("list show freeze check search inspect")},
	"gem":   {safeArgs: versionHelp, safeSub: subs("list search info query")},
	"cargo": {safeArgs: versionHelp, safeSub: subs("search tree metadata")},
	"go":    {safeArgs: versionHelp, safeSub: subs("env doc list")},
	"git": {safeArgs: versionHelp, safeSub: subs("status log show diff branch tag remote rev-parse ls-files ls-tree " +
		"blame shortlog describe grep cat-file rev-list reflog whatchanged name-rev count-objects")},
	"gh": {safeArgs: versionHelp, safeSub: subs("issue pr repo release search browse gist label status auth")},
	"tar": {codeShort: "IF", codeLong: l("--to-command --checkpoint-action --use-compress-program --rsh-command --info-script --new-volume-script"),
		allLong: l("--to-command --checkpoint-action --checkpoint --use-compress-program --rsh-command --info-script --new-volume-script " +
			"--to-stdout --totals --touch --transform --null --no-null --numeric-owner --newer --newer-mtime --no-recursion")},
	"ssh":    {codeShort: "oFS"},
	"scp":    {codeShort: "oFSJ"},
	"sftp":   {codeShort: "oFSDJ"},
	"rsync":  {codeShort: "e", codeLong: l("--rsh --rsync-path"), allLong: l("--rsh --rsync-path --recursive --relative")},
	"zip":    {codeShort: "T", codeLong: l("--unzip-command"), allLong: l("--unzip-command --test")},
	"nc":     {codeShort: "ec", codeLong: l("--exec --sh-exec --lua-exec"), allLong: l("--exec --sh-exec --lua-exec")},
	"ncat":   {codeShort: "ec", codeLong: l("--exec --sh-exec --lua-exec"), allLong: l("--exec --sh-exec --lua-exec")},
	"netcat": {codeShort: "ec"},
	"socat":  {safeArgs: versionHelp},
	"dc":     {safeArgs: versionHelp},
	"man":    {codeShort: "PH", codeLong: l("--pager --html"), allLong: l("--pager --html --help --version")},
	"sed":    {codeLong: l("--expression --file --in-place"), codeShort: "efis"},
}

// l splits a space-separated list.
func l(s string) []string { return strings.Fields(s) }

// family reduces a program name to its family: python3.12 -> python,
// pip3 -> pip, zsh-5.9 -> zsh.
func family(base string) string {
	f := strings.ToLower(strings.TrimRight(base, "0123456789.-_"))
	if f == "" {
		return strings.ToLower(base)
	}
	return f
}

// unjudgedCode reports why argv runs code the policy cannot read, or "".
func unjudgedCode(base string, args []token) string {
	fam := family(base)
	if sh, _ := isShell(base); sh {
		for _, t := range args {
			if t.dyn || !strings.HasPrefix(t.val, "-") && !strings.HasPrefix(t.val, "+") {
				return base + " runs a script file the policy cannot read"
			}
		}
		return ""
	}
	if fam == "python" && len(args) > 1 && !args[0].dyn && args[0].val == "-m" && !args[1].dyn && args[1].val == "pip" {
		fam, args = "pip", args[2:]
	}
	in, ok := interpreters[fam]
	if !ok {
		return ""
	}
	if in.codeShort != "" || in.codeLong != nil {
		return codeOptions(base, fam, in, args)
	}
	if len(args) == 1 && !args[0].dyn && in.safeArgs[args[0].val] {
		return ""
	}
	if len(args) > 0 && !args[0].dyn && in.safeSub[args[0].val] {
		for _, t := range args[1:] {
			if t.dyn && !t.safe {
				return base + " " + args[0].val + " with an argument only known at run time"
			}
		}
		if fam == "git" || fam == "gh" {
			for _, t := range args[1:] {
				if !t.dyn && (t.val == "--ext-diff" || strings.HasPrefix(t.val, "--textconv") || strings.HasPrefix(t.val, "--output") || t.val == "-o") {
					return base + " " + t.val + " runs configured programs or writes files"
				}
			}
		}
		return ""
	}
	switch fam {
	case "git", "gh", "npm", "pnpm", "yarn", "bun", "pip", "gem", "cargo", "go":
		return base + " runs code from the workspace, its configuration or packages"
	}
	return base + " runs code the policy cannot read"
}

func codeOptions(base, fam string, in interpSpec, args []token) string {
	for _, t := range args {
		if t.dyn {
			if !t.safe {
				return base + " with an argument only known at run time"
			}
			continue
		}
		a := t.val
		if fam == "sed" && (a == "--sandbox" || strings.HasPrefix(a, "--sand")) {
			return ""
		}
		if strings.HasPrefix(a, "--") {
			name, _, _ := strings.Cut(a, "=")
			if full, ok := filepolicy.LongOption(name, in.codeLong, in.allLong); ok && contains(in.codeLong, full) {
				return base + " " + full + " runs a program or code given as an option"
			}
			continue
		}
		if strings.HasPrefix(a, "-") && strings.ContainsAny(a[1:], in.codeShort) {
			return base + " " + a + " runs a program or code given as an option"
		}
	}
	if fam == "sed" && len(args) > 0 {
		// A sed script can run commands (e, s///e) and write files (w):
		// only --sandbox takes those away.
		return "sed without --sandbox runs code the policy cannot read (its e and w commands)"
	}
	return ""
}

// sortLong is every long option of GNU sort, for unique-prefix matching.
var sortLong = l("--ignore-leading-blanks --dictionary-order --ignore-case --general-numeric-sort --ignore-nonprinting " +
	"--month-sort --human-numeric-sort --numeric-sort --random-sort --reverse --version-sort --check --merge --stable " +
	"--unique --zero-terminated --debug --sort --key --field-separator --buffer-size --parallel --batch-size --output " +
	"--temporary-directory --files0-from --random-source --compress-program --help --version")

// programOption judges the value of an option that names a program the
// command runs (sort --compress-program=PROG runs PROG and PROG -d) as a
// command of its own with run-time arguments.
func (j *judge) programOption(base string, args []token, progOpts, all []string) bool {
	for i, t := range args {
		if t.dyn || !strings.HasPrefix(t.val, "--") {
			continue
		}
		name, val, hasVal := strings.Cut(t.val, "=")
		full, ok := filepolicy.LongOption(name, all)
		if !ok || !contains(progOpts, full) {
			continue
		}
		if !hasVal {
			if i+1 >= len(args) || args[i+1].dyn {
				j.deny("%s %s with a program only known at run time", base, full)
				return false
			}
			val = args[i+1].val
		}
		j.command([]token{{val: val}, {dyn: true}}, nil, scope{})
		if j.denied != "" {
			return false
		}
	}
	return true
}
