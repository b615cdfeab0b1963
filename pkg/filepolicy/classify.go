package filepolicy

import "strings"

// Class is the effect of a command on files.
type Class int

const (
	// Unknown: not a command this package knows, or an option or argument
	// its table does not cover; it may do anything.
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

// Markers a caller puts in argv for an argument whose value is only known
// at run time. DynamicArg cannot start with "-" (a quoted prefix, a glob
// under a directory); DynamicMaybeOption may expand to anything, options
// included. A dynamic value in a path position is reported as the path "".
const (
	DynamicArg         = "\x00dyn"
	DynamicMaybeOption = "\x00dyn-"
)

// cmdSpec is the complete option table of a known command: an option that
// is not listed makes the command Unknown, so a flag the table forgot can
// never pass as read-only.
type cmdSpec struct {
	flags       string   // short flags without a value
	value       string   // short flags with a value (attached or the next argument)
	optAttached string   // short flags whose value, if any, is attached only (od -w16)
	long        []string // long options without a value (an attached =value is accepted)
	longValue   []string // long options with a value (=value or the next argument)
	operand     operandKind
	// writeFlags (short "-x" or full long names) make the command write;
	// writeValue flags take a written path, readValue flags a read path;
	// unsafe flags run programs or otherwise leave the table's promise.
	writeFlags, writeValue, readValue, unsafe []string
	numeric                                   bool // -NUM is an option (head -5, fmt -72)
	anyArgs                                   bool // no option parsing at all (echo, printf, test): every argument is an operand
	atFile                                    bool // an @FILE operand reads further options from FILE (binutils)
}

type operandKind int

const (
	opPaths      operandKind = iota // every operand is a read path
	opNone                          // operands are not paths (echo, printf, tr)
	opPattern                       // first operand is a pattern unless -e/-f given (grep)
	opInOut                         // [in [out]]: a second operand is written (uniq)
	opNoneOrSets                    // operands are not paths but more than zero make it write (hostname)
)

// l splits a space-separated list of long options.
func l(s string) []string { return strings.Fields(s) }

var grepSpec = cmdSpec{
	flags: "EFGPiywxcLloqsbHhnTZzaIrRUvV", value: "efmABCdD", numeric: true, operand: opPattern,
	long: l("--extended-regexp --fixed-strings --basic-regexp --perl-regexp --ignore-case --no-ignore-case --word-regexp --line-regexp " +
		"--null-data --no-messages --invert-match --byte-offset --line-number --no-line-number --line-buffered --with-filename --no-filename " +
		"--only-matching --quiet --silent --binary --text --files-without-match --files-with-matches --count --initial-tab --null " +
		"--recursive --dereference-recursive --color --colour --no-group-separator"),
	longValue: l("--regexp --max-count --label --binary-files --after-context --before-context --context --group-separator " +
		"--directories --devices --include --exclude --exclude-dir --file --exclude-from"),
	readValue: l("-f --file --exclude-from"),
}

var sumSpec = cmdSpec{flags: "bctwz", operand: opPaths,
	long: l("--binary --check --tag --text --zero --ignore-missing --quiet --status --strict --warn")}

// readOnlyCommands is the shared table of commands that only read, each
// with its complete option table. Options that write, read a named file
// or run programs are listed as such; anything else not listed makes the
// command Unknown.
var readOnlyCommands = map[string]cmdSpec{
	"cat": {flags: "AbeEnstTuv", operand: opPaths,
		long: l("--show-all --number-nonblank --show-ends --number --squeeze-blank --show-tabs --show-nonprinting")},
	"tac": {flags: "br", value: "s", operand: opPaths, long: l("--before --regex"), longValue: l("--separator")},
	"nl": {flags: "p", value: "bdfhilnsvw", operand: opPaths, long: l("--no-renumber"),
		longValue: l("--body-numbering --section-delimiter --footer-numbering --header-numbering --line-increment --join-blank-lines " +
			"--number-format --number-width --number-separator --starting-line-number")},
	"head": {flags: "qvz", value: "nc", numeric: true, operand: opPaths, long: l("--quiet --silent --verbose --zero-terminated"), longValue: l("--bytes --lines")},
	"tail": {flags: "fFqvz", value: "ncs", numeric: true, operand: opPaths, long: l("--follow --retry --quiet --silent --verbose --zero-terminated"),
		longValue: l("--bytes --lines --pid --sleep-interval --max-unchanged-stats")},
	"wc": {flags: "clmwL", operand: opPaths, long: l("--bytes --chars --lines --words --max-line-length"), longValue: l("--total --files0-from"),
		readValue: l("--files0-from")},
	"stat": {flags: "LfZt", value: "c", operand: opPaths, long: l("--dereference --file-system --terse"), longValue: l("--format --printf --cached")},
	"file": {flags: "bcdEhikLlNnrsZz0", value: "eFPfm", operand: opPaths,
		long: l("--brief --checking-printout --no-dereference --mime --mime-type --mime-encoding --keep-going --dereference --list " +
			"--no-pad --no-buffer --raw --special-files --uncompress --uncompress-noreport --print0 --extension --apple --compile"),
		longValue: l("--exclude --exclude-quiet --separator --parameter --files-from --magic-file"),
		readValue: l("-f --files-from -m --magic-file"), writeFlags: l("-C --compile"), unsafe: l("-S --no-sandbox -p --preserve-date")},
	"ls": {flags: "aAbBcCdDfFgGhHiklLmnNopqQrRsStuUvxXZ1", value: "ITw", operand: opPaths,
		long: l("--all --almost-all --author --escape --ignore-backups --directory --dired --classify --file-type --full-time " +
			"--group-directories-first --no-group --human-readable --si --dereference-command-line --dereference-command-line-symlink-to-dir " +
			"--hyperlink --inode --kibibytes --dereference --numeric-uid-gid --literal --hide-control-chars --show-control-chars " +
			"--quote-name --recursive --reverse --size --zero --context --color"),
		longValue: l("--block-size --format --hide --ignore --indicator-style --quoting-style --sort --time --time-style --tabsize --width")},
	"tree": {flags: "adlfxpugshDFqNQrtvUcCnAS", value: "LPIHo", operand: opPaths, writeValue: l("-o")},
	"du": {flags: "0abcDhHklLmPsSxv", value: "BdtX", operand: opPaths,
		long: l("--null --all --apparent-size --bytes --total --dereference-args --human-readable --inodes --dereference " +
			"--count-links --no-dereference --separate-dirs --si --summarize --one-file-system --time"),
		longValue: l("--block-size --max-depth --threshold --time-style --exclude --files0-from --exclude-from"),
		readValue: l("-X --exclude-from --files0-from")},
	"df": {flags: "ahHiklPTv", value: "Btx", operand: opPaths,
		long:      l("--all --human-readable --si --inodes --local --no-sync --sync --portability --print-type --total --output"),
		longValue: l("--block-size --type --exclude-type")},
	"md5sum": sumSpec, "sha1sum": sumSpec, "sha224sum": sumSpec, "sha256sum": sumSpec, "sha384sum": sumSpec, "sha512sum": sumSpec,
	"b2sum": {flags: "bctwz", value: "l", operand: opPaths,
		long: l("--binary --check --tag --text --zero --ignore-missing --quiet --status --strict --warn"), longValue: l("--length")},
	"cksum": {flags: "bcwz", value: "al", operand: opPaths,
		long:      l("--base64 --raw --tag --untagged --zero --check --ignore-missing --quiet --status --strict --warn --debug"),
		longValue: l("--algorithm --length")},
	"strings": {flags: "adfow", value: "ntesTU", operand: opPaths, atFile: true,
		long: l("--all --data --print-file-name --include-all-whitespace"), longValue: l("--bytes --radix --encoding --target --output-separator --unicode")},
	"od": {flags: "bcdfiloxsvBDeFHIJLOX", value: "AjNSt", optAttached: "w", operand: opPaths,
		long: l("--strings --width --output-duplicates --traditional"), longValue: l("--address-radix --skip-bytes --read-bytes --format --endian")},
	"hexdump": {flags: "bcCdoxv", value: "enfsL", operand: opPaths,
		long:      l("--one-byte-octal --one-byte-char --canonical --two-bytes-decimal --two-bytes-octal --two-bytes-hex --no-squeezing --color"),
		longValue: l("--format --format-file --length --skip"), readValue: l("-f --format-file")},
	"readlink": {flags: "efmnqsvz", operand: opPaths,
		long: l("--canonicalize --canonicalize-existing --canonicalize-missing --no-newline --quiet --silent --verbose --zero")},
	"realpath": {flags: "eLmPqsz", operand: opPaths,
		long:      l("--canonicalize-existing --canonicalize-missing --logical --physical --quiet --strip --no-symlinks --zero"),
		longValue: l("--relative-to --relative-base"), readValue: l("--relative-to --relative-base")},
	"basename": {flags: "az", value: "s", operand: opNone, long: l("--multiple --zero"), longValue: l("--suffix")},
	"dirname":  {flags: "z", operand: opNone, long: l("--zero")},
	"diff": {flags: "abBcdeEfHinNpqrsStTuvwy", value: "CUFISxWDX", numeric: true, operand: opPaths,
		long: l("--normal --brief --report-identical-files --context --unified --ed --rcs --side-by-side --left-column " +
			"--suppress-common-lines --show-c-function --new-file --unidirectional-new-file --ignore-case --ignore-file-name-case " +
			"--no-ignore-file-name-case --ignore-tab-expansion --ignore-trailing-space --ignore-space-change --ignore-all-space " +
			"--ignore-blank-lines --text --strip-trailing-cr --expand-tabs --initial-tab --suppress-blank-empty --minimal " +
			"--speed-large-files --recursive --no-dereference --color"),
		longValue: l("--show-function-line --label --width --tabsize --exclude --starting-file --ifdef --old-group-format " +
			"--new-group-format --changed-group-format --unchanged-group-format --line-format --old-line-format --new-line-format " +
			"--unchanged-line-format --horizon-lines --palette --ignore-matching-lines --from-file --to-file --exclude-from"),
		readValue: l("-X --exclude-from --from-file --to-file")},
	"cmp":  {flags: "blsv", value: "in", operand: opPaths, long: l("--print-bytes --verbose --quiet --silent"), longValue: l("--ignore-initial --bytes")},
	"comm": {flags: "123z", operand: opPaths, long: l("--check-order --nocheck-order --total --zero-terminated"), longValue: l("--output-delimiter")},
	"uniq": {flags: "cdDiuz", value: "fsw", operand: opInOut,
		long: l("--count --repeated --all-repeated --group --ignore-case --unique --zero-terminated"), longValue: l("--skip-fields --skip-chars --check-chars")},
	"sort": {flags: "bdfgiMhnRrVcCmsuz", value: "ktSTo", operand: opPaths,
		long: l("--ignore-leading-blanks --dictionary-order --ignore-case --general-numeric-sort --ignore-nonprinting --month-sort " +
			"--human-numeric-sort --numeric-sort --random-sort --reverse --version-sort --check --merge --stable --unique --zero-terminated --debug"),
		longValue: l("--sort --key --field-separator --buffer-size --parallel --batch-size --output --temporary-directory --files0-from " +
			"--random-source --compress-program"),
		writeValue: l("-o --output -T --temporary-directory"), readValue: l("--files0-from --random-source"), unsafe: l("--compress-program")},
	"cut": {flags: "nsz", value: "bcdf", operand: opPaths, long: l("--complement --only-delimited --zero-terminated"),
		longValue: l("--bytes --characters --delimiter --fields --output-delimiter")},
	"paste": {flags: "sz", value: "d", operand: opPaths, long: l("--serial --zero-terminated"), longValue: l("--delimiters")},
	"join":  {flags: "iz", value: "aejotv12", operand: opPaths, long: l("--ignore-case --check-order --nocheck-order --header --zero-terminated")},
	"fold":  {flags: "bs", value: "w", operand: opPaths, long: l("--bytes --spaces"), longValue: l("--width")},
	"fmt": {flags: "cstu", value: "wpg", numeric: true, operand: opPaths, long: l("--crown-margin --split-only --tagged-paragraph --uniform-spacing"),
		longValue: l("--width --prefix --goal")},
	"rev":      {flags: "0", operand: opPaths, long: l("--zero")},
	"expand":   {flags: "i", value: "t", numeric: true, operand: opPaths, long: l("--initial"), longValue: l("--tabs")},
	"unexpand": {flags: "a", value: "t", numeric: true, operand: opPaths, long: l("--all --first-only"), longValue: l("--tabs")},
	"column":   {flags: "tJxeLdnr", value: "csoNRHWOEl", operand: opPaths},
	"tr":       {flags: "cCdst", operand: opNone, long: l("--complement --delete --squeeze-repeats --truncate-set1")},
	"grep":     grepSpec, "egrep": grepSpec, "fgrep": grepSpec,
	"pwd": {flags: "LP", operand: opNone, long: l("--logical --physical")},
	"date": {flags: "Ru", value: "dfrs", optAttached: "I", operand: opNone,
		long: l("--debug --rfc-email --utc --universal --iso-8601 --resolution"), longValue: l("--date --rfc-3339 --file --reference --set"),
		readValue: l("-f --file -r --reference"), writeFlags: l("-s --set")},
	"whoami": {operand: opNone},
	"id":     {flags: "agGnruzZ", operand: opNone, long: l("--context --group --groups --name --real --user --zero")},
	"groups": {operand: opNone},
	"uname": {flags: "asnrvmpio", operand: opNone,
		long: l("--all --kernel-name --nodename --kernel-release --kernel-version --machine --processor --hardware-platform --operating-system")},
	"hostname": {flags: "aAdfiIsyv", operand: opNoneOrSets, long: l("--alias --all-fqdns --domain --fqdn --long --ip-address --all-ip-addresses --short --yp --nis --verbose"),
		unsafe: l("-F --file -b --boot")},
	"nproc":    {operand: opNone, long: l("--all"), longValue: l("--ignore")},
	"uptime":   {flags: "ps", operand: opNone, long: l("--pretty --since")},
	"free":     {flags: "bkmgtwhlv", value: "sc", operand: opNone, long: l("--bytes --kibi --mebi --gibi --tebi --pebi --kilo --mega --giga --tera --peta --human --si --lohi --total --wide --committed"), longValue: l("--seconds --count")},
	"tty":      {flags: "s", operand: opNone, long: l("--silent --quiet")},
	"locale":   {flags: "ackmv", operand: opNone, long: l("--all-locales --charmaps --category-name --keyword-name --verbose")},
	"echo":     {anyArgs: true, operand: opNone},
	"printf":   {anyArgs: true, operand: opNone},
	"true":     {anyArgs: true, operand: opNone},
	"false":    {anyArgs: true, operand: opNone},
	":":        {anyArgs: true, operand: opNone},
	"test":     {anyArgs: true, operand: opNone},
	"[":        {anyArgs: true, operand: opNone},
	"seq":      {flags: "w", value: "fs", numeric: true, operand: opNone, long: l("--equal-width"), longValue: l("--format --separator")},
	"sleep":    {anyArgs: true, operand: opNone},
	"which":    {flags: "as", operand: opNone},
	"type":     {flags: "afptP", operand: opNone},
	"printenv": {flags: "0", operand: opNone, long: l("--null")},
	"cd":       {flags: "LPe@", operand: opPaths},
	"pushd":    {flags: "n", anyArgs: true, operand: opPaths},
	"popd":     {anyArgs: true, operand: opNone},
	"dirs":     {anyArgs: true, operand: opNone},
}

// IsReadOnlyName reports whether name is in the shared read-only table
// (before looking at its arguments).
func IsReadOnlyName(name string) bool {
	_, ok := readOnlyCommands[name]
	return ok || name == "find" || name == "xxd"
}

var helpVersion = []string{"--help", "--version"}

// ClassifyCommand says what argv (argv[0] is the bare command name, no
// path) does to files, and which paths it touches. It knows a fixed table
// of read-only commands (cat, head, grep, ls, ...) with every option each
// accepts, including the options that turn them into writers (sort -o,
// date -s, uniq in out, find -delete, xxd -r, file -C, ...) or program
// runners (sort --compress-program, find -exec); long options are matched
// by unique prefix as getopt_long does. An option the table does not list,
// a dynamic argument ([DynamicMaybeOption]) where an option could change
// what the command does, and every command not in the table are Unknown.
// Paths are returned as written (not resolved); "-" and operands of
// commands that take no paths are not reported; a dynamic path is "".
func ClassifyCommand(argv []string) (Class, []PathUse) {
	if len(argv) == 0 {
		return Unknown, nil
	}
	switch argv[0] {
	case "find":
		return classifyFind(argv[1:])
	case "xxd":
		return classifyXxd(argv[1:])
	}
	spec, ok := readOnlyCommands[argv[0]]
	if !ok {
		return Unknown, nil
	}
	// A run-time value that may turn out to be an option matters only
	// where some option reads, writes or runs something.
	optionsMatter := len(spec.writeFlags)+len(spec.writeValue)+len(spec.readValue)+len(spec.unsafe) > 0
	class := ReadOnly
	var uses []PathUse
	var operands []string
	explicitPattern := false
	longs := [][]string{spec.long, spec.longValue, helpVersion}
	takesValue := func(name string) bool {
		return contains(spec.longValue, name)
	}
	// effect records what option flag (with value val) does.
	effect := func(flag, val string, hasVal bool) bool {
		switch {
		case contains(spec.unsafe, flag):
			return false
		case contains(spec.writeValue, flag):
			class = Writes
			uses = append(uses, PathUse{pathOf(val, hasVal), Write})
		case contains(spec.writeFlags, flag):
			class = Writes
		case contains(spec.readValue, flag):
			if argv[0] == "file" && (flag == "-m" || flag == "--magic-file") && hasVal {
				for _, p := range strings.Split(val, ":") {
					uses = append(uses, PathUse{pathOf(p, true), Read})
				}
			} else {
				uses = append(uses, PathUse{pathOf(val, hasVal), Read})
			}
			explicitPattern = true
		case flag == "-e" || flag == "--regexp":
			explicitPattern = true
		}
		return true
	}
	args := argv[1:]
	for i := 0; i < len(args); i++ {
		a := args[i]
		if spec.anyArgs {
			operands = append(operands, a)
			continue
		}
		if a == DynamicMaybeOption && optionsMatter {
			return Unknown, nil
		}
		if a == "--" {
			operands = append(operands, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			if spec.atFile && strings.HasPrefix(a, "@") {
				return Unknown, nil
			}
			operands = append(operands, a)
			continue
		}
		if strings.HasPrefix(a, "--") {
			name, val, hasVal := strings.Cut(a, "=")
			full, ok := LongOption(name, longs...)
			if !ok {
				return Unknown, nil
			}
			if takesValue(full) && !hasVal && i+1 < len(args) {
				i++
				val, hasVal = args[i], true
			}
			if !effect(full, val, hasVal) {
				return Unknown, nil
			}
			continue
		}
		// Short flags, possibly combined: -rn, -n5, -e pattern, legacy -5.
		if spec.numeric && isDigits(a[1:]) {
			continue
		}
		for j := 1; j < len(a); j++ {
			c := a[j]
			flag := "-" + string(c)
			switch {
			case strings.IndexByte(spec.optAttached, c) >= 0:
				if !effect(flag, a[j+1:], j+1 < len(a)) {
					return Unknown, nil
				}
				j = len(a)
			case strings.IndexByte(spec.value, c) >= 0:
				val, hasVal := a[j+1:], j+1 < len(a)
				if !hasVal && i+1 < len(args) {
					i++
					val, hasVal = args[i], true
				}
				if !effect(flag, val, hasVal) {
					return Unknown, nil
				}
				j = len(a)
			case strings.IndexByte(spec.flags, c) >= 0:
				if !effect(flag, "", false) {
					return Unknown, nil
				}
			case spec.numeric && c >= '0' && c <= '9' && isDigits(a[j:]):
				j = len(a)
			default:
				return Unknown, nil
			}
		}
	}
	add := func(o string, a Access) {
		if o != "-" {
			uses = append(uses, PathUse{pathOf(o, true), a})
		}
	}
	switch spec.operand {
	case opPaths:
		for _, o := range operands {
			add(o, Read)
		}
	case opPattern:
		if !explicitPattern && len(operands) > 0 {
			operands = operands[1:]
		}
		for _, o := range operands {
			add(o, Read)
		}
	case opInOut:
		for k, o := range operands {
			if k == 0 {
				add(o, Read)
			} else if o != "-" {
				class = Writes
				add(o, Write)
			}
		}
	case opNoneOrSets:
		if len(operands) > 0 {
			class = Writes
		}
	}
	return class, uses
}

// pathOf maps the dynamic markers (and a missing value) to "".
func pathOf(v string, has bool) string {
	if !has || v == DynamicArg || v == DynamicMaybeOption {
		return ""
	}
	return v
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// classifyXxd follows xxd's own option parser, which takes any argument
// that starts with the option's letter ("-r", "-revert", "-rfoo" all mean
// revert) and single-dash long names.
func classifyXxd(args []string) (Class, []PathUse) {
	class := ReadOnly
	var operands []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == DynamicMaybeOption {
			return Unknown, nil
		}
		if a == "--" {
			operands = append(operands, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			operands = append(operands, a)
			continue
		}
		switch a[1] {
		case 'r':
			class = Writes // revert: writes the binary, patches an output file in place
		case 'a', 'b', 'C', 'E', 'e', 'h', 'i', 'p', 'u', 'v', 'd':
		case 'c', 'g', 'l', 'n', 'o', 's', 'R':
			if len(a) == 2 || !strings.ContainsAny(a[2:3], "0123456789+-x") {
				i++
			}
		default:
			return Unknown, nil
		}
	}
	var uses []PathUse
	for k, o := range operands {
		if o == "-" {
			continue
		}
		switch k {
		case 0:
			uses = append(uses, PathUse{pathOf(o, true), Read})
		case 1:
			class = Writes
			uses = append(uses, PathUse{pathOf(o, true), Write})
		default:
			return Unknown, nil
		}
	}
	return class, uses
}

// find's complete table: primaries without a value, with one value (a
// read path for the -newer family), actions that write (-fprintf takes
// a file and a format), and operators. -exec and friends are Unknown
// here: the exec policy splits their payloads off before classifying.
var (
	findNoValue = map[string]bool{"-daystart": true, "-depth": true, "-d": true, "-ignore_readdir_race": true,
		"-noignore_readdir_race": true, "-mount": true, "-xdev": true, "-noleaf": true, "-nowarn": true, "-warn": true,
		"-empty": true, "-executable": true, "-false": true, "-true": true, "-nogroup": true, "-nouser": true,
		"-readable": true, "-writable": true, "-print": true, "-print0": true, "-ls": true, "-prune": true, "-quit": true,
		"-follow": true, "(": true, ")": true, "!": true, "-not": true, "-a": true, "-and": true, "-o": true, "-or": true, ",": true,
		"-help": true, "--help": true, "-version": true, "--version": true}
	findValue = map[string]bool{"-maxdepth": true, "-mindepth": true, "-amin": true, "-atime": true, "-cmin": true,
		"-ctime": true, "-fstype": true, "-gid": true, "-group": true, "-ilname": true, "-iname": true, "-inum": true,
		"-ipath": true, "-iregex": true, "-iwholename": true, "-links": true, "-lname": true, "-mmin": true, "-mtime": true,
		"-name": true, "-path": true, "-perm": true, "-regex": true, "-regextype": true, "-size": true, "-type": true,
		"-uid": true, "-used": true, "-user": true, "-wholename": true, "-xtype": true, "-context": true, "-printf": true}
	findReadValue  = map[string]bool{"-anewer": true, "-cnewer": true, "-newer": true, "-samefile": true, "-files0-from": true}
	findWriteValue = map[string]bool{"-fprint": true, "-fprint0": true, "-fls": true, "-fprintf": true}
	findExec       = map[string]bool{"-exec": true, "-execdir": true, "-ok": true, "-okdir": true}
)

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
	for i < len(args) && args[i] != DynamicMaybeOption && !strings.HasPrefix(args[i], "-") && args[i] != "(" && args[i] != "!" && args[i] != ")" {
		uses = append(uses, PathUse{pathOf(args[i], true), Read})
		i++
	}
	if i == start {
		uses = append(uses, PathUse{".", Read})
	}
	value := func(k int) (string, bool) {
		if k < len(args) {
			return args[k], true
		}
		return "", false
	}
	for ; i < len(args); i++ {
		a := args[i]
		switch {
		case findNoValue[a]:
		case findValue[a]:
			i++
		case strings.HasPrefix(a, "-newer") && len(a) == 8:
			// -newerXY: a reference file unless Y is t (a time string).
			v, ok := value(i + 1)
			i++
			if a[7] != 't' {
				uses = append(uses, PathUse{pathOf(v, ok), Read})
			}
		case findReadValue[a]:
			v, ok := value(i + 1)
			i++
			uses = append(uses, PathUse{pathOf(v, ok), Read})
		case findWriteValue[a]:
			class = Writes
			v, ok := value(i + 1)
			i++
			uses = append(uses, PathUse{pathOf(v, ok), Write})
			if a == "-fprintf" {
				i++
			}
		case a == "-delete":
			class = Writes
			for k := range uses {
				if uses[k].Access == Read {
					uses[k].Access = Write
				}
			}
		case findExec[a]:
			return Unknown, nil
		default:
			return Unknown, nil
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
