package ownership

import (
	"log/slog"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
)

// Rebalancing: a replica that joins takes its share of the sessions already running.
//
// An actor keeps its session until it has been idle for IdleRelease, its replica stops, or its
// replica dies; a replica that joins a busy cluster would get only sessions that start (or come
// back) later. So every replica writes the number of sessions it runs into its worker lease at
// each renewal (store.Lease.Sessions), and the watch of the worker leases shows every replica's
// load. After a renewal, a replica that runs more than its fair share (the sessions of all
// replicas over their number, rounded up) plus a slack moves sessions to the least loaded
// replica: only actors idle at that moment (between turns, nothing held, queued or closing).
// Such an actor stops as on an idle release, its claim removed, and then rings the target's
// doorbell with no delivery, so the target claims the session at once and its actor reads the
// inbox from the cursor.
//
// Correctness stays with the claims. If the session's next event reaches this replica before
// the target has claimed it, this replica claims it again and the move simply does not happen;
// if after, the claim is held and the delivery is rung over. Nothing is lost or reordered.

// ShedSlack is how many sessions above its fair share a replica may run before it moves some
// (at least; a tenth of the fair share when that is more), so that loads that differ by a
// few sessions, or by what one renewal has not shown yet, do not move sessions to and fro.
const ShedSlack = 2

// Running returns the number of sessions this replica runs.
func (o *Manager) Running() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.sess)
}

// rebalance moves idle sessions to the least loaded replica when this one runs more than its
// share (see above). After a move it waits a lease TTL before it looks again, so that the
// target's renewals have shown its new load by then.
func (o *Manager) rebalance() {
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.killed || !o.viewReady || o.ctx.Err() != nil || now.Before(o.shedPause) {
		return
	}
	own := len(o.sess)
	total, replicas := own, 1
	target, least := "", own
	for id, s := range o.view {
		if id == o.cfg.ID || s.gone {
			continue
		}
		if _, suspected := o.suspect[id]; suspected {
			continue // its doorbell had no responders: it may be dying
		}
		load := s.sessions
		if load < 0 {
			continue // it has not said (just started, or a version that does not): left out
		}
		replicas++
		total += load
		if load < least {
			target, least = id, load
		}
	}
	if target == "" {
		return
	}
	fair := (total + replicas - 1) / replicas
	if own <= fair+max(ShedSlack, fair/10) {
		return
	}
	n := min(own-fair, fair-least)
	moved := 0
	for _, a := range o.sess {
		if moved == n {
			break
		}
		if a.Alive() && a.Shed(target) {
			moved++
		}
	}
	if moved == 0 {
		return
	}
	o.shedPause = now.Add(o.cfg.LeaseTTL)
	o.log.Info("moving sessions to a less loaded replica", "to", target, "sessions", moved,
		slog.Group("load", "here", own, "there", least, "fair", fair))
}

// holdRebalanceLocked keeps rebalance from moving sessions for a lease TTL: a peer has just
// gone, its sessions are being claimed by whoever is quickest, and the loads the watch shows
// are those of the last renewals, not yet what each replica runs now. Moving on them sent
// sessions to a replica that had just taken over a dead peer's and back again (one cold
// start each) in the fault test.
func holdRebalanceLocked(o *Manager, now time.Time) {
	if until := now.Add(o.cfg.LeaseTTL); until.After(o.shedPause) {
		o.shedPause = until
	}
}

// HandOff rings to's doorbell for sk, with no delivery: to claims the session and reads its
// inbox from the cursor. seq is the last inbox event this replica's actor processed.
func (o *Manager) HandOff(sk events.SessionKey, to string, seq uint64) {
	if err := o.nc.Publish(events.AgentWakeSubject(to), events.WakeBody(sk, seq)); err != nil {
		// The session is free; its next delivery is claimed by whoever gets it.
		o.log.Debug("hand a session over", "session", sk.String(), "to", to, "err", err)
	}
}
