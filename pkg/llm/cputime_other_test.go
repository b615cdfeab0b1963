//go:build !unix

package llm

import (
	"testing"
	"time"
)

func cpuNow() time.Duration                       { return 0 }
func reportCPU(b *testing.B, since time.Duration) {}
