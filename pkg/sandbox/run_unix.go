//go:build unix

package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// waitDelay bounds how long Run waits for output after the shell exits
// while a background child still holds its stdout/stderr open.
const waitDelay = 250 * time.Millisecond

// Run executes spec.Command with `Shell -c` in spec.Dir and returns its
// output. The command runs in its own process group; on timeout or when
// ctx is canceled the whole group gets SIGKILL, and after the shell exits
// any process left in the group (background jobs) is killed too. A non-zero
// exit status is not an error: it is reported in Result.ExitCode. Errors
// are for commands that could not be started (bad Dir, no shell).
func Run(ctx context.Context, spec Spec) (Result, error) {
	if err := spec.validate(); err != nil {
		return Result{}, err
	}
	if spec.Timeout <= 0 {
		spec.Timeout = DefaultTimeout
	}
	if spec.OutputLimit <= 0 {
		spec.OutputLimit = DefaultOutputLimit
	}
	shell := spec.Shell
	if shell == "" {
		if p, err := exec.LookPath("bash"); err == nil {
			shell = p
		} else {
			shell = "/bin/sh"
		}
	}
	if _, err := exec.LookPath(shell); err != nil {
		return Result{}, fmt.Errorf("%w: %s: %v", ErrNoShell, shell, err)
	}
	iso := Probe()
	if spec.NoIsolation {
		iso.Available, iso.Reason = false, "disabled for this run"
	}
	if !iso.Available && spec.RequireIsolation {
		return Result{}, fmt.Errorf("%w: %s", ErrNoIsolation, iso.Reason)
	}
	outboundNet := iso.Available && spec.Network == NetworkOutbound
	if outboundNet && !iso.Outbound {
		return Result{}, fmt.Errorf("%w: outbound network: %s", ErrNoIsolation, iso.OutboundReason)
	}
	runCtx, cancel := context.WithTimeout(ctx, spec.Timeout)
	defer cancel()

	stdout := newCapBuffer(spec.OutputLimit)
	stderr := newCapBuffer(spec.OutputLimit)
	var cmd *exec.Cmd
	// With NetworkOutbound, bwrap reports its namespaces on fd 3 and waits
	// on fd 4 until the user-mode stack and its rules are in place.
	var infoR, blockW *os.File
	if iso.Available {
		resolv := ""
		if outboundNet {
			var err error
			if resolv, err = resolvConf(); err != nil {
				return Result{}, fmt.Errorf("sandbox: resolv.conf: %w", err)
			}
		}
		// HOME is the sandbox's private /tmp; bwrap gets exactly the
		// command's environment and passes it on.
		cmd = exec.Command(iso.Tool, bwrapArgs(spec, shell, iso.Prlimit, resolv)...)
		cmd.Env = buildEnv(spec.Dir, "/tmp", spec.Env)
		if outboundNet {
			var infoW, blockR *os.File
			var err error
			if infoR, infoW, err = os.Pipe(); err != nil {
				return Result{}, fmt.Errorf("sandbox: %w", err)
			}
			if blockR, blockW, err = os.Pipe(); err != nil {
				infoR.Close()
				infoW.Close()
				return Result{}, fmt.Errorf("sandbox: %w", err)
			}
			cmd.ExtraFiles = []*os.File{infoW, blockR}
			defer infoW.Close()
			defer blockR.Close()
		}
	} else {
		home, err := os.MkdirTemp("", "agentbus-home-")
		if err != nil {
			return Result{}, fmt.Errorf("sandbox: home directory: %w", err)
		}
		defer os.RemoveAll(home)
		if spec.RunAs != nil {
			if err := os.Chown(home, int(spec.RunAs.UID), int(spec.RunAs.GID)); err != nil {
				return Result{}, fmt.Errorf("sandbox: home directory: %w", err)
			}
		}
		if iso.Prlimit != "" {
			// No process limit here: outside a user namespace of its own,
			// RLIMIT_NPROC counts every process of the user on the host.
			cmd = exec.Command(iso.Prlimit, append(spec.Limits.prlimitArgs(false), "--", shell, "-c", spec.Command)...)
		} else {
			cmd = exec.Command(shell, "-c", spec.Command)
		}
		cmd.Env = buildEnv(spec.Dir, home, spec.Env)
	}
	cmd.Dir = spec.Dir
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	if spec.Stdin != nil {
		cmd.Stdin = bytes.NewReader(spec.Stdin)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if spec.RunAs != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: spec.RunAs.UID, Gid: spec.RunAs.GID}
	}
	cmd.WaitDelay = waitDelay

	start := time.Now()
	if err := cmd.Start(); err != nil {
		if infoR != nil {
			infoR.Close()
			blockW.Close()
		}
		if errors.Is(err, exec.ErrNotFound) {
			return Result{}, fmt.Errorf("%w: %s: %v", ErrNoShell, shell, err)
		}
		return Result{}, fmt.Errorf("sandbox: start %s: %w", shell, err)
	}
	pgid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if outboundNet {
		for _, f := range cmd.ExtraFiles {
			f.Close() // bwrap holds them now
		}
		net, err := startOutbound(runCtx, iso, spec, infoR, blockW)
		defer net.stop()
		if err != nil {
			killGroup(pgid)
			<-done
			return Result{}, fmt.Errorf("%w: outbound network: %v", ErrNoIsolation, err)
		}
	}

	var res Result
	var werr error
	select {
	case werr = <-done:
	case <-runCtx.Done():
		if ctx.Err() != nil {
			res.Canceled = true
		} else {
			res.TimedOut = true
		}
		killGroup(pgid)
		werr = <-done
	}
	// Whatever is left of the group (cmd &, nohup cmd) goes too. The pgid
	// stays reserved by the kernel while any member lives, so this cannot
	// hit an unrelated group that reused the number.
	killGroup(pgid)
	res.Duration = time.Since(start)

	res.ExitCode = -1
	if cmd.ProcessState != nil {
		res.ExitCode = cmd.ProcessState.ExitCode()
	}
	var exitErr *exec.ExitError
	if werr != nil && !errors.As(werr, &exitErr) && !errors.Is(werr, exec.ErrWaitDelay) {
		return res, fmt.Errorf("sandbox: wait: %w", werr)
	}
	res.Stdout, res.Truncated = stdout.String()
	var t bool
	res.Stderr, t = stderr.String()
	res.Truncated = res.Truncated || t
	return res, nil
}

func killGroup(pgid int) {
	if pgid > 1 {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}
