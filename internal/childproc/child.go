// Package childproc runs parts of agentbus as supervised OS processes of their own, for the
// tests and benchmarks that must see roles and NATS nodes as separate processes (the fault
// test in pkg/app, `agentbus bench --processes` in pkg/bench).
//
// The parent side is Proc: it starts an executable (by default this one, re-executed with an
// environment that tells it which part to play), waits for the child's "READY" line on stdout,
// and kills or stops it. The child side is Ready and ParentGone.
//
// # No orphans
//
// A child must not outlive its parent, whether the parent stops, fails or is killed:
//   - every child runs in a process group of its own, so a ^C in the terminal reaches only
//     the parent, which then stops its children in order (roles before the NATS server);
//   - on Linux the kernel sends the child SIGKILL when the parent dies (PR_SET_PDEATHSIG);
//   - everywhere, the child's stdin is a pipe from the parent: ParentGone is closed when it
//     reads EOF, which happens when the parent exits for any reason.
package childproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ReadyLine is what a child prints on stdout, alone on a line or followed by a space and
// information for the parent (an address, an id), once it is ready.
const ReadyLine = "READY"

// Spec describes a child process.
type Spec struct {
	Name string   // for errors and logs
	Path string   // the executable; "" = this process's own (os.Executable)
	Args []string // arguments after the program name
	Env  []string // added to this process's environment
	// Log receives the child's stderr (appended to; "" = discarded). Stdout is read for the
	// ready line; further lines are appended to Log too.
	Log string
}

// Proc is a supervised child process: one slot that can be started again after it died
// (Respawn), as a platform restarts a container. Its methods may be called from any goroutine.
type Proc struct {
	spec Spec

	mu    sync.Mutex
	cmd   *exec.Cmd
	stdin io.WriteCloser
	ready chan struct{}
	exit  chan struct{}
	info  string
}

// ErrExited reports a child that exited before it was ready.
var ErrExited = errors.New("childproc: child exited before it was ready")

// ErrNotReady reports a child that did not print its ready line in time.
var ErrNotReady = errors.New("childproc: child not ready in time")

// Start starts the child. It does not wait for it to be ready (WaitReady does).
func Start(spec Spec) (*Proc, error) {
	p := &Proc{spec: spec}
	if err := p.Respawn(); err != nil {
		return nil, err
	}
	return p, nil
}

// Name is the child's name from its Spec.
func (p *Proc) Name() string { return p.spec.Name }

// LogPath is where the child's stderr goes.
func (p *Proc) LogPath() string { return p.spec.Log }

// Respawn starts the child's process again (after it exited or was killed); the previous one
// must be gone.
func (p *Proc) Respawn() error {
	path := p.spec.Path
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("childproc: %s: %w", p.spec.Name, err)
		}
		path = exe
	}
	cmd := exec.Command(path, p.spec.Args...)
	cmd.Env = append(os.Environ(), p.spec.Env...)
	cmd.SysProcAttr = sysProcAttr()
	var lf *os.File
	if p.spec.Log != "" {
		f, err := os.OpenFile(p.spec.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("childproc: %s: log: %w", p.spec.Name, err)
		}
		lf = f
		cmd.Stderr = f
	}
	closeLog := func() {
		if lf != nil {
			lf.Close()
		}
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		closeLog()
		return fmt.Errorf("childproc: %s: %w", p.spec.Name, err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		closeLog()
		return fmt.Errorf("childproc: %s: %w", p.spec.Name, err)
	}
	if err := cmd.Start(); err != nil {
		closeLog()
		return fmt.Errorf("childproc: start %s: %w", p.spec.Name, err)
	}
	ready, exit := make(chan struct{}), make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		seen := false
		for sc.Scan() {
			line := sc.Text()
			if !seen && (line == ReadyLine || strings.HasPrefix(line, ReadyLine+" ")) {
				seen = true
				p.mu.Lock()
				p.info = strings.TrimSpace(strings.TrimPrefix(line, ReadyLine))
				p.mu.Unlock()
				close(ready)
				continue
			}
			if lf != nil {
				fmt.Fprintln(lf, line)
			}
		}
		_ = cmd.Wait()
		closeLog()
		close(exit)
	}()
	p.mu.Lock()
	p.cmd, p.stdin, p.ready, p.exit, p.info = cmd, stdin, ready, exit, ""
	p.mu.Unlock()
	return nil
}

// WaitReady waits up to d for the ready line and returns what followed READY on it. An error
// says why not and ends with the tail of the child's log.
func (p *Proc) WaitReady(d time.Duration) (string, error) {
	return p.WaitReadyContext(context.Background(), d)
}

// WaitReadyContext is WaitReady that also gives up when ctx ends (with ctx's error).
func (p *Proc) WaitReadyContext(ctx context.Context, d time.Duration) (string, error) {
	p.mu.Lock()
	ready, exit := p.ready, p.exit
	p.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ready:
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.info, nil
	case <-exit:
		return "", fmt.Errorf("%w: %s (log %s):\n%s", ErrExited, p.spec.Name, p.spec.Log, Tail(p.spec.Log, 15))
	case <-t.C:
		return "", fmt.Errorf("%w: %s after %s (log %s):\n%s", ErrNotReady, p.spec.Name, d, p.spec.Log, Tail(p.spec.Log, 15))
	case <-ctx.Done():
		return "", fmt.Errorf("childproc: wait for %s: %w", p.spec.Name, ctx.Err())
	}
}

// Pid is the process id of the current process (0 before Start).
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Exited is closed when the current process has exited.
func (p *Proc) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit
}

// Kill sends SIGKILL and waits until the process is gone.
func (p *Proc) Kill() {
	p.mu.Lock()
	cmd, exit := p.cmd, p.exit
	p.mu.Unlock()
	_ = cmd.Process.Kill()
	<-exit
}

// Stop asks the process to stop (SIGTERM) and waits up to d, then kills it. It returns
// at once when the process has already exited.
func (p *Proc) Stop(d time.Duration) {
	p.mu.Lock()
	cmd, exit, stdin := p.cmd, p.exit, p.stdin
	p.mu.Unlock()
	select {
	case <-exit:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-exit:
	case <-t.C:
		_ = cmd.Process.Kill()
		<-exit
	}
	_ = stdin.Close()
}

// Tail returns the last n lines of the file at path ("" when it cannot be read).
func Tail(path string, n int) string {
	if path == "" {
		return ""
	}
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Ready tells the parent (a Proc) that this child is ready, with info for it (may be "").
func Ready(info string) {
	if info == "" {
		fmt.Println(ReadyLine)
		return
	}
	fmt.Println(ReadyLine + " " + info)
}

var (
	parentOnce sync.Once
	parentGone chan struct{}
)

// ParentGone is closed when the parent has gone away: stdin, the pipe a Proc holds open,
// reached EOF. A child started some other way, with stdin a terminal, never sees it closed
// until the terminal does; one with stdin /dev/null sees it closed at once, so call it only
// in children a Proc started.
func ParentGone() <-chan struct{} {
	parentOnce.Do(func() {
		parentGone = make(chan struct{})
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			close(parentGone)
		}()
	})
	return parentGone
}
