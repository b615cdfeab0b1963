// Package sandbox runs one shell command line the way the bash tool needs
// it run: in a confined working directory, with a timeout, a cap on the
// output it keeps, the whole process group killed on timeout or
// cancellation (and when the shell exits, so background jobs do not
// outlive the call), and an environment built from a small allowlist so
// the agent process's secrets (API keys, tokens, NATS credentials) never
// reach the command.
//
// The sandbox does not decide whether a command may run: that is
// pkg/execpolicy's job, and callers must check the policy first. It is also
// not an OS-level jail: file-system confinement beyond the working
// directory comes from running the tool worker as an unprivileged user (or
// in a container), which docs/security.md recommends.
package sandbox

import (
	"errors"
	"fmt"
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
	// Dir is the working directory (required, must exist). HOME is set to it
	// too, so "~" and dotfiles stay inside the workspace.
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
// parent's, or DefaultPath), HOME and PWD = dir, LANG/LC_* and TZ from the
// parent if set, TERM=dumb, and flags that keep common tools from paging
// or prompting.
func BaseEnv(dir string) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = DefaultPath
	}
	env := []string{
		"PATH=" + path,
		"HOME=" + dir,
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
func buildEnv(dir string, extra []string) []string {
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
	for _, kv := range BaseEnv(dir) {
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
