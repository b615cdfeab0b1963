//go:build linux

package bench

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// runqueueWait is how long this process's threads have been runnable but waiting for a CPU
// (the second field of /proc/self/task/*/schedstat): on a shared machine the time other
// processes held the cores while this one had work. Threads that exited are not counted.
func runqueueWait() time.Duration {
	paths, _ := filepath.Glob("/proc/self/task/*/schedstat")
	var total int64
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) >= 2 {
			if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				total += n
			}
		}
	}
	return time.Duration(total)
}
