package execpolicy

import (
	"bytes"
	"context"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"mvdan.cc/sh/v3/interp"
	"mvdan.cc/sh/v3/syntax"
)

// The oracle is independent of the judge: it runs the command line in
// mvdan.cc/sh's interpreter with every external program, file open and
// network redirect replaced by a recorder (nothing runs, nothing is
// opened), and reports what would have been executed. Shell -c strings,
// shell scripts on stdin and a few wrappers are followed with its own,
// deliberately simple reading of them.

type trace struct {
	mu    sync.Mutex
	calls [][]string // every simple command, builtins included, after expansion
	opens []string   // every file the shell would open
}

func (t *trace) call(argv []string) {
	t.mu.Lock()
	t.calls = append(t.calls, append([]string(nil), argv...))
	t.mu.Unlock()
}

type nopFile struct{}

func (nopFile) Read([]byte) (int, error)    { return 0, io.EOF }
func (nopFile) Write(p []byte) (int, error) { return len(p), nil }
func (nopFile) Close() error                { return nil }

const oracleDepth = 4

// runOracle interprets src and returns the trace. Errors of the
// interpreter (unsupported syntax) end the run; what was traced stands.
func runOracle(src string) *trace {
	t := &trace{}
	t.run(src, 0, nil)
	return t
}

func (t *trace) run(src string, depth int, stdin io.Reader) {
	if depth > oracleDepth {
		return
	}
	// The interpreter panics on a few inputs (unset ''): the oracle then
	// keeps what it traced so far.
	defer func() { _ = recover() }()
	f, err := syntax.NewParser().Parse(strings.NewReader(src), "")
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	r, err := interp.New(
		interp.StdIO(stdin, io.Discard, io.Discard),
		interp.Dir(os.TempDir()),
		interp.Env(nil),
		interp.CallHandler(func(ctx context.Context, args []string) ([]string, error) {
			t.call(args)
			return args, nil
		}),
		interp.ExecHandlers(func(next interp.ExecHandlerFunc) interp.ExecHandlerFunc {
			return func(ctx context.Context, args []string) error {
				t.follow(ctx, args, depth)
				return nil
			}
		}),
		interp.OpenHandler(func(ctx context.Context, p string, flag int, perm os.FileMode) (io.ReadWriteCloser, error) {
			t.mu.Lock()
			t.opens = append(t.opens, p)
			t.mu.Unlock()
			return nopFile{}, nil
		}),
	)
	if err != nil {
		return
	}
	_ = r.Run(ctx, f)
}

var oracleShells = map[string]bool{"sh": true, "bash": true, "dash": true, "ash": true, "zsh": true, "ksh": true, "mksh": true, "rbash": true, "busybox": true}

// oracleWrappers run their first non-option argument (timeout and
// taskset after one more operand).
var oracleWrappers = map[string]int{"env": 0, "timeout": 1, "nice": 0, "nohup": 0, "command": 0, "builtin": 0, "stdbuf": 0,
	"setsid": 0, "ionice": 0, "taskset": 1, "time": 0, "xargs": 0, "flock": 1, "watch": 0, "noglob": 0}

// oracleValueFlags are the wrappers' short options that take a value.
var oracleValueFlags = map[string]string{"xargs": "aEdILnPs", "timeout": "sk", "nice": "n", "stdbuf": "ioe", "ionice": "cnpPu",
	"flock": "wE", "env": "uCS", "watch": "nq", "time": "fo"}

var oracleLongValue = []string{"--signal", "--kill-after", "--adjustment", "--input", "--output", "--error", "--class", "--classdata",
	"--timeout", "--conflict-exit-code", "--unset", "--chdir", "--interval", "--format", "--arg-file", "--delimiter", "--max-args",
	"--max-procs", "--max-chars", "--max-lines", "--eof", "--replace", "--process-slot-var"}

// follow records what an external command would run itself: a shell's
// -c string or stdin script, a wrapper's payload.
func (t *trace) follow(ctx context.Context, argv []string, depth int) {
	if len(argv) == 0 || depth > oracleDepth {
		return
	}
	base := path.Base(argv[0])
	if fam := strings.TrimRight(base, "0123456789."); oracleShells[fam] {
		args := argv[1:]
		if fam == "busybox" {
			if len(args) == 0 || !oracleShells[args[0]] {
				return
			}
			args = args[1:]
		}
		for i, a := range args {
			if strings.HasPrefix(a, "-") && strings.Contains(a, "c") && !strings.HasPrefix(a, "--") && i+1 < len(args) {
				t.run(args[i+1], depth+1, nil)
				return
			}
			if !strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "+") {
				return // a script file: its text is not on the line
			}
		}
		var buf bytes.Buffer
		_, _ = io.Copy(&buf, io.LimitReader(interp.HandlerCtx(ctx).Stdin, 1<<20))
		t.run(buf.String(), depth+1, nil)
		return
	}
	skip, ok := oracleWrappers[base]
	if !ok {
		return
	}
	if base == "ionice" || base == "taskset" {
		for _, a := range argv[1:] {
			if strings.HasPrefix(a, "-") && strings.ContainsAny(a, "pPu") && !strings.HasPrefix(a, "--") {
				return // operates on existing processes, runs nothing
			}
		}
	}
	rest := argv[1:]
	for len(rest) > 0 && (strings.HasPrefix(rest[0], "-") || strings.Contains(rest[0], "=")) {
		a := rest[0]
		rest = rest[1:]
		if a == "--" {
			break
		}
		// A short option that takes a value (as the last letter of its
		// cluster) also takes the next argument.
		if len(a) >= 2 && a[0] == '-' && a[1] != '-' {
			// The first letter that takes a value takes the rest of the
			// cluster, or the next argument when it is the last letter.
			for k := 1; k < len(a); k++ {
				if strings.IndexByte(oracleValueFlags[base], a[k]) >= 0 {
					if k == len(a)-1 && len(rest) > 0 {
						rest = rest[1:]
					}
					break
				}
			}
		}
		if strings.HasPrefix(a, "--") && !strings.Contains(a, "=") && len(rest) > 0 && contains(oracleLongValue, a) {
			rest = rest[1:]
		}
	}
	if len(rest) > skip {
		rest = rest[skip:]
		t.call(rest)
		t.follow(ctx, rest, depth+1)
	}
}

// violation is the oracle's verdict on a trace: a hard-blocked program
// reached, rm -r of a protected directory, a signal to pid -1, a
// network redirect (outside full mode), or the canary word in what runs.
func (t *trace) violation(full bool, canary string, opaque func(base string) bool) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, argv := range t.calls {
		if len(argv) == 0 || argv[0] == "" {
			continue
		}
		base := path.Base(argv[0])
		if isBlockedOracle(base) {
			return "ran hard-blocked " + base
		}
		if base == "rm" && oracleRmCatastrophic(argv[1:]) {
			return "ran " + strings.Join(argv, " ")
		}
		if base == "kill" && oracleKillAll(argv[1:]) {
			return "ran " + strings.Join(argv, " ")
		}
		if canary != "" && !opaque(base) {
			for _, a := range argv {
				if strings.Contains(a, canary) {
					return "canary reached " + strings.Join(argv, " ")
				}
			}
		}
	}
	for _, o := range t.opens {
		if canary != "" && strings.Contains(o, canary) {
			return "canary reached open " + o
		}
		if c := path.Clean(o); !full && (strings.HasPrefix(c, "/dev/tcp/") || strings.HasPrefix(c, "/dev/udp/")) {
			return "opened " + o
		}
	}
	return ""
}

// The oracle's own copy of the blocklist rule: the exported list,
// compared case-insensitively, mkfs.* included.
func isBlockedOracle(base string) bool {
	b := strings.ToLower(base)
	for _, x := range Blocklist {
		if b == x {
			return true
		}
	}
	return strings.HasPrefix(b, "mkfs.")
}

var oracleProtected = []string{"/", "/etc", "/usr", "/home", "/root", "/var", "/bin", "/boot", "/lib", "/sbin", "/tmp"}

func oracleRmCatastrophic(args []string) bool {
	rec := false
	var targets []string
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "--r"), strings.HasPrefix(a, "--no-pres"):
			rec = true
		case strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && strings.ContainsAny(a, "rR"):
			rec = true
		case !strings.HasPrefix(a, "-"):
			targets = append(targets, a)
		}
	}
	if !rec {
		return false
	}
	home, _ := os.UserHomeDir()
	for _, tg := range targets {
		c := path.Clean(tg)
		if c == home || c == "~" {
			return true
		}
		for _, p := range oracleProtected {
			if c == p {
				return true
			}
		}
	}
	return false
}

func oracleKillAll(args []string) bool {
	for i, a := range args {
		if i == 0 && len(args) > 1 && strings.HasPrefix(a, "-") {
			continue // the signal
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(a), 10, 64); err == nil && n == -1 {
			return true
		}
	}
	return false
}
