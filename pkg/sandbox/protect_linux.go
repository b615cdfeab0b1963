package sandbox

import "syscall"

// ProtectProcess marks the calling process not dumpable
// (prctl PR_SET_DUMPABLE 0): its /proc entries (environ, mem, fd, maps)
// then belong to root, and another process of the same user, a command
// run without isolation or a stdio MCP server among them, can no longer
// read its environment or memory through them. Only a process with
// CAP_SYS_PTRACE (root, which is why a root tool worker should set RunAs)
// still can. It also turns off core dumps, which would hold the same
// secrets. Idempotent.
func ProtectProcess() error {
	const prSetDumpable = 4
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0); errno != 0 {
		return errno
	}
	return nil
}
