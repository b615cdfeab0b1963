package execpolicy

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"

	"github.com/agentbus/agentbus/pkg/filepolicy"
)

// Limits on what Check is willing to analyze.
const (
	// MaxCommandLine is the longest command line judged (bytes).
	MaxCommandLine = 64 << 10
	// MaxDepth bounds nested shell strings (bash -c "sh -c '…'") and
	// here-documents fed to shells.
	MaxDepth = 6
	// MaxNesting bounds how deeply brackets ({ ( [ and their $ forms)
	// nest in one command line, counted before the line reaches the shell
	// parser (whose recursion, and mvdan.cc/sh's brace expansion, grow
	// with the depth: 32,000 nested braces made a check allocate until
	// the process died). Quotes are not looked at, so the count can only
	// be higher than the shell's.
	MaxNesting = 64
	// MaxFields bounds the words one static argument may expand to by
	// brace expansion ({a,b}{c,d} is 4), computed before expanding.
	MaxFields = 1024
	// MaxBraceWords bounds the words brace expansion makes in the whole
	// check.
	MaxBraceWords = 4096
	// MaxWork bounds the syntax nodes, words and expanded fields one
	// check visits, nested shell strings included.
	MaxWork = 200_000
	// CheckBudget is the wall-clock time one check may take; a check
	// that runs out is a Deny.
	CheckBudget = 2 * time.Second
)

// Check judges cmdline under the policy and the endpoint's approvals (nil
// for none). It never panics and never errors: anything it cannot judge is
// a Deny with the reason. The verdict is the strictest over all commands
// in the line (deny > needs approval > allow).
func (p *Policy) Check(cmdline string, ap *Approvals) Verdict {
	if p.mode == ModeDeny {
		return Verdict{Decision: Deny, Reason: "execSecurity is \"deny\": shell commands are disabled"}
	}
	if strings.TrimSpace(cmdline) == "" {
		return Verdict{Decision: Deny, Reason: "empty command"}
	}
	if len(cmdline) > MaxCommandLine {
		return Verdict{Decision: Deny, Reason: fmt.Sprintf("command line longer than %d bytes", MaxCommandLine)}
	}
	j := &judge{p: p, deadline: time.Now().Add(CheckBudget)}
	j.source(cmdline, syntax.LangBash, 0)
	j.arithNamesClean()
	v := Verdict{Commands: j.cmds}
	if j.denied != "" {
		v.Decision, v.Reason = Deny, j.denied
		return v
	}
	if len(j.pending) == 0 {
		v.Decision = Allow
		if len(j.allowWhy) == 0 {
			v.Reason = "allowed: only assignments and shell syntax, no programs"
		} else {
			v.Reason = "allowed: " + strings.Join(j.allowWhy, "; ")
		}
		return v
	}
	if ap != nil && ap.AlwaysBash {
		v.Decision, v.Reason = Allow, "approved by the owner (/approve always bash)"
		return v
	}
	var rest []pending
	var ruleIDs []string
	for _, pd := range j.pending {
		if r, ok := ap.match(pd.cmd); ok {
			ruleIDs = append(ruleIDs, r.ID)
			continue
		}
		rest = append(rest, pd)
	}
	if len(rest) == 0 {
		v.Decision, v.Reason = Allow, "approved by owner rule "+strings.Join(dedupe(ruleIDs), ", ")
		return v
	}
	var why []string
	strict := false
	for _, pd := range rest {
		v.Pending = append(v.Pending, pd.cmd)
		why = append(why, pd.why)
		strict = strict || pd.strict
	}
	why = dedupe(why)
	switch {
	case p.approval == ApprovalAsk:
		v.Decision, v.Reason = Ask, "needs owner approval: "+strings.Join(why, "; ")
	case p.approval == ApprovalAllow && strict:
		v.Decision, v.Reason = Deny, "not allowed without the owner's approval (execApprovalMode allow does not cover code the policy cannot read): "+strings.Join(why, "; ")
	case p.approval == ApprovalAllow:
		v.Decision, v.Reason = Allow, "allowed by execApprovalMode allow: "+strings.Join(why, "; ")
	default:
		v.Decision, v.Reason = Deny, "not allowed: "+strings.Join(why, "; ")
	}
	return v
}

// pending is a command that needs approval; strict ones run code the
// policy cannot read, so execApprovalMode "allow" does not wave them
// through: only the owner's approval (a rule, /approve always bash, or a
// yes to the Ask) runs them.
type pending struct {
	cmd, why string
	strict   bool
}

// judge accumulates the outcome of one Check.
type judge struct {
	p *Policy
	// cwdChanged: a cd, pushd or env -C was seen, so relative paths no
	// longer name the workspace.
	cwdChanged bool
	denied     string // first deny reason; once set the line is denied
	pending    []pending
	cmds       []string
	allowWhy   []string
	// Budget of this check (see MaxWork, CheckBudget).
	work       int
	braceWords int
	deadline   time.Time
	// Names used as variables in arithmetic (subscripts, $((…)), ((…)),
	// [[ -eq ]]), in source order, and what the line assigns to names:
	// bash evaluates a variable's value as an arithmetic expression where
	// the name is used, and a value such as b[$(cmd)] runs cmd, so a name
	// is allowed there only when its value is known to be a number
	// (see arithNamesClean).
	arithNames []string
	dirty      map[string]string // name -> why its value may be any text
	clean      map[string]bool   // name assigned a literal number somewhere
}

// spend counts n units of work and denies once the check is over its
// budget of work or time; it reports whether the check may go on.
func (j *judge) spend(n int) bool {
	if j.denied != "" {
		return false
	}
	j.work += n
	if j.work > MaxWork {
		j.deny("command line too complex to judge (more than %d syntax nodes and expanded words)", MaxWork)
		return false
	}
	if j.work&0xff == 0 && time.Now().After(j.deadline) {
		j.deny("command line too complex to judge within %v", CheckBudget)
		return false
	}
	return true
}

func (j *judge) deny(format string, args ...any) {
	if j.denied == "" {
		j.denied = fmt.Sprintf(format, args...)
	}
}

func (j *judge) need(cmd, why string) { j.pending = append(j.pending, pending{cmd: cmd, why: why}) }

func (j *judge) needStrict(cmd, why string) {
	j.pending = append(j.pending, pending{cmd: cmd, why: why, strict: true})
}

func (j *judge) allow(why string) {
	for _, w := range j.allowWhy {
		if w == why {
			return
		}
	}
	j.allowWhy = append(j.allowWhy, why)
}

// source parses and judges a whole script (the command line, a bash -c
// string or a here-document fed to a shell).
func (j *judge) source(src string, lang syntax.LangVariant, depth int) {
	if depth > MaxDepth {
		j.deny("shell strings nested deeper than %d levels", MaxDepth)
		return
	}
	if strings.ContainsRune(src, 0) {
		j.deny("NUL byte in command")
		return
	}
	if d := nesting(src); d > MaxNesting {
		j.deny("brackets nested %d deep (more than %d) are not judged", d, MaxNesting)
		return
	}
	if !j.spend(len(src) / 16) {
		return
	}
	f, err := syntax.NewParser(syntax.Variant(lang)).Parse(strings.NewReader(src), "")
	if err != nil {
		j.deny("cannot parse command: %v", err)
		return
	}
	sc := scope{depth: depth}
	j.stmts(f.Stmts, sc)
}

// nesting is the deepest nesting of { ( [ in src, quotes ignored (so it
// is never below the shell's own nesting), counted in one pass before
// anything recursive sees the text.
func nesting(src string) int {
	depth, max := 0, 0
	for i := 0; i < len(src); i++ {
		switch src[i] {
		case '{', '(', '[':
			depth++
			if depth > max {
				max = depth
			}
		case '}', ')', ']':
			if depth > 0 {
				depth--
			}
		}
	}
	return max
}

// scope carries context down the tree.
type scope struct {
	depth int
}

func (j *judge) stmts(list []*syntax.Stmt, sc scope) {
	for _, s := range list {
		if j.denied != "" {
			return
		}
		j.stmt(s, sc)
	}
}

func (j *judge) stmt(s *syntax.Stmt, sc scope) {
	if !j.spend(1) {
		return
	}
	for _, r := range s.Redirs {
		j.redirect(r, sc)
	}
	switch c := s.Cmd.(type) {
	case nil:
		// Redirections only ("> file"): judged above.
	case *syntax.CallExpr:
		j.call(c, s.Redirs, sc)
	case *syntax.BinaryCmd:
		j.stmt(c.X, sc)
		j.stmt(c.Y, sc)
	case *syntax.Subshell:
		j.stmts(c.Stmts, sc)
	case *syntax.Block:
		j.stmts(c.Stmts, sc)
	case *syntax.IfClause:
		for ic := c; ic != nil; ic = ic.Else {
			j.stmts(ic.Cond, sc)
			j.stmts(ic.Then, sc)
		}
	case *syntax.WhileClause:
		j.stmts(c.Cond, sc)
		j.stmts(c.Do, sc)
	case *syntax.ForClause:
		if c.Select {
			j.taint("REPLY", "set at run time by select")
		}
		switch l := c.Loop.(type) {
		case *syntax.WordIter:
			if l.Name != nil && dangerousVar(l.Name.Value) {
				j.deny("loop variable %s changes how commands run", l.Name.Value)
			}
			if l.Name != nil {
				numbers := len(l.Items) > 0
				for _, w := range l.Items {
					f, ok := staticWord(w) // {1..3} expands to numbers
					if !ok || len(f) == 0 {
						numbers = false
					}
					for _, x := range f {
						if !isNumber(x) {
							numbers = false
						}
					}
				}
				if numbers {
					j.markClean(l.Name.Value)
				} else {
					j.taint(l.Name.Value, "a loop variable over words that are not all literal numbers")
				}
			}
			for _, w := range l.Items {
				j.word(w, sc)
			}
		case *syntax.CStyleLoop:
			for _, x := range []syntax.ArithmExpr{l.Init, l.Cond, l.Post} {
				if x != nil {
					j.arith(x)
				}
			}
		}
		j.stmts(c.Do, sc)
	case *syntax.CaseClause:
		j.word(c.Word, sc)
		for _, it := range c.Items {
			for _, w := range it.Patterns {
				j.word(w, sc)
			}
			j.stmts(it.Stmts, sc)
		}
	case *syntax.FuncDecl:
		j.deny("function definitions are not allowed (they can shadow commands)")
	case *syntax.ArithmCmd:
		j.arith(c.X)
	case *syntax.LetClause:
		for _, x := range c.Exprs {
			j.arith(x)
		}
	case *syntax.TestClause:
		j.test(c.X, sc)
	case *syntax.DeclClause:
		j.decl(c, sc)
	case *syntax.TimeClause:
		if c.Stmt != nil {
			j.stmt(c.Stmt, sc)
		}
	case *syntax.CoprocClause:
		// "coproc NAME cmd" is NAME as a command for bash unless cmd is
		// compound; the parser cannot tell which, so neither can we.
		j.deny("coproc is not allowed (its NAME can be the command that runs)")
	default:
		j.deny("unsupported shell construct %T", s.Cmd)
	}
}

// word judges everything a word runs: command and process substitutions,
// arithmetic, and parameter expansions that evaluate code.
func (j *judge) word(w *syntax.Word, sc scope) {
	if w == nil {
		return
	}
	if n := braceFields(w); n > MaxFields {
		j.deny("brace expansion makes more than %d words of one argument", MaxFields)
		return
	} else if n > 1 {
		// mvdan.cc/sh copies the word's parts for every word it makes
		// (about 2 KiB each for ten brace groups): the whole line may
		// make MaxBraceWords of them.
		j.braceWords += n
		if j.braceWords > MaxBraceWords {
			j.deny("brace expansion makes more than %d words in the whole command line", MaxBraceWords)
			return
		}
	}
	syntax.Walk(w, func(n syntax.Node) bool {
		if !j.spend(1) {
			return false
		}
		switch x := n.(type) {
		case *syntax.CmdSubst:
			if x.TempFile || x.ReplyVar {
				j.deny("mksh command substitution forms are not supported")
				return false
			}
			if j.p.mode != ModeFull {
				j.deny("command substitution $(…) runs code; outside execSecurity full it is not allowed")
				return false
			}
			j.stmts(x.Stmts, sc)
			return false
		case *syntax.ProcSubst:
			if j.p.mode != ModeFull {
				j.deny("process substitution <(…) runs code; outside execSecurity full it is not allowed")
				return false
			}
			j.stmts(x.Stmts, sc)
			return false
		case *syntax.ArithmExp:
			j.arith(x.X)
			return false
		case *syntax.ParamExp:
			j.param(x, sc)
			return true
		}
		return true
	})
}

func (j *judge) param(x *syntax.ParamExp, sc scope) {
	if x.Excl && x.Names == 0 && !allSubscript(x.Index) {
		// ${!X} expands the variable X names, and a name such as
		// a[$(cmd)] evaluates its subscript: code from a value.
		j.deny("indirect expansion ${!name} is not allowed (the name it reads can evaluate code)")
		return
	}
	if x.Index != nil && !allSubscript(x.Index) {
		// Bash evaluates the subscript of an indexed array as arithmetic,
		// quoted or not: ${a['$(cmd)']} runs cmd.
		j.subscript(x.Index)
	}
	if x.Slice != nil {
		for _, a := range []syntax.ArithmExpr{x.Slice.Offset, x.Slice.Length} {
			if a != nil {
				j.arith(a)
			}
		}
	}
	if x.Exp != nil {
		switch x.Exp.Op {
		case syntax.OtherParamOps:
			// ${x@P} expands prompt escapes (and $(…) in the value).
			j.deny("${name@op} expansions are not allowed")
		case syntax.AssignUnset, syntax.AssignUnsetOrNull:
			if x.Param != nil && dangerousVar(x.Param.Value) {
				j.deny("assignment to %s changes how commands run", x.Param.Value)
			}
			if x.Param != nil {
				j.taint(x.Param.Value, "assigned by ${name:=word}")
			}
		}
	}
	if x.Flags != nil || x.NestedParam != nil {
		j.deny("zsh parameter expansion flags are not supported")
	}
}

// allSubscript: ${a[@]}, ${a[*]}, ${!a[@]}, ${#a[@]} evaluate nothing.
func allSubscript(x syntax.ArithmExpr) bool {
	w, ok := x.(*syntax.Word)
	return ok && len(w.Parts) == 1 && (w.Lit() == "@" || w.Lit() == "*")
}

// subscript judges an array subscript: bash evaluates it as arithmetic
// (for indexed arrays; an associative array's key is plain text, but the
// parser cannot tell which kind a name is), so it is held to the
// arithmetic rule: literal numbers, variable names whose values are
// numbers, operators.
func (j *judge) subscript(x syntax.ArithmExpr) {
	j.arithWhy(x, "array subscripts are evaluated as arithmetic: only literal numbers and plain variable names are allowed (a quoted or expanded subscript runs any $(…) in it)")
}

var numberRe = regexp.MustCompile(`^([0-9]+|0[xX][0-9a-fA-F]+|[0-9]{1,2}#[0-9a-zA-Z@_]+)$`)

func isNumber(s string) bool { return s != "" && numberRe.MatchString(s) }

// arith allows arithmetic over literal numbers, plain variable names and
// array elements with such subscripts, joined by operators. An expansion
// ($x, $(…), quotes) puts text in the expression that bash evaluates as
// code (a[$(cmd)] runs cmd), so it is denied; a plain name is evaluated
// too, so its value must be a number: see arithNamesClean.
func (j *judge) arith(x syntax.ArithmExpr) {
	j.arithWhy(x, "arithmetic over expansions or quoted text is not allowed (bash evaluates them as code): only literal numbers and plain variable names")
}

func (j *judge) arithWhy(x syntax.ArithmExpr, why string) {
	if !j.spend(1) {
		return
	}
	switch v := x.(type) {
	case *syntax.BinaryArithm:
		j.arithWhy(v.X, why)
		j.arithWhy(v.Y, why)
	case *syntax.UnaryArithm:
		j.arithWhy(v.X, why)
	case *syntax.ParenArithm:
		j.arithWhy(v.X, why)
	case *syntax.Word:
		if len(v.Parts) != 1 {
			j.deny("%s", why)
			return
		}
		switch p := v.Parts[0].(type) {
		case *syntax.Lit:
			switch {
			case isNumber(p.Value):
			case varNameRe.MatchString(p.Value):
				j.useName(p.Value)
			default:
				j.deny("%s", why)
			}
		case *syntax.ParamExp:
			// a[i] inside arithmetic: the parser gives it as a short
			// parameter expansion without a dollar sign.
			if p.Dollar.IsValid() || !p.Short || p.Param == nil || !varNameRe.MatchString(p.Param.Value) ||
				p.Excl || p.Length || p.Width || p.IsSet || p.Slice != nil || p.Repl != nil || p.Exp != nil ||
				p.Names != 0 || p.Flags != nil || p.NestedParam != nil || len(p.Modifiers) > 0 {
				j.deny("%s", why)
				return
			}
			j.useName(p.Param.Value)
			if p.Index != nil {
				j.arithWhy(p.Index, why)
			}
		default:
			j.deny("%s", why)
		}
	default:
		j.deny("%s", why)
	}
}

// useName records a variable evaluated as arithmetic.
func (j *judge) useName(name string) {
	j.arithNames = append(j.arithNames, name)
}

// taint records that name may hold any text at run time.
func (j *judge) taint(name, why string) {
	if j.dirty == nil {
		j.dirty = map[string]string{}
	}
	if _, ok := j.dirty[name]; !ok {
		j.dirty[name] = why
	}
}

// markClean records an assignment of a literal number to name.
func (j *judge) markClean(name string) {
	if j.clean == nil {
		j.clean = map[string]bool{}
	}
	j.clean[name] = true
}

// assigned records an assignment of value (nil: dynamic) to name.
func (j *judge) assigned(name string, value *syntax.Word, array bool) {
	switch {
	case array:
		j.taint(name, "assigned an array")
	case value == nil:
		// x= assigns the empty string (0); declare x (naked, see decl)
		// assigns nothing and is not recorded.
		j.markClean(name)
	case isNumber(value.Lit()):
		j.markClean(name)
	default:
		j.taint(name, "assigned a value that is not a literal number")
	}
}

// arithNamesClean denies when a name used in arithmetic may hold code
// (flow-insensitively: any assignment in the whole line, nested shell
// strings included, counts). A name the line never assigns holds what
// the sandbox's fixed environment gives it, or nothing; bash's own
// variables that take run-time text (REPLY, BASH_REMATCH, PWD, ...) and
// other all-capitals names are accepted only when the line assigns them
// literal numbers.
func (j *judge) arithNamesClean() {
	if j.denied != "" {
		return
	}
	for _, n := range j.arithNames {
		if why, ok := j.dirty[n]; ok {
			j.deny("variable %s is evaluated as arithmetic but is %s (bash would run any $(…) in its value)", n, why)
			return
		}
		if shellSetVar(n) && !j.clean[n] {
			j.deny("variable %s is evaluated as arithmetic but holds text set at run time (bash would run any $(…) in its value)", n)
			return
		}
	}
}

// shellSetVar: variables bash or the environment set to text the policy
// does not see (REPLY, MAPFILE, OPTARG, BASH_REMATCH, PWD, HOME, ...):
// every name without a lower-case letter, except bash's own variables
// that always hold numbers (unless the line assigns them, which marks
// them as text).
func shellSetVar(n string) bool {
	return strings.ToUpper(n) == n && !numericShellVars[n]
}

var numericShellVars = map[string]bool{"RANDOM": true, "SRANDOM": true, "SECONDS": true, "LINENO": true, "EPOCHSECONDS": true,
	"BASHPID": true, "PPID": true, "UID": true, "EUID": true, "HISTCMD": true, "OPTIND": true}

func (j *judge) test(x syntax.TestExpr, sc scope) {
	switch t := x.(type) {
	case *syntax.Word:
		j.word(t, sc)
	case *syntax.ParenTest:
		j.test(t.X, sc)
	case *syntax.UnaryTest:
		if t.Op == syntax.TsVarSet || t.Op == syntax.TsRefVar {
			if w, ok := t.X.(*syntax.Word); !ok || !varNameRe.MatchString(w.Lit()) {
				j.deny("[[ -v ]] needs a plain variable name")
				return
			}
		}
		j.test(t.X, sc)
	case *syntax.BinaryTest:
		switch t.Op {
		case syntax.TsEql, syntax.TsNeq, syntax.TsLeq, syntax.TsGeq, syntax.TsLss, syntax.TsGtr:
			for _, side := range []syntax.TestExpr{t.X, t.Y} {
				w, ok := side.(*syntax.Word)
				if !ok {
					j.deny("[[ … -eq … ]] evaluates operands as arithmetic: only literal numbers and plain variable names are allowed")
					return
				}
				j.arithWhy(w, "[[ … -eq … ]] evaluates operands as arithmetic: only literal numbers and plain variable names are allowed")
			}
		}
		j.test(t.X, sc)
		j.test(t.Y, sc)
	default:
		j.deny("unsupported test expression %T", x)
	}
}

var varNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// decl judges declare/local/export/readonly/typeset/nameref.
func (j *judge) decl(d *syntax.DeclClause, sc scope) {
	for _, a := range d.Args {
		if a.Naked && a.Name == nil {
			// An option or a name given as a word.
			if j.word(a.Value, sc); j.denied != "" {
				return
			}
			v, ok := staticWord(a.Value)
			if !ok || len(v) != 1 {
				j.deny("%s with a dynamic argument", d.Variant.Value)
				return
			}
			s := v[0]
			if strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+") {
				if strings.ContainsAny(s[1:], "ifFn") {
					j.deny("%s %s is not allowed (integer attributes evaluate code; functions and namerefs hide commands)", d.Variant.Value, s)
					return
				}
				continue
			}
			if !varNameRe.MatchString(s) || dangerousVar(s) {
				j.deny("%s %s is not allowed", d.Variant.Value, s)
				return
			}
			continue // declare x keeps x's value: no assignment
		}
		if j.assign(a, sc); j.denied != "" {
			return
		}
		if a.Array != nil || mayBeCompound(a.Value) {
			// declare -a x='($(cmd))' (also without -a when x is already
			// an array, and local, typeset, readonly, export -a, declare
			// -A, x=\(…\), $'(…)') parses the value again as a compound
			// assignment, running what is in it.
			j.deny("%s with a compound value (NAME=(…), or a value that may begin with \"(\") is not allowed: bash parses it again and runs what is in it", d.Variant.Value)
			return
		}
	}
}

// mayBeCompound: the value of an assignment given to declare & co. may
// begin with "(" once expanded (bash then parses it as a compound array
// value).
func mayBeCompound(w *syntax.Word) bool {
	if w == nil {
		return false
	}
	if f, ok := staticWord(w); ok {
		for _, s := range f {
			if strings.HasPrefix(s, "(") {
				return true
			}
		}
		return false
	}
	first := ""
	switch x := w.Parts[0].(type) {
	case *syntax.Lit:
		first = strings.TrimPrefix(x.Value, "\\")
	case *syntax.SglQuoted:
		if x.Dollar {
			return true
		}
		first = x.Value
	case *syntax.DblQuoted:
		if len(x.Parts) > 0 {
			if lit, ok := x.Parts[0].(*syntax.Lit); ok {
				first = lit.Value
			}
		}
	}
	return first == "" || first[0] == '('
}

func (j *judge) assign(a *syntax.Assign, sc scope) {
	if a.Name != nil && dangerousVar(a.Name.Value) {
		j.deny("assignment to %s changes how commands run", a.Name.Value)
		return
	}
	if a.Index != nil {
		j.subscript(a.Index)
	}
	j.word(a.Value, sc)
	if a.Array != nil {
		for _, e := range a.Array.Elems {
			if e.Index != nil {
				j.subscript(e.Index)
			}
			j.word(e.Value, sc)
		}
	}
	if a.Name != nil {
		j.assigned(a.Name.Value, a.Value, a.Array != nil)
	}
}

// dangerousVar: variables that change which program runs or make a
// shell or interpreter run extra code. Assigning them is denied.
func dangerousVar(name string) bool {
	n := strings.ToUpper(name)
	switch n {
	case "PATH", "ENV", "SHELLOPTS", "BASHOPTS", "IFS", "PS0", "PS1", "PS2", "PS3", "PS4",
		"PROMPT_COMMAND", "CDPATH", "HOME", "OLDPWD", "PWD", "GLOBIGNORE", "EDITOR", "VISUAL",
		"PAGER", "MANPAGER", "BROWSER", "SSH_ASKPASS", "SUDO_ASKPASS", "SHELL", "GCONV_PATH",
		"LOCPATH", "NLSPATH", "TERMINFO", "HOSTALIASES", "TMOUT", "HISTFILE", "INPUTRC", "EXECIGNORE",
		// Settings files and variables that name programs (wgetrc's
		// use_askpass, tar's options, rsync's remote shell, OpenSSL
		// modules, git and gh configuration, man's options).
		"WGETRC", "SYSTEM_WGETRC", "CURL_HOME", "TAR_OPTIONS", "RSYNC_RSH", "RSYNC_CONNECT_PROG", "OPENSSL_CONF",
		"OPENSSL_ENGINES", "OPENSSL_MODULES", "XDG_CONFIG_HOME", "XDG_CONFIG_DIRS", "GH_PAGER", "GH_EDITOR",
		"GH_BROWSER", "GH_CONFIG_DIR", "MANOPT", "SYSTEMD_PAGER", "SYSTEMD_EDITOR", "GPG_AGENT_INFO":
		return true
	}
	for _, pre := range []string{"LD_", "DYLD_", "BASH_", "GIT_", "NPM_CONFIG_", "PYTHON", "PERL", "RUBY", "NODE_", "JAVA_", "_JAVA_", "LESS", "ZDOTDIR", "KSH_", "FPATH"} {
		if strings.HasPrefix(n, pre) {
			return true
		}
	}
	return false
}

// staticWord expands a word the way the shell would if it contains only
// literal text and quotes (no expansions, no globs, no ~): the fields it
// becomes (brace expansion can make several). ok is false otherwise.
func staticWord(w *syntax.Word) ([]string, bool) {
	if w == nil {
		return nil, false
	}
	for i, part := range w.Parts {
		switch x := part.(type) {
		case *syntax.Lit:
			if hasGlob(x.Value) || (i == 0 && strings.HasPrefix(x.Value, "~")) {
				return nil, false
			}
		case *syntax.SglQuoted:
		case *syntax.DblQuoted:
			for _, q := range x.Parts {
				if _, ok := q.(*syntax.Lit); !ok {
					return nil, false
				}
			}
		default:
			return nil, false
		}
	}
	if braceFields(w) > MaxFields {
		return nil, false
	}
	// A fresh Config per call: expand.Fields(nil, …) mutates a shared
	// package-level default, which races under concurrent Checks.
	fields, err := expand.Fields(&expand.Config{}, w)
	if err != nil {
		return nil, false
	}
	return fields, true
}

// braceFields is how many words brace expansion makes of w, computed
// from the brace structure without expanding (saturated above MaxFields):
// mvdan.cc/sh expands up to 16Ki words and copies the word's parts for
// each, which nested braces turn into gigabytes.
func braceFields(w *syntax.Word) int {
	cp := *w
	if !syntax.SplitBraces(&cp) {
		return 1
	}
	return partsFields(cp.Parts)
}

func partsFields(parts []syntax.WordPart) int {
	n := 1
	for _, p := range parts {
		if b, ok := p.(*syntax.BraceExp); ok {
			n = satMul(n, braceExpFields(b))
		}
	}
	return n
}

func braceExpFields(b *syntax.BraceExp) int {
	if b.Sequence {
		if len(b.Elems) < 2 {
			return 1
		}
		from, to := b.Elems[0].Lit(), b.Elems[1].Lit()
		var lo, hi int64
		if x, err := strconv.ParseInt(from, 10, 64); err == nil {
			y, err := strconv.ParseInt(to, 10, 64)
			if err != nil {
				return MaxFields + 1
			}
			lo, hi = x, y
		} else if len(from) == 1 && len(to) == 1 {
			lo, hi = int64(from[0]), int64(to[0])
		} else {
			return 1 // not a sequence bash expands
		}
		span := hi - lo
		if span < 0 {
			span = -span
		}
		step := int64(1)
		if len(b.Elems) > 2 {
			if s, err := strconv.ParseInt(b.Elems[2].Lit(), 10, 64); err == nil && s != 0 {
				if s < 0 {
					s = -s
				}
				step = s
			}
		}
		n := span/step + 1
		if n > MaxFields || n < 0 {
			return MaxFields + 1
		}
		return int(n)
	}
	n := 0
	for _, e := range b.Elems {
		n += partsFields(e.Parts)
		if n > MaxFields {
			return MaxFields + 1
		}
	}
	return n
}

func satMul(a, b int) int {
	if a > MaxFields || b > MaxFields || a*b > MaxFields {
		return MaxFields + 1
	}
	return a * b
}

// hasGlob reports unescaped glob metacharacters in an unquoted literal.
func hasGlob(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '*', '?':
			return true
		case '[':
			if strings.ContainsRune(s[i+1:], ']') {
				return true
			}
		}
	}
	return false
}

// token is one argv element after expansion; dyn marks an element whose
// value is only known at run time (it may also be zero or many fields).
type token struct {
	val string
	dyn bool
	raw string // source text of a dynamic literal word (a glob), for messages and rm checks
	// safe: a dynamic value that cannot begin with "-" (it starts with
	// static text that does not), so it is no option.
	safe bool
	// glob: val is a glob pattern (the word's text with quotes removed
	// where it had none); set with dyn.
	glob bool
}

func (t token) String() string {
	if t.dyn {
		return "<dynamic>"
	}
	return t.val
}

func (j *judge) call(c *syntax.CallExpr, redirs []*syntax.Redirect, sc scope) {
	for _, a := range c.Assigns {
		j.assign(a, sc)
	}
	var toks []token
	for _, w := range c.Args {
		j.word(w, sc)
		if j.denied != "" {
			return
		}
		if f, ok := staticWord(w); ok {
			for _, s := range f {
				toks = append(toks, token{val: s})
			}
		} else {
			t := token{dyn: true, raw: w.Lit(), safe: staticPrefixNoDash(w)}
			if t.raw != "" && hasGlob(t.raw) {
				t.glob, t.val = true, t.raw
			}
			toks = append(toks, t)
		}
	}
	if j.denied != "" || len(toks) == 0 {
		return
	}
	j.command(toks, redirs, sc)
}

// staticPrefixNoDash: the word begins with static text whose first
// character is not "-", so whatever it expands to is no option.
func staticPrefixNoDash(w *syntax.Word) bool {
	if len(w.Parts) == 0 {
		return false
	}
	first := ""
	switch x := w.Parts[0].(type) {
	case *syntax.Lit:
		first = x.Value
	case *syntax.SglQuoted:
		first = x.Value
	case *syntax.DblQuoted:
		if len(x.Parts) > 0 {
			if lit, ok := x.Parts[0].(*syntax.Lit); ok {
				first = lit.Value
			}
		}
	}
	if first == "" {
		return false
	}
	switch first[0] {
	case '-', '*', '?', '[', '{', '\\', '~':
		return false
	}
	return true
}

// command judges argv: it strips wrappers and follows payloads, then
// judges the program that finally runs.
func (j *judge) command(toks []token, redirs []*syntax.Redirect, sc scope) {
	if j.denied != "" {
		return
	}
	if len(toks) == 0 {
		return
	}
	name := toks[0]
	if name.dyn {
		j.deny("command name is not static (comes from a variable, substitution or glob)")
		return
	}
	if name.val != "[" && (!validName(name.val) || strings.HasPrefix(name.val, "-")) {
		j.deny("command name %q has characters the policy does not accept (non-ASCII look-alikes, globs, control characters)", name.val)
		return
	}
	base := name.val
	qualified := strings.Contains(base, "/")
	if qualified {
		base = path.Base(base)
		if !validName(base) || base == "." || base == ".." {
			j.deny("command path %q does not name a program", name.val)
			return
		}
	}
	if isBlocked(base) {
		j.deny("%s is on the hard blocklist", base)
		return
	}
	args := toks[1:]
	// ./timeout or /tmp/x/bash may be a copy of the program its name
	// says, so it is unwrapped like one (that only judges more); final
	// still refuses it the allowlist of the system program.
	if qualified && !systemDirs[path.Dir(name.val)] && j.p.mode != ModeFull {
		_, isWrapper := wrappers[base]
		sh, _ := isShell(base)
		if isWrapper || sh || base == "find" || base == "xargs" {
			j.needStrict(canonical(base, args), fmt.Sprintf("%s is not a system program (only bare names and /usr/bin… match the allowlist)", name.val))
		}
	}
	if w, ok := wrappers[base]; ok {
		j.wrapper(name.val, base, w, args, redirs, sc)
		return
	}
	if sh, _ := isShell(base); sh {
		j.shell(base, name.val, args, redirs, sc)
		return
	}
	switch base {
	case "find":
		j.find(name.val, args, sc)
		return
	case "xargs":
		j.xargs(args, redirs, sc)
		return
	case "trap":
		j.trap(args, sc)
		return
	}
	j.final(name.val, base, qualified, args)
}

// systemDirs hold programs that a bare allowlist name may also be called by
// full path (/usr/bin/ls is ls; ./ls is not).
var systemDirs = map[string]bool{"/bin": true, "/usr/bin": true, "/usr/local/bin": true, "/sbin": true, "/usr/sbin": true, "/usr/local/sbin": true}

// harmlessBuiltins are shell builtins allowed in allowlist mode once their
// arguments passed the variable checks below.
var harmlessBuiltins = map[string]bool{
	"read": true, "mapfile": true, "readarray": true, "set": true, "unset": true, "shift": true,
	"return": true, "exit": true, "break": true, "continue": true, "getopts": true, "wait": true,
	"jobs": true, "umask": true, "ulimit": true, "times": true, "help": true,
	"command": true, "builtin": true, "trap": true, "env": true,
	"declare": true, "typeset": true, "export": true, "local": true, "readonly": true,
}

// varTakingBuiltins take variable names that bash evaluates (a[$(cmd)]).
var varTakingBuiltins = map[string]bool{"read": true, "mapfile": true, "readarray": true, "getopts": true, "unset": true, "printf": true, "test": true, "[": true, "wait": true}

// final judges the program that actually runs.
func (j *judge) final(written, base string, qualified bool, args []token) {
	canon := canonical(base, args)
	j.cmds = append(j.cmds, canon)
	switch base {
	case "let":
		j.deny("let evaluates arithmetic over variables (bash evaluates their values as code)")
		return
	case "declare", "typeset", "export", "local", "readonly", "nameref":
		// Reached as a plain command only when quoted or wrapped
		// (\export, builtin declare); judged like the declaration syntax.
		if !j.declArgs(base, args) {
			return
		}
	}
	if varTakingBuiltins[base] {
		if !j.builtinVars(base, args) {
			return
		}
	}
	switch base {
	case "set":
		if !j.setArgs("set", args) {
			return
		}
	case "shopt":
		if !j.shoptArgs(args) {
			return
		}
	case "compgen", "complete", "bind":
		if !j.codeStringBuiltin(base, args) {
			return
		}
	case "rm":
		if why := j.rmRule(args); why != "" {
			j.deny("%s is denied in every mode", why)
			return
		}
	case "kill", "pkill", "killall":
		if why := killRule(base, args); why != "" {
			j.deny("%s is denied in every mode", why)
			return
		}
	case "cd", "pushd", "popd":
		j.cwdChanged = true
	case "sort":
		if !j.programOption(base, args, []string{"--compress-program"}, sortLong) {
			return
		}
	}
	if !j.programOptions(base, args) {
		return
	}
	code := unjudgedCode(base, args)
	dir := path.Dir(written)
	trusted := !qualified || systemDirs[dir]
	class, uses := filepolicy.Unknown, []filepolicy.PathUse(nil)
	if trusted {
		class, uses = classify(base, args)
	}
	// File policy applies to known file arguments in every mode.
	pathsOK := j.checkPaths(canon, base, uses)
	if j.denied != "" {
		return
	}
	switch j.p.mode {
	case ModeFull:
		j.allow("execSecurity full")
		return
	}
	// Allowlist mode.
	if re, ok := j.p.sensitive[base]; ok && trusted {
		for _, t := range args {
			if t.dyn {
				j.need(canon, base+" with dynamic arguments")
				return
			}
		}
		if why := unknownSubcommandSyntax(args); why != "" {
			j.need(canon, "sensitive table of "+base+": "+why+" (unknown syntax counts as sensitive)")
			return
		}
		for _, r := range re {
			for _, form := range sensitiveForms(base, canon, args) {
				if r.MatchString(form) {
					j.need(canon, "sensitive subcommand: "+canon)
					return
				}
			}
		}
		j.allow("non-sensitive " + base + " subcommand")
		return
	}
	if !trusted {
		j.needStrict(canon, fmt.Sprintf("%s is not a system program (only bare names and /usr/bin… match the allowlist)", written))
		return
	}
	if code != "" {
		if j.p.allow[base] {
			j.allow(base + " is allowlisted (the operator lets it run code)")
			return
		}
		j.needStrict(canon, code)
		return
	}
	if class == filepolicy.Unknown && filepolicy.IsReadOnlyName(base) {
		j.need(canon, base+" with an option or run-time argument outside the policy's table of "+base+"'s options")
		return
	}
	if class == filepolicy.Writes && (j.p.allow[base] || filepolicy.IsReadOnlyName(base)) {
		// An allowlisted (or normally read-only) program with options
		// that write: the writes are judged like redirections.
		j.writes(canon, base, uses)
		return
	}
	if j.p.allow[base] {
		if !pathsOK {
			j.need(canon, base+" with file arguments the file policy cannot check")
			return
		}
		j.allow(base + " is allowlisted")
		return
	}
	if class == filepolicy.ReadOnly || harmlessBuiltins[base] {
		if !pathsOK {
			j.need(canon, base+" with file arguments the file policy cannot check")
			return
		}
		j.allow("read-only " + base)
		return
	}
	if class == filepolicy.Writes {
		j.need(canon, base+" writes files and is not in the allowlist")
		return
	}
	j.need(canon, base+" is not in the allowlist")
}

// subcommandWord is how the sensitive table expects a subcommand word.
var subcommandWord = regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)

// unknownSubcommandSyntax says why the arguments of a program with a
// sensitive-subcommand table are not the plain "prog sub sub ARGS…" the
// table's rules read, or "". The program may accept global options,
// other cases or other orders (icqq -v group kick, icqq Group KICK) that
// a rule written for "icqq group kick" would miss, so such a command
// counts as sensitive.
func unknownSubcommandSyntax(args []token) string {
	for _, t := range args {
		if strings.HasPrefix(t.val, "-") || strings.HasPrefix(t.val, "+") {
			return "option " + quoteArg(t.val)
		}
	}
	if len(args) == 0 {
		return ""
	}
	for _, t := range args {
		if isNumber(t.val) {
			break // the first id ends the subcommand
		}
		if !subcommandWord.MatchString(t.val) {
			return "subcommand word " + quoteArg(t.val) + " is not lower-case ASCII"
		}
	}
	if !subcommandWord.MatchString(args[0].val) {
		return "no subcommand before " + quoteArg(args[0].val)
	}
	return ""
}

// sensitiveForms are the spellings the sensitive rules are matched
// against: the command, in lower case, and with only its word arguments
// (numbers and other values dropped, so "icqq group 1 kick" reads as
// "icqq group kick").
func sensitiveForms(base, canon string, args []token) []string {
	words := []string{base}
	for _, t := range args {
		if subcommandWord.MatchString(strings.ToLower(t.val)) {
			words = append(words, strings.ToLower(t.val))
		}
	}
	return []string{canon, strings.ToLower(canon), strings.Join(words, " ")}
}

// writes judges the written paths of a command that writes files.
func (j *judge) writes(canon, base string, uses []filepolicy.PathUse) {
	n := 0
	for _, u := range uses {
		if u.Access != filepolicy.Write {
			continue
		}
		n++
		if u.Path == "" {
			j.need(canon, base+" writes a file named at run time")
			continue
		}
		if !j.writePath(base, u.Path) {
			return
		}
	}
	if n == 0 {
		j.need(canon, base+" with options that change files or system state")
	}
}

// classify runs the shared file classification on argv; dynamic
// arguments become "" paths so callers see that a path is unknown.
func classify(base string, args []token) (filepolicy.Class, []filepolicy.PathUse) {
	argv := make([]string, 0, len(args)+1)
	argv = append(argv, base)
	for _, t := range args {
		if t.dyn {
			if t.safe {
				argv = append(argv, filepolicy.DynamicArg)
			} else {
				argv = append(argv, filepolicy.DynamicMaybeOption)
			}
			continue
		}
		argv = append(argv, t.val)
	}
	return filepolicy.ClassifyCommand(argv)
}

// checkPaths applies the file policy to the known paths of a command.
// It denies on a violation and returns false when a path is dynamic.
func (j *judge) checkPaths(canon, base string, uses []filepolicy.PathUse) bool {
	if j.p.files == nil {
		return true
	}
	ok := true
	for _, u := range uses {
		if u.Path == "" {
			ok = false
			continue
		}
		if _, err := j.p.files.Resolve(u.Path, u.Access); err != nil {
			j.deny("%s: %v", base, err)
			return false
		}
	}
	return ok
}

// declArgs checks declare/export/… arguments given as plain words.
func (j *judge) declArgs(base string, args []token) bool {
	for _, t := range args {
		if t.dyn {
			j.deny("%s with a dynamic argument", base)
			return false
		}
		s := t.val
		if strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+") {
			if strings.ContainsAny(s[1:], "ifFn") {
				j.deny("%s %s is not allowed (integer attributes evaluate code; functions and namerefs hide commands)", base, s)
				return false
			}
			continue
		}
		name, val, hasVal := strings.Cut(s, "=")
		name = strings.TrimSuffix(name, "+")
		if !varNameRe.MatchString(name) || dangerousVar(name) {
			j.deny("%s %s is not allowed", base, s)
			return false
		}
		if strings.HasPrefix(val, "(") {
			j.deny("%s with a compound value (NAME=(…)) is not allowed: bash parses it again and runs what is in it", base)
			return false
		}
		switch {
		case hasVal && !isNumber(val):
			j.taint(name, "assigned a value that is not a literal number")
		case hasVal:
			j.markClean(name)
		}
	}
	return true
}

// builtinVars checks the variable-name arguments of read, printf -v,
// unset, test -v, ...: bash evaluates subscripts in them as code, and
// reading into PATH or IFS changes how later commands run.
func (j *judge) builtinVars(base string, args []token) bool {
	check := func(t token) bool {
		if t.dyn {
			j.deny("%s with a dynamic variable name", base)
			return false
		}
		if strings.ContainsAny(t.val, "$`[") || dangerousVar(t.val) {
			j.deny("%s %q: variable names with subscripts or expansions, or that change how commands run, are not allowed", base, t.val)
			return false
		}
		j.taint(t.val, "set at run time by "+base)
		return true
	}
	// The variables these builtins fill when given no name.
	switch base {
	case "read":
		j.taint("REPLY", "set at run time by read")
	case "mapfile", "readarray":
		j.taint("MAPFILE", "set at run time by "+base)
	case "getopts":
		j.taint("OPTARG", "set at run time by getopts")
	}
	switch base {
	case "mapfile", "readarray":
		for _, t := range args {
			if !t.dyn && strings.HasPrefix(t.val, "-") && strings.Contains(t.val, "C") {
				j.deny("%s -C runs a callback as code", base)
				return false
			}
		}
	case "printf":
		for i, t := range args {
			if !t.dyn && t.val == "-v" && i+1 < len(args) {
				return check(args[i+1])
			}
			if !t.dyn && strings.HasPrefix(t.val, "-v") && len(t.val) > 2 {
				return check(token{val: t.val[2:]})
			}
		}
		return true
	case "test", "[":
		for i, t := range args {
			if !t.dyn && (t.val == "-v" || t.val == "-R") && i+1 < len(args) {
				if !check(args[i+1]) {
					return false
				}
			}
		}
		return true
	case "wait":
		for i, t := range args {
			if !t.dyn && t.val == "-p" && i+1 < len(args) {
				return check(args[i+1])
			}
		}
		return true
	}
	for _, t := range args {
		if t.dyn || !strings.HasPrefix(t.val, "-") {
			if !check(t) {
				return false
			}
		}
	}
	return true
}

// canonical renders the normalized command that approval rules and the
// sensitive table match: base name and arguments, single spaces, shell
// quoting where needed, <dynamic> for run-time values.
func canonical(base string, args []token) string {
	var b strings.Builder
	b.WriteString(base)
	for _, t := range args {
		b.WriteByte(' ')
		if t.dyn {
			b.WriteString("<dynamic>")
			continue
		}
		b.WriteString(quoteArg(t.val))
	}
	return b.String()
}

var plainArg = regexp.MustCompile(`^[A-Za-z0-9_./:=@%+,^-]+$`)

func quoteArg(s string) string {
	if plainArg.MatchString(s) {
		return s
	}
	q, err := syntax.Quote(s, syntax.LangBash)
	if err != nil {
		return fmt.Sprintf("%q", s)
	}
	return q
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case r == '.' || r == '_' || r == '-' || r == '+' || r == '/' || r == '@' || r == ':' || r == ',':
		default:
			return false
		}
	}
	return true
}
