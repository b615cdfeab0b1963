//go:build !unix

package bench

import "time"

// cpuTime is not measured on this platform (CPU figures read 0).
func cpuTime() time.Duration { return 0 }

// maxRSSKiB is not measured on this platform.
func maxRSSKiB() int64 { return 0 }
