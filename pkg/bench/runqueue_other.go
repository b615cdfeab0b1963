//go:build !linux

package bench

import "time"

// runqueueWait is not measured on this platform.
func runqueueWait() time.Duration { return 0 }
