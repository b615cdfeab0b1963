package sandbox

import (
	"fmt"
	"strconv"
)

// Limits bound the resources of one command. Zero fields take the value of
// [DefaultLimits]; a negative field means "no limit" (an operator's
// explicit choice). Processes, memory, CPU time, open files and file size
// are rlimits set inside the sandbox by util-linux prlimit(1) just before
// the shell starts, as hard and soft limit (the command has no capability
// to raise them); Tmp is the size of the RAM-backed /tmp and /dev/shm.
//
// What the kernel counts:
//   - Processes (RLIMIT_NPROC) counts tasks (threads included) of the
//     command's user in the sandbox's own user namespace, so every call
//     has its own budget and the tool worker's threads do not count. The
//     kernel does not apply it to uid 0: a tool worker running as root
//     needs Spec.RunAs for it to hold. Without isolation it is not set (it
//     would count every process of the worker's user on the host).
//   - Memory (RLIMIT_DATA) is per process: heap and private writable
//     mappings; address space merely reserved (V8, Go) does not count. The
//     total is bounded by Processes × Memory plus Tmp, not by one figure
//     (that needs a cgroup, which the tool worker's container rarely has).
//   - CPU (RLIMIT_CPU) is CPU seconds per process (SIGXCPU, then SIGKILL);
//     the wall-clock timeout bounds the call as a whole.
//   - OpenFiles (RLIMIT_NOFILE) and FileBytes (RLIMIT_FSIZE: the largest
//     file a process may write, in the workspace too; also bounds memfd).
type Limits struct {
	Processes  int
	MemoryMiB  int
	CPUSeconds int
	OpenFiles  int
	TmpMiB     int
	FileMiB    int
}

// DefaultLimits are sized for the bash tool's everyday work (git, npm, pip,
// compilers in the development preset) and far below what hurts a shared
// host: the red team started 300 processes and wrote 300 MB to /tmp in one
// call.
var DefaultLimits = Limits{
	Processes:  128,
	MemoryMiB:  1024,
	CPUSeconds: 120,
	OpenFiles:  1024,
	TmpMiB:     64,
	FileMiB:    1024,
}

// withDefaults fills zero fields from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	pick := func(v, def int) int {
		if v == 0 {
			return def
		}
		return v
	}
	return Limits{
		Processes:  pick(l.Processes, d.Processes),
		MemoryMiB:  pick(l.MemoryMiB, d.MemoryMiB),
		CPUSeconds: pick(l.CPUSeconds, d.CPUSeconds),
		OpenFiles:  pick(l.OpenFiles, d.OpenFiles),
		TmpMiB:     pick(l.TmpMiB, d.TmpMiB),
		FileMiB:    pick(l.FileMiB, d.FileMiB),
	}
}

// String is the one-line summary for logs.
func (l Limits) String() string {
	l = l.withDefaults()
	f := func(v int, unit string) string {
		if v < 0 {
			return "unlimited"
		}
		return strconv.Itoa(v) + unit
	}
	return fmt.Sprintf("processes %s, memory %s per process, cpu %s per process, open files %s, /tmp %s, file size %s",
		f(l.Processes, ""), f(l.MemoryMiB, " MiB"), f(l.CPUSeconds, " s"), f(l.OpenFiles, ""), f(l.TmpMiB, " MiB"), f(l.FileMiB, " MiB"))
}

// prlimitArgs are prlimit(1)'s options for l (defaults applied); nproc is
// left out when withProcs is false.
func (l Limits) prlimitArgs(withProcs bool) []string {
	l = l.withDefaults()
	const mib = 1 << 20
	var out []string
	add := func(opt string, v, unit int) {
		if v < 0 {
			return
		}
		n := strconv.FormatInt(int64(v)*int64(unit), 10)
		out = append(out, "--"+opt+"="+n+":"+n)
	}
	if withProcs {
		add("nproc", l.Processes, 1)
	}
	add("data", l.MemoryMiB, mib)
	add("cpu", l.CPUSeconds, 1)
	add("nofile", l.OpenFiles, 1)
	add("fsize", l.FileMiB, mib)
	return out
}

// tmpBytes is the size option of the private /tmp and /dev/shm ("" when
// unlimited, which leaves the kernel's default of half the RAM).
func (l Limits) tmpBytes() string {
	l = l.withDefaults()
	if l.TmpMiB < 0 {
		return ""
	}
	return strconv.FormatInt(int64(l.TmpMiB)<<20, 10)
}
