package toolbus

import (
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/events"
)

// Router hands TOOL_RESULTS messages to the tool calls waiting for them. Each session
// actor subscribes to its session's results once (events.ToolResultSubject) into the router's one
// channel, rather than every call subscribing and unsubscribing: a subscription per call cost a
// goroutine, buffers and two server round trips' worth of interest changes.
type Router struct {
	in chan *nats.Msg

	mu      sync.Mutex
	waiting map[string]chan *nats.Msg // by call id
}

// resultBuffer bounds results received and not yet routed. Routing is a map lookup, so it
// stays near empty; a result dropped when it is full is still found in TOOL_RESULTS when the
// call's timeout comes (Executor.existing).
const resultBuffer = 8192

// NewRouter returns a Router; Run must run for results to reach their calls.
func NewRouter() *Router {
	return &Router{in: make(chan *nats.Msg, resultBuffer), waiting: map[string]chan *nats.Msg{}}
}

// Run routes until stop is closed.
func (r *Router) Run(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case m := <-r.in:
			id := m.Header.Get(events.HeaderCallID)
			if id == "" { // a result of an older version: the call id is in its subject
				_, id, _ = events.ParseToolResultSubject(m.Subject)
			}
			r.mu.Lock()
			c := r.waiting[id]
			r.mu.Unlock()
			if c != nil {
				select {
				case c <- m:
				default: // a duplicate; the call has one already
				}
			}
		}
	}
}

// Expect registers interest in the result of call callID (events.HeaderCallID); done must be
// called when the call no longer waits.
func (r *Router) Expect(callID string) (results <-chan *nats.Msg, done func()) {
	c := make(chan *nats.Msg, 1)
	r.mu.Lock()
	r.waiting[callID] = c
	r.mu.Unlock()
	return c, func() {
		r.mu.Lock()
		if r.waiting[callID] == c {
			delete(r.waiting, callID)
		}
		r.mu.Unlock()
	}
}

// In is where result subscriptions deliver (nats.Conn.ChanSubscribe).
func (r *Router) In() chan *nats.Msg { return r.in }
