//go:build !unix

package cputime

import "time"

// Process is not measured on this platform.
func Process() time.Duration { return 0 }
