//go:build linux

package childproc

import "syscall"

// sysProcAttr puts the child in its own process group (a terminal's ^C goes to the parent,
// which stops children in order) and has the kernel kill it when the parent dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
