package execpolicy

import (
	"regexp"
	"strings"

	"github.com/agentbus/agentbus/pkg/filepolicy"
)

// Options that name a program to run turn an ordinary tool into a
// launcher: wget --use-askpass=/bin/sh, tar --to-command=…, rsync -e …,
// git -c core.pager=…, man -P …. They are judged in every mode, whether
// or not the tool itself is allowlisted: the named program is judged as a
// command of its own with a run-time argument (so /bin/sh, sudo or a
// script file are refused or need approval as if written directly), and
// an option whose program cannot be read from the line (a configuration
// file, a wgetrc command the policy does not know) needs the owner's
// approval outside execSecurity full.
//
// Long options are matched the way getopt_long matches them, and more:
// any prefix of a program option counts as that option (--use-ask= is
// --use-askpass=), even where the program would call the prefix
// ambiguous and refuse it; only the exact names in progSpec.exact (tar's
// --checkpoint, a prefix of --checkpoint-action) are told apart.

// progSpec lists the options of one program that name programs.
type progSpec struct {
	long      []string // long options whose value is a program (with arguments)
	longCfg   []string // long options whose value is a file of settings that may name programs
	short     string   // short options whose value is a program
	shortCfg  string   // short options whose value is a settings file (or cannot be followed)
	valShort  string   // other short options that take a value (they end a cluster)
	exact     []string // long options that are exact names, not prefixes of a program option
	optValues bool     // the program option's value is optional and attached only (git grep -O)
}

var progSpecs = map[string]progSpec{
	"wget": {long: l("--use-askpass"), longCfg: l("--config"), valShort: "oaiBtTOwQPlDARIXU"},
	"tar": {long: l("--to-command --use-compress-program --rsh-command --rmt-command --info-script --new-volume-script --checkpoint-action"),
		short: "IF", valShort: "bCfgHKLNTVX", exact: l("--checkpoint")},
	"rsync": {long: l("--rsh --rsync-path"), short: "e", valShort: "BfTM"},
	"zip":   {long: l("--unzip-command")},
	"man":   {long: l("--pager --html"), short: "PH", valShort: "CMSsLmeprRE"},
	// sort --compress-program: see programOption, with sort's full table.
}

// plainProgram: a program with arguments as written in an option value,
// split on blanks the way the programs above split it, with nothing a
// shell would interpret.
var plainProgram = regexp.MustCompile(`^[A-Za-z0-9_./:=@%+,\- ]+$`)

// longMatch reports which of opts the typed long option name selects,
// by exact name or as a prefix of at least "--x".
func longMatch(name string, opts, exact []string) (string, bool) {
	if len(name) < 3 || !strings.HasPrefix(name, "--") || contains(exact, name) {
		return "", false
	}
	for _, o := range opts {
		if strings.HasPrefix(o, name) {
			return o, true
		}
	}
	return "", false
}

// programOptions judges the options of base that name programs; it
// reports false once the line is denied.
func (j *judge) programOptions(base string, args []token) bool {
	switch base {
	case "git":
		return j.gitOptions(args)
	case "sort":
		// --compress-program: programOption, with sort's full table.
		j.runtimeOption(base, args, "")
		return j.denied == ""
	}
	spec, ok := progSpecs[base]
	if !ok {
		return true
	}
	j.runtimeOption(base, args, spec.valShort+spec.short+spec.shortCfg)
	for i := 0; i < len(args); i++ {
		t := args[i]
		if t.dyn {
			continue // see runtimeOption
		}
		a := t.val
		if a == "--" {
			break
		}
		if i == 0 && base == "tar" && a != "" && a[0] != '-' {
			// Old-style "tar xIf PROG a.tar": letters whose values follow
			// in order; an I or F there names a program.
			if strings.ContainsAny(a, "IF") {
				j.strict("tar "+a, "tar old-style options "+a+" name a program")
			}
			continue
		}
		if strings.HasPrefix(a, "--") {
			name, val, hasVal := strings.Cut(a, "=")
			if _, ok := longMatch(name, l("--execute"), nil); ok && base == "wget" {
				if !hasVal {
					if i+1 >= len(args) || args[i+1].dyn {
						j.deny("wget --execute with a command only known at run time")
						return false
					}
					i++
					val = args[i].val
				}
				if !j.wgetrc(val) {
					return false
				}
				continue
			}
			if full, ok := longMatch(name, spec.longCfg, spec.exact); ok {
				j.strict(canonical(base, args), base+" "+full+" reads settings that can name a program from a file")
				continue
			}
			full, ok := longMatch(name, spec.long, spec.exact)
			if !ok {
				continue
			}
			if !hasVal {
				if i+1 >= len(args) || args[i+1].dyn {
					j.deny("%s %s with a program only known at run time", base, full)
					return false
				}
				i++
				val = args[i].val
			}
			if !j.namedProgram(base, full, val) {
				return false
			}
			continue
		}
		if len(a) < 2 || a[0] != '-' {
			continue
		}
		if base == "wget" && !j.wgetShort(a, args, &i) {
			return false
		}
		for k := 1; k < len(a); k++ {
			c := a[k]
			switch {
			case strings.IndexByte(spec.short, c) >= 0 || strings.IndexByte(spec.shortCfg, c) >= 0:
				val := a[k+1:]
				if val == "" {
					if i+1 >= len(args) || args[i+1].dyn {
						j.deny("%s -%c with a program only known at run time", base, c)
						return false
					}
					i++
					val = args[i].val
				}
				if strings.IndexByte(spec.shortCfg, c) >= 0 {
					j.strict(canonical(base, args), base+" -"+string(c)+" reads settings that can name a program from a file")
				} else if !j.namedProgram(base, "-"+string(c), val) {
					return false
				}
				k = len(a)
			case strings.IndexByte(spec.valShort, c) >= 0:
				if k == len(a)-1 {
					i++ // the value is the next argument
				}
				k = len(a)
			}
		}
	}
	return j.denied == ""
}

// runtimeOption: an argument only known at run time in a place where it
// may be an option ($OPTS, "$x"; not ./$f, nor the value of a short
// option that takes one) may be one that names a program, so the tool
// needs the owner's approval outside execSecurity full.
func (j *judge) runtimeOption(base string, args []token, valShort string) {
	for i := 0; i < len(args); i++ {
		t := args[i]
		if t.dyn {
			if !t.safe {
				j.strict(canonical(base, args), base+" with an argument only known at run time (it could be an option that names a program)")
				return
			}
			continue
		}
		if t.val == "--" {
			return
		}
		if a := t.val; len(a) > 1 && a[0] == '-' && a[1] != '-' && strings.IndexByte(valShort, a[len(a)-1]) >= 0 {
			i++ // the next argument is this option's value
		}
	}
}

// strict records a command that needs the owner's approval outside
// execSecurity full (execApprovalMode allow does not cover it).
func (j *judge) strict(canon, why string) {
	if j.p.mode == ModeFull {
		return
	}
	j.needStrict(canon, why)
}

// namedProgram judges the program an option names, with a run-time
// argument, as if it were a command of the line.
func (j *judge) namedProgram(base, opt, val string) bool {
	val = strings.TrimSpace(val)
	if val == "" {
		return true // no program: the tool's default
	}
	if !plainProgram.MatchString(val) {
		j.deny("%s %s %q: a program given with shell syntax is not allowed", base, opt, val)
		return false
	}
	var toks []token
	for _, f := range strings.Fields(val) {
		toks = append(toks, token{val: f})
	}
	toks = append(toks, token{dyn: true})
	j.command(toks, nil, scope{})
	return j.denied == ""
}

// wgetShort handles wget's -e (a wgetrc command, the same as --execute)
// inside a cluster of short options; other letters are left to the
// generic loop.
func (j *judge) wgetShort(a string, args []token, i *int) bool {
	for k := 1; k < len(a); k++ {
		c := a[k]
		switch {
		case c == 'n':
			k++ // -nv -nc -nH -nd -np
		case c == 'e':
			val := a[k+1:]
			if val == "" {
				if *i+1 >= len(args) || args[*i+1].dyn {
					j.deny("wget -e with a command only known at run time")
					return false
				}
				*i++
				val = args[*i].val
			}
			return j.wgetrc(val)
		case strings.IndexByte(progSpecs["wget"].valShort, c) >= 0:
			return true
		}
	}
	return true
}

// wgetrcSafe are the wgetrc commands (lower case, without - and _, the
// way wget compares them) that name no program and read no file.
var wgetrcSafe = map[string]bool{
	"robots": true, "tries": true, "timeout": true, "readtimeout": true, "connecttimeout": true, "dnstimeout": true,
	"waitretry": true, "wait": true, "randomwait": true, "useragent": true, "header": true, "checkcertificate": true,
	"verbose": true, "quiet": true, "serverresponse": true, "timestamping": true, "continue": true, "noclobber": true,
	"recursive": true, "reclevel": true, "noparent": true, "spanhosts": true, "domains": true, "excludedomains": true,
	"accept": true, "reject": true, "maxredirect": true, "retryconnrefused": true, "inet4only": true, "inet6only": true,
	"httpkeepalive": true, "cache": true, "contentdisposition": true, "progress": true, "limitrate": true, "quota": true,
	"httpsonly": true, "compression": true, "iri": true, "localencoding": true, "remoteencoding": true,
	"restrictfilenames": true, "adjustextension": true, "convertlinks": true, "pagerequisites": true, "mirror": true,
	"cutdirs": true, "addhostdir": true, "dirstruct": true, "dotbytes": true,
	"dotstyle": true, "dotsinline": true, "dotspacing": true, "backups": true, "followftp": true, "ignorecase": true,
}

// wgetrc judges one wgetrc command given with -e/--execute.
func (j *judge) wgetrc(cmd string) bool {
	name, val, _ := strings.Cut(cmd, "=")
	n := strings.ToLower(strings.NewReplacer("_", "", "-", "", " ", "", "\t", "").Replace(name))
	switch {
	case n == "useaskpass":
		return j.namedProgram("wget", "-e use_askpass", val)
	case wgetrcSafe[n]:
		return true
	}
	j.strict("wget -e "+quoteArg(cmd), "wget -e "+quoteArg(cmd)+": a wgetrc command the policy does not know (use_askpass runs a program)")
	return true
}

// gitConfigSafe are git configuration keys (lower case) that name no
// program, file or command; -c with any other key has its value judged
// as a program.
var gitConfigSafe = map[string]bool{
	"user.name": true, "user.email": true, "core.quotepath": true, "core.autocrlf": true, "core.safecrlf": true,
	"core.abbrev": true, "core.filemode": true, "core.ignorecase": true, "init.defaultbranch": true, "safe.directory": true,
	"pull.rebase": true, "push.default": true, "merge.conflictstyle": true, "diff.noprefix": true, "diff.renames": true,
	"log.showsignature": true, "log.decorate": true, "log.date": true, "color.ui": true, "advice.detachedhead": true,
	"column.ui": true, "http.sslverify": true,
}

// gitGlobalVal are git's global options that take a value.
var gitGlobalVal = l("--git-dir --work-tree --namespace --super-prefix --list-cmds --attr-source")

// gitOptions judges git's global options (-c KEY=VALUE, --config-env,
// --exec-path=DIR) and the subcommand options that run a program (grep
// -O/--open-files-in-pager, --ext-diff, difftool's --extcmd).
func (j *judge) gitOptions(args []token) bool {
	i := 0
	for ; i < len(args); i++ {
		t := args[i]
		if t.dyn {
			// It could be -c core.pager=… at run time.
			j.strict(canonical("git", args), "git with an argument only known at run time before its subcommand")
			continue
		}
		a := t.val
		switch {
		case a == "-c" || strings.HasPrefix(a, "-c"):
			kv := strings.TrimPrefix(a, "-c")
			if kv == "" {
				if i+1 >= len(args) || args[i+1].dyn {
					j.deny("git -c with a setting only known at run time")
					return false
				}
				i++
				kv = args[i].val
			}
			key, val, _ := strings.Cut(kv, "=")
			if !gitConfigSafe[strings.ToLower(key)] && !j.namedProgram("git", "-c "+key, val) {
				return false
			}
		case strings.HasPrefix(a, "--") && a != "--":
			name, _, hasVal := strings.Cut(a, "=")
			if _, ok := longMatch(name, l("--config-env"), nil); ok {
				j.strict(canonical("git", args), "git --config-env sets configuration (which can name programs) from the environment")
				continue
			}
			if _, ok := longMatch(name, l("--exec-path"), nil); ok && hasVal {
				j.strict(canonical("git", args), "git --exec-path=DIR runs git's programs from DIR")
				continue
			}
			if full, ok := filepolicy.LongOption(name, gitGlobalVal); ok && contains(gitGlobalVal, full) && !hasVal {
				i++
			}
		case a == "-C":
			i++
		case strings.HasPrefix(a, "-"):
		default:
			goto sub
		}
	}
	return true
sub:
	sub, rest := args[i].val, args[i+1:]
	switch sub {
	case "bisect", "submodule", "filter-branch", "filter-repo", "difftool", "mergetool":
		j.strict(canonical("git", args), "git "+sub+" runs programs or commands given on the line or in the configuration")
		return true
	case "config":
		// git config KEY VALUE writes a setting later commands read.
		var ops []token
		for _, t := range rest {
			if t.dyn || !strings.HasPrefix(t.val, "-") {
				ops = append(ops, t)
			}
		}
		if len(ops) >= 2 {
			if ops[0].dyn || ops[1].dyn {
				j.strict(canonical("git", args), "git config with a key or value only known at run time")
				return true
			}
			if !gitConfigSafe[strings.ToLower(ops[0].val)] && !j.namedProgram("git", "config "+ops[0].val, ops[1].val) {
				return false
			}
		}
		return true
	}
	for _, t := range rest {
		if t.dyn {
			if !t.safe {
				j.strict(canonical("git", args), "git "+sub+" with an argument only known at run time (it could be an option that runs a program)")
			}
			continue
		}
		a := t.val
		if a == "--" {
			break
		}
		name, _, _ := strings.Cut(a, "=")
		if _, ok := longMatch(name, l("--open-files-in-pager --ext-diff --extcmd --exec"), nil); ok {
			j.strict(canonical("git", args), "git "+a+" runs a program given as an option or in the configuration")
			continue
		}
		if len(a) > 1 && a[0] == '-' && a[1] != '-' {
			if (sub == "grep" && strings.ContainsRune(a[1:], 'O')) || (sub == "rebase" && strings.ContainsRune(a[1:], 'x')) {
				j.strict(canonical("git", args), "git "+sub+" "+a+" runs a program named in the option or the configuration")
			}
		}
	}
	return true
}
