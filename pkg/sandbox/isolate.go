package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Isolation says whether commands run in kernel namespaces and, if not,
// why not. See [Probe].
type Isolation struct {
	// Available: commands run under bubblewrap in new user, PID, mount,
	// IPC and UTS namespaces.
	Available bool
	// Tool is the path of bwrap when Available.
	Tool string
	// Reason says why isolation is not available ("bwrap not found",
	// the error of the probe run).
	Reason string
}

// String is the one-line status for logs and /health.
func (i Isolation) String() string {
	if i.Available {
		return "bash sandbox: bubblewrap (new user, PID and mount namespaces; only the workspace writable; fresh /proc; no parent environment)"
	}
	return "bash sandbox: NOT isolated (" + i.Reason + "): commands see the host file system read-only by Unix permissions only; execSecurity full is refused"
}

// ErrNoIsolation: Spec.RequireIsolation is set and bubblewrap cannot run.
var ErrNoIsolation = errors.New("sandbox: kernel isolation unavailable")

var (
	probeOnce sync.Once
	probed    Isolation
	probeDone bool
	probeMu   sync.Mutex
)

// Probe finds bwrap on PATH (or in /usr/bin) and runs it once in the
// namespaces Run uses, so a kernel or container that forbids user
// namespaces is found at start-up, not at the first command. The result is
// cached for the process; Probe is safe for concurrent use and blocks at
// most a few seconds, once.
func Probe() Isolation {
	probeOnce.Do(func() {
		i := probe()
		probeMu.Lock()
		probed, probeDone = i, true
		probeMu.Unlock()
	})
	probeMu.Lock()
	defer probeMu.Unlock()
	return probed
}

// Probed returns the cached result of [Probe] and whether Probe has run in
// this process (a process that runs no bash tool has nothing to report).
func Probed() (Isolation, bool) {
	probeMu.Lock()
	defer probeMu.Unlock()
	return probed, probeDone
}

// HealthLine is the /health line of the bash sandbox, or "" when no bash
// tool runs in this process.
func HealthLine() string {
	i, ok := Probed()
	if !ok {
		return ""
	}
	return i.String()
}

func probe() Isolation {
	tool, err := exec.LookPath("bwrap")
	if err != nil {
		if _, serr := os.Stat("/usr/bin/bwrap"); serr != nil {
			return Isolation{Reason: "bwrap (Debian package bubblewrap) not found"}
		}
		tool = "/usr/bin/bwrap"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dir, err := os.MkdirTemp("", "agentbus-probe-")
	if err != nil {
		return Isolation{Reason: fmt.Sprintf("probe directory: %v", err)}
	}
	defer os.RemoveAll(dir)
	sh := "/bin/sh"
	if p, err := exec.LookPath("sh"); err == nil {
		sh = p
	}
	cmd := exec.CommandContext(ctx, tool, bwrapArgs(Spec{Dir: dir, Command: "exit 0"}, sh)...)
	cmd.Env = []string{"PATH=" + DefaultPath}
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return Isolation{Reason: fmt.Sprintf("bwrap cannot create namespaces here: %v: %s", err, msg)}
	}
	return Isolation{Available: true, Tool: tool}
}

// systemRO are the directories bound read-only into the sandbox: the
// programs and their libraries. The rest of the host (home directories,
// /root, /srv, /opt, the agentbus data directory, /run with its sockets)
// does not exist inside.
var systemRO = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// etcRO are the entries of /etc a command needs (users, name resolution,
// certificates, the dynamic linker, time zones, Debian's alternatives);
// the rest of /etc (where agentbus.yml may live, shadow, ssh host keys)
// is left out.
var etcRO = []string{"/etc/passwd", "/etc/group", "/etc/hosts", "/etc/resolv.conf", "/etc/nsswitch.conf", "/etc/host.conf",
	"/etc/gai.conf", "/etc/services", "/etc/protocols", "/etc/ssl", "/etc/ca-certificates", "/etc/ca-certificates.conf", "/etc/pki",
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/timezone", "/etc/alternatives",
	"/etc/mime.types", "/etc/magic", "/etc/magic.mime", "/etc/os-release", "/etc/debian_version", "/etc/locale.alias",
	"/etc/bash.bashrc", "/etc/inputrc", "/etc/gitconfig", "/etc/mailcap", "/etc/xdg", "/etc/terminfo", "/etc/manpath.config"}

// bwrapBase are the namespace and process options every sandboxed run
// gets. The new PID namespace gives the command a /proc of its own, in
// which the tool worker (its parent outside) does not exist, so
// /proc/$PPID/environ and /proc/<pid>/mem of the worker are out of reach.
func bwrapBase() []string {
	return []string{
		"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--die-with-parent", "--new-session", "--cap-drop", "ALL",
		"--hostname", "sandbox",
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
		"--ro-bind", "/usr", "/usr",
	}
}

// bwrapArgs builds the bwrap command line for spec: base options, the
// system directories read-only, the workspace read-write (the only
// writable place besides the private /tmp), hidden paths masked, and the
// shell. Environment variables are not passed as options: bwrap is started
// with exactly the command's environment, so its init (pid 1 inside) holds
// nothing else either.
func bwrapArgs(spec Spec, shell string) []string {
	args := bwrapBase()
	exists := func(p string) bool { _, err := os.Lstat(p); return err == nil }
	for _, d := range systemRO[1:] {
		if !exists(d) {
			continue
		}
		if target, err := os.Readlink(d); err == nil {
			// Debian's merged /usr: /bin -> usr/bin.
			args = append(args, "--symlink", target, d)
			continue
		}
		args = append(args, "--ro-bind", d, d)
	}
	for _, e := range etcRO {
		if exists(e) {
			args = append(args, "--ro-bind", e, e)
		}
	}
	var ro []string
	for _, r := range spec.ReadOnly {
		if a, err := filepath.Abs(r); err == nil && exists(a) {
			ro = append(ro, a)
			args = append(args, "--ro-bind", a, a)
		}
	}
	args = append(args, "--bind", spec.Dir, spec.Dir)
	roots := append(append([]string{spec.Dir}, ro...), "/usr")
	for _, h := range spec.Hide {
		h = filepath.Clean(h)
		if !exists(h) || !under(h, roots) {
			continue // not bound, so not there
		}
		if fi, err := os.Stat(h); err == nil && fi.IsDir() {
			args = append(args, "--tmpfs", h)
		} else {
			args = append(args, "--ro-bind", "/dev/null", h)
		}
	}
	if spec.NoNetwork {
		args = append(args, "--unshare-net")
	}
	args = append(args, "--chdir", spec.Dir, "--", shell, "-c", spec.Command)
	return args
}

func under(p string, roots []string) bool {
	for _, r := range roots {
		if p == r || strings.HasPrefix(p, strings.TrimSuffix(r, "/")+"/") {
			return true
		}
	}
	return false
}
