//go:build unix && !linux

package childproc

import "syscall"

// sysProcAttr puts the child in its own process group (a terminal's ^C goes to the parent,
// which stops children in order); ParentGone covers the parent's death.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
