package turn

import (
	"context"

	"github.com/agentbus/agentbus/pkg/events"

	"github.com/agentbus/agentbus/pkg/turn/ownership"
)

// The actor as ownership.Session: what the ownership.Manager calls, under its lock. Run,
// Deliver, Know and LeaseLost are in actor.go.

var _ ownership.Session = (*actor)(nil)

// owner is what an actor needs of ownership (ownership.Manager): the fence every context
// commit waits at while the worker lease is recovered, and the hand-off of a session that
// rebalancing moved.
type owner interface {
	AwaitFence(ctx context.Context, s ownership.Session) error
	HandOff(sk events.SessionKey, to string, seq uint64)
	Starting(ctx context.Context) (release func(), err error)
}

var _ owner = (*ownership.Manager)(nil)

// Alive reports whether the actor has not begun to stop.
func (a *actor) Alive() bool { return !a.dead.Load() }

// Shed asks an idle actor to stop and hand its session to target (rebalancing): it sees
// shedTo when it wakes, and stops if it is still idle then.
func (a *actor) Shed(target string) bool {
	if !a.idle() || !a.shedTo.CompareAndSwap(nil, &target) {
		return false
	}
	a.nudge()
	return true
}

// Kill marks the actor as abandoned by a simulated crash: its shutdown releases nothing.
func (a *actor) Kill() { a.killed.Store(true) }

// Claim is the actor's claim.
func (a *actor) Claim() *ownership.Claim { return a.claim }

// Context ends when the actor stops.
func (a *actor) Context() context.Context { return a.ctx }
