package filepolicy

import "strings"

// Class is the effect of a command on files.
type Class int

const (
	// Unknown: not a command this package knows; it may do anything.
	Unknown Class = iota
	// ReadOnly: reads files and prints; writes nothing.
	ReadOnly
	// Writes: creates, changes or deletes files (paths are reported when known).
	Writes
)

func (c Class) String() string {
	switch c {
	case ReadOnly:
		return "read-only"
	case Writes:
		return "writes"
	}
	return "unknown"
}

// PathUse is one path a command touches and how.
type PathUse struct {
	Path   string
	Access Access
}

// cmdSpec describes the argv shape of a known command.
type cmdSpec struct {
	// value lists short flags (single letters) that take a value in the
	// next argument or attached ("-n 5", "-n5").
	value string
	// longValue lists long options that take the next argument as value
	// when not given as --opt=value.
	longValue []string
	// operand: how non-option arguments are used.
	operand operandKind
	// writeFlags: short or long flags (without value) whose presence
	// makes the command write; writeValue: flags whose value is a written path.
	writeFlags []string
	writeValue []string
	// unsafeFlags make the command unclassifiable (they run programs).
	unsafeFlags []string
	// readValue: flags whose value is a read path (grep -f).
	readValue []string
}

type operandKind int

const (
	opPaths      operandKind = iota // every operand is a read path
	opNone                          // operands are not paths (echo, printf, tr)
	opPattern                       // first operand is a pattern unless -e/-f given (grep)
	opInOut                         // [in [out]]: a second operand is written (uniq, xxd)
	opNoneOrSets                    // operands are not paths but more than zero make it write (hostname)
)

// readOnlyCommands is the shared table of commands that only read. It is
// deliberately small: a command is here only if no flag combination lets
// it write files or run programs, or those flags are listed.
var readOnlyCommands = map[string]cmdSpec{
	"cat":       {value: "", operand: opPaths},
	"tac":       {operand: opPaths},
	"nl":        {value: "bdfhilnsvw", operand: opPaths},
	"head":      {value: "nc", operand: opPaths},
	"tail":      {value: "ncs", longValue: []string{"--pid", "--sleep-interval", "--max-unchanged-stats"}, operand: opPaths},
	"wc":        {operand: opPaths, readValue: []string{"--files0-from"}},
	"stat":      {value: "ct", longValue: []string{"--format", "--printf"}, operand: opPaths},
	"file":      {value: "emFfP", operand: opPaths, writeFlags: []string{"-C", "--compile"}},
	"ls":        {value: "ITw", longValue: []string{"--hide", "--ignore", "--width", "--tabsize", "--block-size", "--format", "--sort", "--time", "--time-style", "--color", "--quoting-style", "--indicator-style"}, operand: opPaths},
	"tree":      {value: "LPIH", operand: opPaths, writeValue: []string{"-o"}},
	"du":        {value: "dBtX", longValue: []string{"--max-depth", "--block-size", "--threshold", "--exclude", "--time-style"}, operand: opPaths},
	"df":        {value: "Bt", operand: opPaths},
	"md5sum":    {operand: opPaths},
	"sha1sum":   {operand: opPaths},
	"sha256sum": {operand: opPaths},
	"sha512sum": {operand: opPaths},
	"cksum":     {operand: opPaths},
	"b2sum":     {operand: opPaths},
	"strings":   {value: "nte", operand: opPaths},
	"od":        {value: "AjNtSw", operand: opPaths},
	"hexdump":   {value: "envsf", operand: opPaths},
	"xxd":       {value: "cglos", operand: opInOut, writeFlags: []string{"-r", "-revert"}},
	"readlink":  {operand: opPaths},
	"realpath":  {value: "", longValue: []string{"--relative-to", "--relative-base"}, operand: opPaths},
	"basename":  {value: "s", operand: opNone},
	"dirname":   {operand: opNone},
	"diff":      {value: "CUIFSWxX", longValue: []string{"--label", "--ignore-matching-lines", "--from-file", "--to-file", "--exclude", "--exclude-from", "--starting-file", "--line-format", "--width", "--tabsize"}, operand: opPaths},
	"cmp":       {value: "in", operand: opPaths},
	"comm":      {operand: opPaths},
	"uniq":      {value: "fsw", operand: opInOut},
	"sort":      {value: "ktST", longValue: []string{"--key", "--field-separator", "--buffer-size", "--temporary-directory", "--parallel", "--files0-from", "--sort", "--batch-size"}, operand: opPaths, writeValue: []string{"-o", "--output"}, unsafeFlags: []string{"--compress-program"}},
	"cut":       {value: "bcdf", longValue: []string{"--bytes", "--characters", "--delimiter", "--fields", "--output-delimiter"}, operand: opPaths},
	"paste":     {value: "d", operand: opPaths},
	"join":      {value: "aejotv12", operand: opPaths},
	"fold":      {value: "w", operand: opPaths},
	"fmt":       {value: "wpg", operand: opPaths},
	"rev":       {operand: opPaths},
	"expand":    {value: "t", operand: opPaths},
	"unexpand":  {value: "t", operand: opPaths},
	"column":    {value: "cstoNRHWOdEw", operand: opPaths},
	"tr":        {operand: opNone},
	"grep":      {value: "efmABCdD", longValue: []string{"--regexp", "--file", "--max-count", "--after-context", "--before-context", "--context", "--directories", "--devices", "--include", "--exclude", "--exclude-dir", "--exclude-from", "--label", "--color", "--colour", "--binary-files"}, operand: opPattern, readValue: []string{"-f", "--file"}},
	"egrep":     {value: "efmABCdD", operand: opPattern, readValue: []string{"-f", "--file"}},
	"fgrep":     {value: "efmABCdD", operand: opPattern, readValue: []string{"-f", "--file"}},
	"pwd":       {operand: opNone},
	"date":      {value: "dfr", longValue: []string{"--date", "--file", "--reference", "--iso-8601", "--rfc-3339"}, operand: opNone, writeFlags: []string{"-s", "--set"}},
	"whoami":    {operand: opNone},
	"id":        {operand: opNone},
	"groups":    {operand: opNone},
	"uname":     {operand: opNone},
	"hostname":  {operand: opNoneOrSets, writeFlags: []string{"-F", "--file", "-b", "--boot"}},
	"nproc":     {operand: opNone},
	"uptime":    {operand: opNone},
	"free":      {operand: opNone},
	"tty":       {operand: opNone},
	"locale":    {operand: opNone},
	"echo":      {operand: opNone},
	"printf":    {operand: opNone},
	"true":      {operand: opNone},
	"false":     {operand: opNone},
	":":         {operand: opNone},
	"test":      {operand: opNone},
	"[":         {operand: opNone},
	"seq":       {value: "fs", operand: opNone},
	"sleep":     {operand: opNone},
	"which":     {operand: opNone},
	"type":      {operand: opNone},
	"printenv":  {operand: opNone},
	"cd":        {operand: opPaths},
	"pushd":     {operand: opPaths},
	"popd":      {operand: opNone},
	"dirs":      {operand: opNone},
}

// IsReadOnlyName reports whether name is in the shared read-only table
// (before looking at its arguments).
func IsReadOnlyName(name string) bool {
	_, ok := readOnlyCommands[name]
	return ok || name == "find"
}

// ClassifyCommand says what argv (argv[0] is the bare command name, no
// path) does to files, and which paths it touches. It knows a fixed table
// of read-only commands (cat, head, grep, ls, ...) including the flags that
// turn them into writers (sort -o, date -s, uniq in out, find -delete, ...)
// or program runners (sort --compress-program, find -exec); everything
// else is Unknown. Paths are returned as written (not resolved); "-" and
// operands of commands that take no paths are not reported.
func ClassifyCommand(argv []string) (Class, []PathUse) {
	if len(argv) == 0 {
		return Unknown, nil
	}
	if argv[0] == "find" {
		return classifyFind(argv[1:])
	}
	spec, ok := readOnlyCommands[argv[0]]
	if !ok {
		return Unknown, nil
	}
	class := ReadOnly
	var uses []PathUse
	var operands []string
	explicitPattern := false
	args := argv[1:]
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			operands = append(operands, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			operands = append(operands, a)
			continue
		}
		if strings.HasPrefix(a, "--") {
			name, val, hasVal := strings.Cut(a, "=")
			if contains(spec.unsafeFlags, name) {
				return Unknown, nil
			}
			takes := contains(spec.longValue, name) || contains(spec.writeValue, name) || contains(spec.readValue, name)
			if takes && !hasVal && i+1 < len(args) {
				i++
				val, hasVal = args[i], true
			}
			switch {
			case contains(spec.writeFlags, name):
				class = Writes
			case contains(spec.writeValue, name) && hasVal:
				class = Writes
				uses = append(uses, PathUse{val, Write})
			case contains(spec.readValue, name) && hasVal:
				uses = append(uses, PathUse{val, Read})
				explicitPattern = true
			case name == "--regexp":
				explicitPattern = true
			}
			continue
		}
		// Short flags, possibly combined: -rn, -n5, -e pattern.
		if contains(spec.writeFlags, a) {
			class = Writes
		}
		for j := 1; j < len(a); j++ {
			c := a[j]
			if spec.operand != opNone && c >= '0' && c <= '9' && j == 1 && (argv[0] == "head" || argv[0] == "tail") {
				break // legacy head -5
			}
			if !strings.ContainsRune(spec.value, rune(c)) && !contains(spec.writeValue, "-"+string(c)) {
				continue
			}
			val := a[j+1:]
			if val == "" && i+1 < len(args) {
				i++
				val = args[i]
			}
			flag := "-" + string(c)
			switch {
			case contains(spec.writeValue, flag):
				class = Writes
				uses = append(uses, PathUse{val, Write})
			case contains(spec.readValue, flag):
				uses = append(uses, PathUse{val, Read})
				explicitPattern = true
			case flag == "-e" && spec.operand == opPattern:
				explicitPattern = true
			}
			break
		}
	}
	switch spec.operand {
	case opPaths:
		for _, o := range operands {
			if o != "-" {
				uses = append(uses, PathUse{o, Read})
			}
		}
	case opPattern:
		if !explicitPattern && len(operands) > 0 {
			operands = operands[1:]
		}
		for _, o := range operands {
			if o != "-" {
				uses = append(uses, PathUse{o, Read})
			}
		}
	case opInOut:
		for k, o := range operands {
			if o == "-" {
				continue
			}
			if k == 0 {
				uses = append(uses, PathUse{o, Read})
			} else {
				class = Writes
				uses = append(uses, PathUse{o, Write})
			}
		}
	case opNoneOrSets:
		if len(operands) > 0 {
			class = Writes
		}
	}
	return class, uses
}

// findActions that write or run programs; -exec and friends are Unknown
// here: the exec policy splits their payloads off before classifying.
var findWrite = map[string]bool{"-delete": true, "-fprint": true, "-fprint0": true, "-fprintf": true, "-fls": true}
var findExec = map[string]bool{"-exec": true, "-execdir": true, "-ok": true, "-okdir": true}

func classifyFind(args []string) (Class, []PathUse) {
	class := ReadOnly
	var uses []PathUse
	i := 0
	// Leading options -H -L -P -D x -Olevel.
	for i < len(args) {
		a := args[i]
		if a == "-H" || a == "-L" || a == "-P" || strings.HasPrefix(a, "-O") {
			i++
			continue
		}
		if a == "-D" {
			i += 2
			continue
		}
		break
	}
	start := i
	for i < len(args) && !strings.HasPrefix(args[i], "-") && args[i] != "(" && args[i] != "!" && args[i] != ")" {
		uses = append(uses, PathUse{args[i], Read})
		i++
	}
	if i == start {
		uses = append(uses, PathUse{".", Read})
	}
	for ; i < len(args); i++ {
		a := args[i]
		switch {
		case findExec[a]:
			return Unknown, nil
		case findWrite[a]:
			class = Writes
			if a == "-delete" {
				for k := range uses {
					uses[k].Access = Write
				}
			}
			if a != "-delete" && i+1 < len(args) {
				uses = append(uses, PathUse{args[i+1], Write})
			}
		}
	}
	return class, uses
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
