//go:build unix

package loop_test

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user + system, all threads: GC and scavenger included) the
// process has used. Benchmarks report it per op because wall time on a shared 2-core machine
// mostly measures the neighbours.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
