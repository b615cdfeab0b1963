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
	// IPC, UTS and network namespaces, with the resource limits set.
	Available bool
	// Tool is the path of bwrap when Available.
	Tool string
	// Prlimit is the path of util-linux prlimit(1), which sets the
	// resource limits; "" when it is missing (then isolation is not
	// Available, and unisolated runs go without limits).
	Prlimit string
	// Reason says why isolation is not available ("bwrap not found",
	// the error of the probe run).
	Reason string
	// Outbound: NetworkOutbound can be set up (slirp4netns, nsenter and
	// ip are installed); OutboundReason says what is missing otherwise.
	Outbound       bool
	OutboundReason string
	slirp, nsenter string
	ip             string
}

// String is the one-line status for logs and /health.
func (i Isolation) String() string {
	if i.Available {
		out := "outbound network: slirp4netns"
		if !i.Outbound {
			out = "no outbound network mode (" + i.OutboundReason + ")"
		}
		return "bash sandbox: bubblewrap (new user, PID, mount and network namespaces; only the workspace writable; fresh /proc; no parent environment; resource limits; " + out + ")"
	}
	return "bash sandbox: NOT isolated (" + i.Reason + ")"
}

// ErrNoIsolation: Spec.RequireIsolation is set and bubblewrap cannot run,
// or Spec.Network is NetworkOutbound and the user-mode stack cannot be set
// up.
var ErrNoIsolation = errors.New("sandbox: kernel isolation unavailable")

var (
	probeOnce sync.Once
	probed    Isolation
	probeDone bool
	probeMu   sync.Mutex
)

// Probe finds bwrap on PATH (or in /usr/bin) and runs it once with the
// namespaces, mounts and limits Run uses, so a kernel or container that
// forbids user namespaces (or a seccomp profile that forbids mount) is
// found at start-up, not at the first command. It also looks for prlimit
// (required) and for slirp4netns, nsenter and ip (NetworkOutbound). The
// result is cached for the process; Probe is safe for concurrent use and
// blocks at most a few seconds, once.
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

// lookTool finds name on PATH or in the system directories (a tool
// worker's PATH may lack /usr/sbin, where Debian puts ip).
func lookTool(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, d := range []string{"/usr/bin", "/usr/sbin", "/bin", "/sbin"} {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

func probe() Isolation {
	var i Isolation
	i.Prlimit = lookTool("prlimit")
	i.slirp, i.nsenter, i.ip = lookTool("slirp4netns"), lookTool("nsenter"), lookTool("ip")
	var missing []string
	for _, t := range []struct{ name, path string }{{"slirp4netns", i.slirp}, {"nsenter (util-linux)", i.nsenter}, {"ip (iproute2)", i.ip}} {
		if t.path == "" {
			missing = append(missing, t.name)
		}
	}
	i.Outbound = len(missing) == 0
	if !i.Outbound {
		i.OutboundReason = strings.Join(missing, ", ") + " not found"
	}
	tool := lookTool("bwrap")
	if tool == "" {
		i.Reason = "bwrap (Debian package bubblewrap) not found"
		return i
	}
	if i.Prlimit == "" {
		i.Reason = "prlimit (util-linux) not found: the resource limits cannot be set"
		return i
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dir, err := os.MkdirTemp("", "agentbus-probe-")
	if err != nil {
		i.Reason = fmt.Sprintf("probe directory: %v", err)
		return i
	}
	defer os.RemoveAll(dir)
	sh := "/bin/sh"
	if p, err := exec.LookPath("sh"); err == nil {
		sh = p
	}
	cmd := exec.CommandContext(ctx, tool, bwrapArgs(Spec{Dir: dir, Command: "exit 0"}, sh, i.Prlimit, "")...)
	cmd.Env = []string{"PATH=" + DefaultPath}
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if len(msg) > 200 {
			msg = msg[:200]
		}
		i.Reason = fmt.Sprintf("bwrap cannot create namespaces here: %v: %s", err, msg)
		return i
	}
	i.Available, i.Tool = true, tool
	return i
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
// The network namespace is new unless the spec asks for the host's: it
// also cuts the host's abstract Unix sockets, which belong to a network
// namespace. --disable-userns keeps the command from making user
// namespaces of its own (and with them capabilities over new namespaces,
// the usual first step of a kernel exploit). / and /dev are remounted
// read-only at the end (bwrap leaves them writable, RAM-backed and
// unbounded); /tmp and /dev/shm are tmpfs of the limit's size.
func bwrapBase(spec Spec) []string {
	args := []string{
		"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--disable-userns",
		"--die-with-parent", "--new-session", "--cap-drop", "ALL",
		"--hostname", "sandbox",
		"--proc", "/proc", "--dev", "/dev",
	}
	if spec.Network != NetworkHost {
		args = append(args, "--unshare-net")
	}
	size := spec.Limits.tmpBytes()
	for _, t := range []string{"/tmp", "/dev/shm"} {
		if size != "" {
			args = append(args, "--size", size)
		}
		args = append(args, "--tmpfs", t)
	}
	return append(args, "--remount-ro", "/dev", "--ro-bind", "/usr", "/usr")
}

// bwrapArgs builds the bwrap command line for spec: base options, the
// system directories read-only, the workspace read-write (the only
// writable place besides the private /tmp and /dev/shm), hidden paths
// masked, and prlimit running the shell. Environment variables are not
// passed as options: bwrap is started with exactly the command's
// environment, so its init (pid 1 inside) holds nothing else either.
// resolv, when set, is bound as /etc/resolv.conf (the user-mode stack's
// resolver); with NetworkOutbound the caller passes the info and block
// descriptors as fds 3 and 4.
func bwrapArgs(spec Spec, shell, prlimit, resolv string) []string {
	args := bwrapBase(spec)
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
		if e == "/etc/resolv.conf" && resolv != "" {
			args = append(args, "--ro-bind", resolv, e)
			continue
		}
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
			// A one-page tmpfs, read-only: a mask, not a place to write.
			args = append(args, "--size", "4096", "--tmpfs", h, "--remount-ro", h)
		} else {
			args = append(args, "--ro-bind", "/dev/null", h)
		}
	}
	if spec.Network == NetworkOutbound {
		args = append(args, "--info-fd", "3", "--block-fd", "4")
	}
	args = append(args, "--remount-ro", "/", "--chdir", spec.Dir, "--", prlimit)
	args = append(args, spec.Limits.prlimitArgs(true)...)
	return append(args, "--", shell, "-c", spec.Command)
}

func under(p string, roots []string) bool {
	for _, r := range roots {
		if p == r || strings.HasPrefix(p, strings.TrimSuffix(r, "/")+"/") {
			return true
		}
	}
	return false
}
