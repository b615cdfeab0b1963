package natsutil

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// InProgress keeps JetStream deliveries that are being worked on from being redelivered. One
// goroutine wakes every interval and sends an in-progress ack to each registered delivery that
// has been in hand for at least interval/2, so a delivery handled quickly costs a map insert and
// delete and no ack, and there is no goroutine or timer per delivery. With interval =
// AckWait/3 a delivery hears within AckWait/2 of being taken and then every AckWait/3.
type InProgress struct {
	interval time.Duration

	mu   sync.Mutex
	msgs map[jetstream.Msg]time.Time // delivery -> when it was taken in hand
	stop chan struct{}
	done chan struct{}
}

// NewInProgress starts the goroutine; Close ends it.
func NewInProgress(interval time.Duration) *InProgress {
	p := &InProgress{interval: interval, msgs: map[jetstream.Msg]time.Time{}, stop: make(chan struct{}), done: make(chan struct{})}
	go p.run()
	return p
}

// Add registers m, taken in hand now.
func (p *InProgress) Add(m jetstream.Msg) {
	now := time.Now()
	p.mu.Lock()
	p.msgs[m] = now
	p.mu.Unlock()
}

// Remove unregisters m; no in-progress ack is sent for it after Remove returns.
func (p *InProgress) Remove(m jetstream.Msg) {
	p.mu.Lock()
	delete(p.msgs, m)
	p.mu.Unlock()
}

func (p *InProgress) run() {
	defer close(p.done)
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case now := <-t.C:
			p.mu.Lock()
			for m, since := range p.msgs {
				if now.Sub(since) >= p.interval/2 {
					_ = m.InProgress() // a publish, buffered by the connection: cheap under the lock
				}
			}
			p.mu.Unlock()
		}
	}
}

// Close stops the goroutine; no in-progress ack is sent after it returns. Safe to call more
// than once.
func (p *InProgress) Close() {
	p.mu.Lock()
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	p.mu.Unlock()
	<-p.done
}
