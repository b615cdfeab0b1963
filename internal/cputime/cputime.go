// Package cputime reports the process's CPU time, for benchmarks that print CPU per op next to
// wall time: on a shared machine wall time measures the neighbours too.
package cputime

import (
	"testing"
	"time"
)

// Report adds a cpu-ns/op metric: the CPU the process used since since (a Process reading),
// divided by b.N. Nothing is reported where Process is unsupported.
func Report(b *testing.B, since time.Duration) {
	if d := Process() - since; d > 0 && since > 0 {
		b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}
