//go:build unix

package faux_test

import (
	"syscall"
	"testing"
	"time"
)

// cpuNow is this process's user+system CPU time. Benchmarks report CPU per op next to wall
// time because the dev machine is shared: wall time there measures the neighbours too.
func cpuNow() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, since time.Duration) {
	if d := cpuNow() - since; d > 0 && since > 0 {
		b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}
