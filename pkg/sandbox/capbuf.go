package sandbox

import (
	"fmt"
	"sync"
)

// capBuffer keeps the first half and the last half of a stream up to limit
// bytes in total and counts what it dropped in between: the head shows how
// a command started, the tail how it ended (errors, summaries), and memory
// stays bounded whatever the command prints.
type capBuffer struct {
	mu      sync.Mutex
	headCap int
	tailCap int
	head    []byte
	tail    []byte // ring buffer once full
	tailPos int    // next write position in tail when full
	total   int64
}

func newCapBuffer(limit int) *capBuffer {
	h := limit / 2
	return &capBuffer{headCap: h, tailCap: limit - h}
}

func (b *capBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	b.total += int64(n)
	if room := b.headCap - len(b.head); room > 0 {
		k := min(room, len(p))
		b.head = append(b.head, p[:k]...)
		p = p[k:]
	}
	if b.tailCap == 0 {
		return n, nil
	}
	if len(p) >= b.tailCap {
		b.tail = append(b.tail[:0], p[len(p)-b.tailCap:]...)
		b.tailPos = 0
		return n, nil
	}
	for len(p) > 0 {
		if len(b.tail) < b.tailCap {
			k := min(b.tailCap-len(b.tail), len(p))
			b.tail = append(b.tail, p[:k]...)
			p = p[k:]
			continue
		}
		k := copy(b.tail[b.tailPos:], p)
		b.tailPos = (b.tailPos + k) % b.tailCap
		p = p[k:]
	}
	return n, nil
}

// String returns the kept output and whether anything was dropped.
func (b *capBuffer) String() (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	kept := int64(len(b.head) + len(b.tail))
	tail := append(append([]byte{}, b.tail[b.tailPos:]...), b.tail[:b.tailPos]...)
	if b.total <= kept {
		return string(b.head) + string(tail), false
	}
	return fmt.Sprintf("%s\n... [%d bytes truncated] ...\n%s", b.head, b.total-kept, tail), true
}
