//go:build !unix

package childproc

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
