package turn

import (
	"strings"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
)

// liveInterval is how often a turn publishes the text it has buffered for agent.live. Models
// stream a few characters per event; a preview (the console, an edited chat message) needs far
// fewer updates than that, and each update is an event to encode and publish. The end of a
// message publishes what is left at once.
const liveInterval = 50 * time.Millisecond

// liveBuffer coalesces a turn's text deltas into live.delta events, at most one per
// liveInterval per run of deltas to the same message and content block.
type liveBuffer struct {
	publish func(events.LiveDelta) // called with mu held, so deltas leave in order

	mu           sync.Mutex
	kind         string
	message      int
	contentIndex int
	text         strings.Builder
	seq          uint64
	timer        *time.Timer
	armed        bool
}

// add buffers one delta of message (the turn's message index) and content block.
func (l *liveBuffer) add(kind string, message, contentIndex int, delta string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.text.Len() > 0 && (kind != l.kind || message != l.message || contentIndex != l.contentIndex) {
		l.flushLocked()
	}
	l.kind, l.message, l.contentIndex = kind, message, contentIndex
	l.text.WriteString(delta)
	if l.armed {
		return
	}
	l.armed = true
	if l.timer == nil {
		l.timer = time.AfterFunc(liveInterval, l.tick)
	} else {
		l.timer.Reset(liveInterval)
	}
}

func (l *liveBuffer) tick() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed = false
	l.flushLocked()
}

// flush publishes what is buffered now (a message ended, or the turn did).
func (l *liveBuffer) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.armed {
		l.timer.Stop()
		l.armed = false
	}
	l.flushLocked()
}

func (l *liveBuffer) flushLocked() {
	if l.text.Len() == 0 {
		return
	}
	l.seq++
	l.publish(events.LiveDelta{Kind: l.kind, ContentIndex: l.contentIndex, Delta: l.text.String(), Seq: l.seq, Message: l.message})
	l.text.Reset()
}
