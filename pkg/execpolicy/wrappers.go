package execpolicy

import (
	"fmt"
	"path"
	"regexp"
	"strings"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"

	"github.com/agentbus/agentbus/pkg/filepolicy"
)

// wrapSpec describes a program that runs another program given in its
// arguments ("timeout 5 cmd …"). The wrapper is transparent: the payload
// is judged as if it were written directly.
type wrapSpec struct {
	short, shortVal  string   // flags without / with a value
	long, longVal    []string // long options without / with a value
	stop             string   // short flags after which there is no payload (ionice -p, command -v)
	numeric          bool     // nice -5
	positional       int      // operands before the payload (timeout DURATION, taskset MASK)
	noPayloadOK      bool     // without a payload the wrapper itself is judged
	writeVal         []string // options whose value is a file written (time -o)
	stopAtDash       bool     // busybox: an option means no payload
	dirVal           []string // options whose value is a working directory (env -C)
	unsupportedShort string   // options the policy refuses (env -S)
	special          []string // further long options handled by name below (watch --exec, flock --command, env --split-string)
}

var wrappers = map[string]wrapSpec{
	"timeout": {short: "v", shortVal: "sk", long: []string{"--preserve-status", "--foreground", "--verbose"}, longVal: []string{"--signal", "--kill-after"}, positional: 1},
	"nice":    {shortVal: "n", longVal: []string{"--adjustment"}, numeric: true, noPayloadOK: true},
	"nohup":   {},
	"stdbuf":  {shortVal: "ioe", longVal: []string{"--input", "--output", "--error"}},
	"ionice":  {short: "t", shortVal: "cn", stop: "pPu", long: []string{"--ignore"}, longVal: []string{"--class", "--classdata"}, noPayloadOK: true},
	"setsid":  {short: "fwc", long: []string{"--fork", "--wait", "--ctty"}},
	"time":    {short: "pvaq", shortVal: "fo", long: []string{"--portability", "--verbose", "--append", "--quiet"}, longVal: []string{"--format", "--output"}, writeVal: []string{"-o", "--output"}},
	"command": {short: "p", stop: "vV", noPayloadOK: true},
	"builtin": {noPayloadOK: true},
	// zsh precommand modifiers.
	"noglob":    {},
	"nocorrect": {},
	"busybox":   {stopAtDash: true, noPayloadOK: true},
	"toybox":    {stopAtDash: true, noPayloadOK: true},
	"taskset":   {short: "ac", stop: "p", long: []string{"--all-tasks", "--cpu-list"}, positional: 1},
	"env": {short: "i0v", shortVal: "u", long: []string{"--ignore-environment", "--null", "--debug"}, longVal: []string{"--unset"},
		dirVal: []string{"-C", "--chdir"}, unsupportedShort: "S", noPayloadOK: true, special: []string{"--split-string", "--default-signal", "--ignore-signal", "--block-signal", "--list-signal-handling"}},
	"flock": {short: "sxeunoF", shortVal: "wE", long: []string{"--shared", "--exclusive", "--unlock", "--nonblock", "--close", "--no-fork", "--verbose"}, longVal: []string{"--timeout", "--conflict-exit-code"}, positional: 1, noPayloadOK: true, special: []string{"--command"}},
	"watch": {short: "dtbegcpwr", shortVal: "nq", long: []string{"--differences", "--no-title", "--beep", "--errexit", "--chgexit", "--color", "--precise", "--no-wrap", "--no-rerun"}, longVal: []string{"--interval", "--equexit"}, special: []string{"--exec"}},
}

var (
	durationRe = regexp.MustCompile(`^[0-9]+(\.[0-9]*)?[smhd]?$|^\.[0-9]+[smhd]?$`)
	cpuMaskRe  = regexp.MustCompile(`^(0[xX])?[0-9a-fA-F,:-]+$`)
)

var (
	intRe    = regexp.MustCompile(`^[+-]?[0-9]+$`)
	numRe    = regexp.MustCompile(`^[0-9]*\.?[0-9]+$`)
	signalRe = regexp.MustCompile(`^([0-9]+|[A-Za-z][A-Za-z0-9+-]*)$`)
	sizeRe   = regexp.MustCompile(`^(L|0|[0-9]+[KMGTPEZYkmgtpezyB]*)$`)
	classRe  = regexp.MustCompile(`^([0-3]|none|realtime|best-effort|idle)$`)
)

// wrapperValueRe types the values of wrapper options that are neither
// paths nor names.
var wrapperValueRe = map[string]*regexp.Regexp{
	"nice -n": intRe, "nice --adjustment": intRe,
	"timeout -k": durationRe, "timeout --kill-after": durationRe, "timeout -s": signalRe, "timeout --signal": signalRe,
	"ionice -c": classRe, "ionice --class": classRe, "ionice -n": intRe, "ionice --classdata": intRe,
	"stdbuf -i": sizeRe, "stdbuf -o": sizeRe, "stdbuf -e": sizeRe, "stdbuf --input": sizeRe, "stdbuf --output": sizeRe, "stdbuf --error": sizeRe,
	"flock -w": numRe, "flock --timeout": numRe, "flock -E": intRe, "flock --conflict-exit-code": intRe,
	"watch -n": numRe, "watch --interval": numRe, "env -u": varNameRe, "env --unset": varNameRe,
}

var envAssign = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

func (j *judge) wrapper(written, base string, w wrapSpec, args []token, redirs []*syntax.Redirect, sc scope) {
	i := 0
	watchExec := false
	finalize := func() { j.final(written, base, strings.Contains(written, "/"), args) }
parse:
	for ; i < len(args); i++ {
		t := args[i]
		if t.dyn {
			j.deny("%s with a dynamic argument before its command", base)
			return
		}
		a := t.val
		switch {
		case a == "--":
			i++
			break parse
		case a == "-" && base == "env":
			continue // same as -i
		case a == "-":
			j.deny("%s with a lone \"-\" is not understood by the policy", base)
			return
		case strings.HasPrefix(a, "--") && len(a) > 2:
			name, val, hasVal := strings.Cut(a, "=")
			if full, ok := filepolicy.LongOption(name, w.long, w.longVal, w.writeVal, w.dirVal, w.special); ok {
				name = full
			} else if !w.stopAtDash {
				j.deny("%s option %s is not understood by the policy", base, name)
				return
			}
			switch {
			case base == "watch" && name == "--exec":
				watchExec = true
			case base == "flock" && name == "--command":
				j.deny("flock --command is not supported; use flock FILE cmd …")
				return
			case base == "env" && contains(w.special, name):
				j.deny("env %s is not supported by the policy", name)
				return
			case contains(w.long, name):
			case contains(w.longVal, name) || contains(w.writeVal, name) || contains(w.dirVal, name):
				if !hasVal {
					if i+1 >= len(args) || args[i+1].dyn {
						j.deny("%s %s needs a static value", base, name)
						return
					}
					i++
					val = args[i].val
				}
				if !j.wrapperValue(base, name, val, w) {
					return
				}
			case w.stopAtDash:
				finalize()
				return
			default:
				j.deny("%s option %s is not understood by the policy", base, name)
				return
			}
		case len(a) > 1 && a[0] == '-':
			if w.stopAtDash {
				finalize()
				return
			}
			if w.numeric && isNumber(a[1:]) {
				continue
			}
			for k := 1; k < len(a); k++ {
				c := a[k]
				flag := "-" + string(c)
				switch {
				case base == "watch" && c == 'x':
					watchExec = true
				case strings.IndexByte(w.unsupportedShort, c) >= 0:
					j.deny("%s %s is not supported by the policy", base, flag)
					return
				case strings.IndexByte(w.stop, c) >= 0:
					finalize()
					return
				case strings.IndexByte(w.short, c) >= 0:
				case strings.IndexByte(w.shortVal, c) >= 0 || contains(w.writeVal, flag) || contains(w.dirVal, flag):
					val := a[k+1:]
					if val == "" {
						if i+1 >= len(args) || args[i+1].dyn {
							j.deny("%s %s needs a static value", base, flag)
							return
						}
						i++
						val = args[i].val
					}
					if !j.wrapperValue(base, flag, val, w) {
						return
					}
					k = len(a)
				default:
					j.deny("%s option %s is not understood by the policy", base, flag)
					return
				}
			}
		default:
			if base == "env" && envAssign.MatchString(a) {
				name, _, _ := strings.Cut(a, "=")
				if dangerousVar(name) {
					j.deny("env %s= changes how commands run", name)
					return
				}
				continue
			}
			break parse
		}
	}
	rest := args[i:]
	for k := 0; k < w.positional; k++ {
		if len(rest) == 0 {
			break
		}
		if rest[0].dyn {
			j.deny("%s with a dynamic argument before its command", base)
			return
		}
		if base == "timeout" && !durationRe.MatchString(rest[0].val) {
			j.deny("timeout %q is not a duration the policy understands", rest[0].val)
			return
		}
		if base == "taskset" && !cpuMaskRe.MatchString(rest[0].val) {
			j.deny("taskset %q is not a CPU mask or list the policy understands", rest[0].val)
			return
		}
		if base == "flock" {
			if _, err := fmt.Sscanf(rest[0].val, "%d", new(int)); err == nil && len(rest) == 1 {
				finalize() // flock FD
				return
			}
			if !j.pathUse(base, rest[0].val, filepolicy.Write) {
				return
			}
		}
		rest = rest[1:]
	}
	if base == "flock" && len(rest) > 0 && !rest[0].dyn && (rest[0].val == "-c" || rest[0].val == "--command") {
		if len(rest) < 2 || rest[1].dyn {
			j.deny("flock -c with a dynamic command")
			return
		}
		j.source(rest[1].val, syntax.LangBash, sc.depth+1)
		return
	}
	if len(rest) == 0 {
		if w.noPayloadOK {
			finalize()
			return
		}
		j.deny("%s without a command", base)
		return
	}
	if base == "watch" && !watchExec {
		// watch joins its arguments and runs them with sh -c.
		var parts []string
		for _, t := range rest {
			if t.dyn {
				j.deny("watch with a dynamic command")
				return
			}
			parts = append(parts, t.val)
		}
		j.source(strings.Join(parts, " "), syntax.LangBash, sc.depth+1)
		return
	}
	j.command(rest, redirs, sc)
}

// wrapperValue checks option values that name files or variables.
func (j *judge) wrapperValue(base, flag, val string, w wrapSpec) bool {
	if re, ok := wrapperValueRe[base+" "+flag]; ok && !re.MatchString(val) {
		// A value the program would refuse means the policy and the
		// program read the line differently: refuse it here.
		j.deny("%s %s %q is not a value the policy understands", base, flag, val)
		return false
	}
	switch {
	case contains(w.writeVal, flag):
		return j.writePath(base+" "+flag, val)
	case contains(w.dirVal, flag):
		j.cwdChanged = true
		return j.pathUse(base, val, filepolicy.Read)
	}
	return true
}

// pathUse checks one static path with the file policy, if any.
func (j *judge) pathUse(base, p string, a filepolicy.Access) bool {
	if j.p.files == nil {
		return true
	}
	if _, err := j.p.files.Resolve(p, a); err != nil {
		j.deny("%s: %v", base, err)
		return false
	}
	return true
}

// shellFamilies are the shells whose language the policy reads (the
// bash dialect covers sh, dash, ash and busybox's shells); their -c strings
// and here-documents are judged like the command line. Every other shell
// is in otherShells: what it runs cannot be judged, in any mode.
var shellFamilies = map[string]bool{"sh": true, "bash": true, "dash": true, "ash": true, "rbash": true, "hush": true}

var otherShells = map[string]bool{"zsh": true, "ksh": true, "mksh": true, "pdksh": true, "oksh": true, "loksh": true, "lksh": true,
	"fish": true, "csh": true, "tcsh": true, "yash": true, "posh": true, "elvish": true, "nu": true, "xonsh": true, "pwsh": true,
	"powershell": true, "rc": true, "es": true, "scsh": true, "ion": true, "oil": true, "osh": true, "ysh": true, "murex": true,
	"msh": true, "lash": true, "sash": true, "bsh": true, "jsh": true}

// isShell reports whether base (as written, version suffixes allowed:
// bash5.2, zsh-5.9) names a shell, and whether the policy reads its language.
func isShell(base string) (shell, readable bool) {
	f := family(base)
	if f == "ksh" && strings.HasPrefix(strings.ToLower(base), "ksh") {
		return true, false
	}
	if shellFamilies[f] {
		return true, true
	}
	return otherShells[f], false
}

// bashLong are bash's long options; only those that change nothing about
// what runs are accepted (--login and --rcfile read profiles the file
// tools can write; --posix and --debugger change parsing and traps).
var bashLong = []string{"--norc", "--noprofile", "--noediting", "--verbose", "--restricted", "--help", "--version",
	"--login", "--rcfile", "--init-file", "--posix", "--debugger", "--dump-strings", "--dump-po-strings", "--pretty-print", "--wordexp"}
var bashLongOK = []string{"--norc", "--noprofile", "--noediting", "--verbose", "--restricted", "--help", "--version"}

// shell judges sh/bash/dash … invocations: the -c string or a static
// here-document is parsed and judged; a shell reading its script from a
// pipe or a file runs code the policy cannot read; a login or interactive
// shell reads profiles the file tools can write; options that change
// parsing are refused (see setArgs). Shells whose language the policy does
// not read are refused whenever they would run code.
func (j *judge) shell(base, written string, args []token, redirs []*syntax.Redirect, sc scope) {
	_, readable := isShell(base)
	haveC, stdin := false, false
	i := 0
	var flags []token
parse:
	for ; i < len(args); i++ {
		t := args[i]
		if t.dyn {
			j.deny("%s with a dynamic option or script", base)
			return
		}
		a := t.val
		switch {
		case a == "--":
			i++
			break parse
		case a == "-":
			stdin = true
			i++
			break parse
		case a == "+":
			j.deny("%s with a lone \"+\" is not understood by the policy", base)
			return
		case strings.HasPrefix(a, "--"):
			full, ok := filepolicy.LongOption(a, bashLong)
			if !ok || !contains(bashLongOK, full) {
				j.deny("%s option %s is not allowed (login shells and rc files run profiles; others change parsing)", base, a)
				return
			}
			if (full == "--help" || full == "--version") && len(args) == 1 {
				// bash --version alone prints and exits; with more
				// arguments the rest is judged as if it were not there.
				j.final(written, base, strings.Contains(written, "/"), args)
				return
			}
		case len(a) > 1 && (a[0] == '-' || a[0] == '+'):
			var rest strings.Builder
			rest.WriteByte(a[0])
			for k := 1; k < len(a); k++ {
				switch a[k] {
				case 'c':
					haveC = a[0] == '-'
				case 's':
					stdin = true
				case 'i':
					j.deny("interactive %s is not allowed (it reads rc files)", base)
					return
				case 'l':
					j.deny("login %s is not allowed (it runs profile files the file tools can write)", base)
					return
				case 'o', 'O':
					if i+1 >= len(args) || args[i+1].dyn {
						j.deny("%s -%c needs a static option name", base, a[k])
						return
					}
					i++
					name := args[i].val
					if (a[k] == 'o' && !setONamesOK[name]) || (a[k] == 'O' && !shoptNamesOK[name]) {
						j.deny("%s -%c %s changes how the shell parses or runs commands; it is not allowed", base, a[k], name)
						return
					}
				default:
					rest.WriteByte(a[k])
				}
			}
			if rest.Len() > 1 {
				flags = append(flags, token{val: rest.String()})
			}
		default:
			break parse
		}
	}
	if !j.setArgs(base, flags) {
		return
	}
	rest := args[i:]
	if len(rest) > 0 && !rest[0].dyn && !haveC && (strings.HasPrefix(rest[0].val, "-") || strings.HasPrefix(rest[0].val, "+")) {
		// "sh -- -c x": shells disagree on whether that is a script named -c.
		j.deny("%s with a script name that looks like an option (%s)", base, rest[0].val)
		return
	}
	if !readable && (haveC || stdin || len(rest) > 0 || len(heredocRedirs(redirs)) > 0) {
		j.deny("%s runs code in a language the policy does not read; use bash -c", base)
		return
	}
	lang := syntax.LangBash
	switch {
	case haveC:
		if len(rest) == 0 {
			j.deny("%s -c without a script", base)
			return
		}
		if rest[0].dyn {
			j.deny("%s -c with a script that is only known at run time", base)
			return
		}
		j.source(rest[0].val, lang, sc.depth+1)
	case stdin || len(rest) == 0:
		body, ok := heredocBody(redirs)
		if !ok {
			j.deny("%s reads its script from standard input (a pipe or file) that cannot be judged", base)
			return
		}
		j.source(body, lang, sc.depth+1)
	default:
		if rest[0].dyn {
			j.deny("%s with a script path only known at run time", base)
			return
		}
		if !j.pathUse(base, rest[0].val, filepolicy.Read) {
			return
		}
		j.final(written, base, strings.Contains(written, "/"), args)
	}
}

func heredocRedirs(redirs []*syntax.Redirect) []*syntax.Redirect {
	var out []*syntax.Redirect
	for _, r := range redirs {
		switch r.Op {
		case syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc, syntax.RdrIn:
			out = append(out, r)
		}
	}
	return out
}

// heredocBody returns the static text of a here-document or here-string
// on standard input.
func heredocBody(redirs []*syntax.Redirect) (string, bool) {
	var body string
	found := false
	for _, r := range redirs {
		if r.N != nil && r.N.Value != "0" {
			continue
		}
		switch r.Op {
		case syntax.Hdoc, syntax.DashHdoc:
			if r.Hdoc == nil {
				body, found = "", true
				continue
			}
			var b strings.Builder
			for _, p := range r.Hdoc.Parts {
				lit, ok := p.(*syntax.Lit)
				if !ok {
					return "", false
				}
				b.WriteString(lit.Value)
			}
			body, found = b.String(), true
			if delim := r.Word.Lit(); delim != "" && !strings.Contains(delim, "\\") {
				// Unquoted delimiter: the outer shell removes \$ \` \\
				// and backslash-newline before the inner shell reads the
				// text, so judge what the inner shell will see.
				doc, err := expand.Document(&expand.Config{}, r.Hdoc)
				if err != nil {
					return "", false
				}
				body = doc
			}
		case syntax.WordHdoc:
			f, ok := staticWord(r.Word)
			if !ok {
				return "", false
			}
			body, found = strings.Join(f, " "), true
		case syntax.RdrIn, syntax.RdrInOut, syntax.DplIn:
			return "", false
		}
	}
	return body, found
}

var findExecActions = map[string]bool{"-exec": true, "-execdir": true, "-ok": true, "-okdir": true}

// find judges find itself (read-only unless -delete/-fprint…) and every
// -exec/-execdir/-ok payload as a command whose {} arguments are run-time
// values.
func (j *judge) find(written string, args []token, sc scope) {
	var own []token
	var payloads [][]token
	for i := 0; i < len(args); i++ {
		t := args[i]
		if t.dyn || !findExecActions[t.val] {
			own = append(own, t)
			continue
		}
		var p []token
		closed := false
		for i++; i < len(args); i++ {
			u := args[i]
			if !u.dyn && (u.val == ";" || (u.val == "+" && len(p) > 0 && !p[len(p)-1].dyn && p[len(p)-1].val == "{}") || (u.val == "+" && len(p) > 0 && p[len(p)-1].dyn)) {
				closed = true
				break
			}
			if !u.dyn && strings.Contains(u.val, "{}") {
				u = findPayloadArg
				if !strings.HasPrefix(args[i].val, "{}") {
					u.safe = !strings.HasPrefix(args[i].val, "-")
				}
			}
			p = append(p, u)
		}
		if !closed || len(p) == 0 {
			j.deny("find %s without a command terminated by ; or +", t.val)
			return
		}
		payloads = append(payloads, p)
	}
	j.final(written, "find", strings.Contains(written, "/"), own)
	if j.denied != "" {
		return
	}
	from0, write := false, len(payloads) > 0
	for _, t := range own {
		switch {
		case t.dyn:
		case t.val == "-files0-from":
			from0 = true
		case t.val == "-delete" || t.val == "-fprint" || t.val == "-fprint0" || t.val == "-fprintf" || t.val == "-fls":
			write = true
		}
	}
	if from0 && write {
		// The starting points come from a file, so neither the file
		// policy nor the rm rules see the paths deleted or handed to the
		// -exec payload (nor whether one begins with "-").
		why := "find -files0-from with -delete, -fprint or -exec acts on paths read from a file at run time"
		if j.p.mode != ModeFull {
			j.needStrict(canonical("find", own), why)
		} else if j.p.files != nil {
			j.need(canonical("find", own), why)
		}
	}
	for _, p := range payloads {
		j.command(p, nil, sc)
	}
}

// findPayloadArg: find replaces {} with a path that begins with one of
// its starting points, which find requires not to begin with "-".
var findPayloadArg = token{dyn: true, safe: true}

// xargs judges its payload (default echo) with run-time arguments added.
func (j *judge) xargs(args []token, redirs []*syntax.Redirect, sc scope) {
	replace := ""
	i := 0
parse:
	for ; i < len(args); i++ {
		t := args[i]
		if t.dyn {
			j.deny("xargs with a dynamic argument before its command")
			return
		}
		a := t.val
		switch {
		case a == "--":
			i++
			break parse
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a, "=")
			switch name {
			case "--null", "--no-run-if-empty", "--verbose", "--interactive", "--exit", "--open-tty", "--show-limits":
			case "--replace":
				replace = "{}"
				if hasVal {
					replace = val
				}
			case "--eof", "--max-lines":
			case "--arg-file", "--delimiter", "--max-args", "--max-procs", "--max-chars", "--process-slot-var":
				if !hasVal {
					if i+1 >= len(args) || args[i+1].dyn {
						j.deny("xargs %s needs a static value", name)
						return
					}
					i++
					val = args[i].val
				}
				if name == "--arg-file" && !j.pathUse("xargs", val, filepolicy.Read) {
					return
				}
				if name == "--process-slot-var" && dangerousVar(val) {
					j.deny("xargs --process-slot-var=%s changes how commands run", val)
					return
				}
			default:
				j.deny("xargs option %s is not understood by the policy", name)
				return
			}
		case len(a) > 1 && a[0] == '-':
			for k := 1; k < len(a); k++ {
				c := a[k]
				switch {
				case strings.IndexByte("0rtpxo", c) >= 0:
				case c == 'i' || c == 'e' || c == 'l':
					if c == 'i' {
						replace = "{}"
						if k+1 < len(a) {
							replace = a[k+1:]
						}
					}
					k = len(a)
				case strings.IndexByte("aEdILnPs", c) >= 0:
					val := a[k+1:]
					if val == "" {
						if i+1 >= len(args) || args[i+1].dyn {
							j.deny("xargs -%c needs a static value", c)
							return
						}
						i++
						val = args[i].val
					}
					if c == 'I' {
						replace = val
					}
					if c == 'a' && !j.pathUse("xargs", val, filepolicy.Read) {
						return
					}
					k = len(a)
				default:
					j.deny("xargs option -%c is not understood by the policy", c)
					return
				}
			}
		default:
			break parse
		}
	}
	payload := append([]token(nil), args[i:]...)
	if len(payload) == 0 {
		payload = []token{{val: "echo"}}
	}
	for k := 1; k < len(payload); k++ {
		if replace != "" && !payload[k].dyn && strings.Contains(payload[k].val, replace) {
			payload[k] = token{dyn: true}
		}
	}
	if replace == "" {
		payload = append(payload, token{dyn: true})
	}
	j.command(payload, redirs, sc)
}

// trap judges the action string as a script.
func (j *judge) trap(args []token, sc scope) {
	var ops []token
	for _, t := range args {
		if !t.dyn && (t.val == "-l" || t.val == "-p" || t.val == "-P" || t.val == "--") {
			continue
		}
		ops = append(ops, t)
	}
	if len(ops) >= 2 {
		if ops[0].dyn {
			j.deny("trap with an action only known at run time")
			return
		}
		if a := ops[0].val; a != "" && a != "-" {
			j.source(a, syntax.LangBash, sc.depth+1)
		}
	}
	j.final("trap", "trap", false, args)
}

// redirect judges one redirection: substitutions in its word, and file
// reads/writes against the file policy and the mode.
func (j *judge) redirect(r *syntax.Redirect, sc scope) {
	j.word(r.Word, sc)
	if r.Hdoc != nil {
		j.word(r.Hdoc, sc)
	}
	if j.denied != "" {
		return
	}
	switch r.Op {
	case syntax.RdrOut, syntax.AppOut, syntax.RdrClob, syntax.AppClob, syntax.RdrAll, syntax.RdrAllClob, syntax.AppAll, syntax.AppAllClob:
		j.redirectWrite(r)
	case syntax.RdrInOut:
		if j.redirectRead(r) {
			j.redirectWrite(r)
		}
	case syntax.DplOut, syntax.DplIn:
		f, ok := staticWord(r.Word)
		if ok && len(f) == 1 && (f[0] == "-" || isNumber(strings.TrimSuffix(f[0], "-"))) {
			return // fd duplication or close
		}
		if r.Op == syntax.DplOut {
			j.redirectWrite(r)
		} else {
			j.redirectRead(r)
		}
	case syntax.RdrIn:
		j.redirectRead(r)
	}
}

func harmlessTarget(t string) bool {
	switch t {
	case "/dev/null", "/dev/stdout", "/dev/stderr":
		return true
	}
	return strings.HasPrefix(t, "/dev/fd/") && isNumber(strings.TrimPrefix(t, "/dev/fd/"))
}

// netRedirect: bash opens a network connection for /dev/tcp/HOST/PORT
// and /dev/udp/… redirections (the files need not exist).
func netRedirect(p string) bool {
	c := path.Clean("/" + strings.TrimLeft(p, "/"))
	return strings.HasPrefix(p, "/") && (strings.HasPrefix(c, "/dev/tcp/") || strings.HasPrefix(c, "/dev/udp/") || c == "/dev/tcp" || c == "/dev/udp")
}

func (j *judge) netOK(p string) bool {
	if netRedirect(p) && j.p.mode != ModeFull {
		j.deny("redirection to %s opens a network connection; outside execSecurity full it is not allowed", p)
		return false
	}
	return true
}

func (j *judge) redirectWrite(r *syntax.Redirect) {
	op := r.Op.String()
	f, ok := staticWord(r.Word)
	if ok && len(f) == 1 && !j.netOK(f[0]) {
		return
	}
	if !ok || len(f) != 1 {
		if j.p.mode != ModeFull {
			j.deny("redirection to a file named at run time (it could be /dev/tcp) is not allowed outside execSecurity full")
		} else if j.p.files != nil {
			j.need(op+" <dynamic>", "redirection to a file named at run time")
		} else {
			j.allow("execSecurity full")
		}
		return
	}
	j.cmds = append(j.cmds, op+" "+quoteArg(f[0]))
	j.writePath(op, f[0])
}

// writePath judges a write to a static path: harmless devices pass; with
// a file policy the path must pass it; without one a write needs approval
// in allowlist mode.
func (j *judge) writePath(what, p string) bool {
	if harmlessTarget(p) {
		return true
	}
	if j.p.files != nil {
		if _, err := j.p.files.Resolve(p, filepolicy.Write); err != nil {
			j.deny("%s %s: %v", what, p, err)
			return false
		}
		j.allow("writes inside the workspace")
		return true
	}
	if j.p.mode == ModeFull {
		j.allow("execSecurity full")
		return true
	}
	j.need(what+" "+quoteArg(p), "writes file "+p)
	return true
}

func (j *judge) redirectRead(r *syntax.Redirect) bool {
	f, ok := staticWord(r.Word)
	if !ok || len(f) != 1 {
		if j.p.mode != ModeFull {
			j.deny("input from a file named at run time (it could be /dev/tcp) is not allowed outside execSecurity full")
			return false
		}
		if j.p.files != nil {
			j.need("< <dynamic>", "input from a file named at run time")
		}
		return true
	}
	if !j.netOK(f[0]) {
		return false
	}
	if harmlessTarget(f[0]) || f[0] == "/dev/stdin" {
		return true
	}
	return j.pathUse("<", f[0], filepolicy.Read)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
