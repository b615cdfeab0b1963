package ownership

import (
	"context"
)

// Takeover of many sessions at once. A replica that takes a dead peer's sessions over
// (peerDead) claims each one and starts its actor: a claim is four requests to KV leases, a
// start a few reads more (the session record, the inbox's last event, the last context commit,
// the context, the turn log of the turn in flight) before the turns left open run again. A
// peer of one process that ran everything (`agentbus up`) held hundreds of sessions, all of
// them started together, with everything else this replica does: their reads all in flight at
// once on one connection delayed every one of them alike, and with them this replica's own
// lease renewal, which lapsed in the middle of a takeover of 500 sessions (claims then wait for
// the lease: seconds more). So both are concurrent with a bound:
//
//   - claimSlots claims at once (peerDead). A claim holds no slot of its own while its actor
//     starts, and is cheap: wide enough that 500 sessions are claimed in a few waves of round
//     trips, so that their deliveries come to this replica (held, not rung to a dead doorbell)
//     while their actors wait for a start slot.
//   - startSlots actor starts at once (Starting; the actor holds its slot until its first look at
//     the inbox is done, the turns in flight relaunched). A start is a chain of round trips
//     more than CPU: a narrow bound leaves the bus idle between them (with 16 slots a takeover
//     of 500 sessions answered later than with no bound: p90 2.2 s against 1.2 s, the starts
//     waiting 0.6 s for a slot at the median), while 64 keep many reads in flight and still
//     leave room for the renewal and the turns already running. The starts queue in order, so
//     the first sessions taken over answer first instead of every session answering last.
//
// Every start goes through the slots, not only a takeover's: a cold start on the reply path of
// a new message waits only when 64 others are starting.
const (
	claimSlots = 128
	startSlots = 64
)

// Starting waits for one of the replica's start slots and returns the function that gives it
// back (to be called once, from the same goroutine; later calls do nothing). It fails only when
// ctx ends first.
func (o *Manager) Starting(ctx context.Context) (release func(), err error) {
	select {
	case o.starts <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	done := false
	return func() {
		if !done {
			done = true
			<-o.starts
		}
	}, nil
}
