// Package sandbox runs one shell command line the way the bash tool needs
// it run: in a confined working directory, with a timeout, a cap on the
// output it keeps, the whole process group killed on timeout or
// cancellation (and when the shell exits, so background jobs do not
// outlive the call), and an environment built from a small allowlist so
// the agent process's secrets (API keys, tokens, NATS credentials) never
// reach the command.
//
// Where bubblewrap (bwrap) can create user namespaces ([Probe]), every
// command runs inside it: new user, PID, mount, IPC, UTS and network
// namespaces, the system directories read-only, the working directory the
// only writable place (besides a private, size-limited /tmp, which is also
// HOME), a fresh /proc in which the calling process does not exist, no
// capabilities, no nested user namespaces, resource limits ([Limits]) and
// bwrap itself started with the command's cleared environment. Secrets of
// the calling process (its environment, memory, /proc/$PPID/environ, its
// configuration file and data directory) are therefore out of reach,
// nothing outside the working directory can be written, and no service of
// the host is reachable over the network: [NetworkOutbound] adds a
// user-mode stack (slirp4netns) to public addresses only. Without bwrap
// the command runs as a plain child process if the caller allows it
// (Spec.RequireIsolation); the bash tool refuses unless the operator opted
// out (see pkg/tools/builtin).
//
// The sandbox does not decide whether a command may run: that is
// pkg/execpolicy's job, and callers must check the policy first.
package sandbox

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"
)

// Defaults applied by [Run] to zero fields of [Spec].
const (
	DefaultTimeout     = 60 * time.Second
	DefaultOutputLimit = 64 << 10 // bytes kept per stream
	DefaultPath        = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// KillGrace is how long the process group gets after SIGTERM before SIGKILL.
	KillGrace = 2 * time.Second
)

// Sentinel errors.
var (
	// ErrNoDir: Spec.Dir is empty, missing or not a directory.
	ErrNoDir = errors.New("sandbox: working directory")
	// ErrEmptyCommand: Spec.Command is blank.
	ErrEmptyCommand = errors.New("sandbox: empty command")
	// ErrNoShell: no usable shell was found.
	ErrNoShell = errors.New("sandbox: no shell")
	// ErrUnsupported: the platform cannot kill process groups.
	ErrUnsupported = errors.New("sandbox: unsupported platform")
)

// Spec is one command to run.
type Spec struct {
	// Command is the shell command line (already approved by the exec policy).
	Command string
	// Dir is the working directory (required, must exist), the only
	// writable directory. HOME is a fresh, empty directory of its own for
	// every run (dotfiles a command writes there do not reach the next
	// one, and dotfiles in the workspace are not read as configuration).
	Dir string
	// Timeout for the whole command; default DefaultTimeout.
	Timeout time.Duration
	// OutputLimit caps the bytes kept from each of stdout and stderr;
	// default DefaultOutputLimit. The head and the tail are kept, the
	// middle is replaced by a marker line, and Truncated is set.
	OutputLimit int
	// Env adds KEY=VALUE entries to the base environment (see [BaseEnv]).
	// Entries whose name looks like a secret are dropped anyway.
	Env []string
	// Shell is the interpreter run as `Shell -c Command`; default bash if
	// found on PATH, else /bin/sh.
	Shell string
	// Stdin is the command's standard input; default empty (/dev/null).
	Stdin []byte
	// ReadOnly are further directories bound read-only into the sandbox
	// (skills); ignored without isolation.
	ReadOnly []string
	// Hide are paths that must not be readable inside the sandbox even
	// when they lie under a bound directory (the data directory, the
	// config file); they are masked with an empty file or directory.
	Hide []string
	// Network is what the command may reach (isolated runs only; a run
	// without isolation shares the host's network whatever this says):
	// NetworkNone (the zero value) gives it a network namespace of its
	// own with only a loopback interface, NetworkOutbound adds a
	// user-mode stack (slirp4netns) through which public addresses are
	// reachable and the host's loopback, its own addresses, link-local
	// and private ranges are not (see [BlockedNetworks]), NetworkHost
	// shares the host's network (operator-written tool handlers).
	Network Network
	// AllowNets are prefixes reachable in NetworkOutbound despite
	// [BlockedNetworks] (an internal package mirror, say). The host's
	// own addresses and its loopback stay unreachable.
	AllowNets []netip.Prefix
	// Limits bound what the command may use; zero fields take
	// [DefaultLimits]' values. Isolated runs get all of them; a run
	// without isolation gets all but Processes (see [Limits]).
	Limits Limits
	// RunAs, when set, runs the command (and bwrap, and the network
	// helpers) as this user and group instead of the caller's. A tool
	// worker running as root needs it: the kernel does not apply the
	// process limit to uid 0, and without isolation a command of another
	// user cannot read the worker's files. Dir must be writable by it.
	RunAs *Credential
	// RequireIsolation makes Run fail with ErrNoIsolation instead of
	// running the command unconfined when bwrap is unavailable.
	RequireIsolation bool
	// NoIsolation runs the command as a plain child process even when
	// bwrap is available (tests of the unconfined path only).
	NoIsolation bool
}

// Network says what a sandboxed command may reach; see Spec.Network.
type Network string

// Network modes.
const (
	NetworkNone     Network = ""
	NetworkOutbound Network = "outbound"
	NetworkHost     Network = "host"
)

// ParseNetwork maps the configuration words (none, outbound, host) to a
// Network.
func ParseNetwork(s string) (Network, error) {
	switch s {
	case "none", "":
		return NetworkNone, nil
	case "outbound":
		return NetworkOutbound, nil
	case "host":
		return NetworkHost, nil
	}
	return "", fmt.Errorf("sandbox: network %q: want none, outbound or host", s)
}

// String is the configuration word.
func (n Network) String() string {
	if n == NetworkNone {
		return "none"
	}
	return string(n)
}

// Credential is a numeric user and group (Spec.RunAs).
type Credential struct {
	UID, GID uint32
}

// Result is what a finished command produced.
type Result struct {
	Stdout, Stderr string
	// ExitCode is the shell's exit status; -1 if it was killed by a signal.
	ExitCode int
	// TimedOut: the timeout fired and the process group was killed.
	TimedOut bool
	// Canceled: the context was canceled and the process group was killed.
	Canceled bool
	// Truncated: output beyond OutputLimit was dropped from the middle.
	Truncated bool
	// Duration is the wall time from start to exit.
	Duration time.Duration
}

// passEnv are variables copied from the parent process when set. Nothing
// else is inherited.
var passEnv = []string{"LANG", "LC_ALL", "LC_CTYPE", "TZ"}

// BaseEnv returns the minimal environment every command gets: PATH (the
// parent's, or DefaultPath), HOME = home, PWD = dir, LANG/LC_* and TZ from
// the parent if set, TERM=dumb, and flags that keep common tools from
// paging or prompting.
func BaseEnv(dir, home string) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = DefaultPath
	}
	env := []string{
		"PATH=" + path,
		"HOME=" + home,
		"PWD=" + dir,
		"TERM=dumb",
		"PAGER=cat",
		"GIT_PAGER=cat",
		"GIT_TERMINAL_PROMPT=0",
		"NO_COLOR=1",
	}
	for _, k := range passEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	if _, ok := os.LookupEnv("LANG"); !ok {
		env = append(env, "LANG=C.UTF-8")
	}
	return env
}

// secretMarkers are substrings of variable names that are never passed on.
var secretMarkers = []string{"KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDS", "PRIVATE", "AUTH", "SESSION", "COOKIE", "NKEY", "SEED"}

// secretNames are exact names never passed on.
var secretNames = map[string]bool{"NATS_URL": true, "NATS_USER": true, "NATS_PASS": true, "DATABASE_URL": true, "SSH_AUTH_SOCK": true, "GPG_AGENT_INFO": true}

// IsSecretName reports whether an environment variable name looks like it
// holds a secret (API keys, tokens, passwords, credentials, NATS settings).
func IsSecretName(name string) bool {
	u := strings.ToUpper(name)
	if secretNames[u] || strings.HasPrefix(u, "NATS_") || strings.HasPrefix(u, "AWS_") || strings.HasPrefix(u, "AGENTBUS_") {
		return true
	}
	for _, m := range secretMarkers {
		if strings.Contains(u, m) {
			return true
		}
	}
	return false
}

// buildEnv merges the base environment with extra, dropping malformed
// entries and secret-looking names; later entries win.
func buildEnv(dir, home string, extra []string) []string {
	idx := map[string]int{}
	var out []string
	add := func(kv string) {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsAny(k, " \t\n\x00") || IsSecretName(k) {
			return
		}
		if i, seen := idx[k]; seen {
			out[i] = kv
			return
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	for _, kv := range BaseEnv(dir, home) {
		add(kv)
	}
	for _, kv := range extra {
		add(kv)
	}
	return out
}

func (s *Spec) validate() error {
	if strings.TrimSpace(s.Command) == "" {
		return ErrEmptyCommand
	}
	if s.Dir == "" {
		return fmt.Errorf("%w: not set", ErrNoDir)
	}
	fi, err := os.Stat(s.Dir)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoDir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", ErrNoDir, s.Dir)
	}
	return nil
}
