// Package ownership decides which turn-worker replica runs each chat session (DESIGN.md §4):
// the replica's worker lease and its epoch, the per-session claims, the doorbell that hands
// deliveries to a session's owner, the probes that find a dead peer, rebalancing, and the fence
// that holds context commits while the lease is being recovered. It runs no session itself:
// it calls back through Sessions.Adopt to start one, and through the Session it got back.
//
// Every replica holds one liveness lease, KV leases key worker.<id> (store.Leases
// AcquireWorker): a TTL lease renewed every LeaseTTL/3 whatever the number of sessions the
// replica owns; the revision at which it was acquired is the replica's epoch. A session is
// owned through a claim, KV leases key <sk> = {owner, epoch} (store.Leases.Claim), written once
// when the session's actor starts and purged when it stops, never renewed: it is in force while
// the owner's worker lease lives with that epoch. A claim whose owner's lease has expired or
// carries another epoch is stale and is taken over by a CAS on its revision, which is the
// session's fencing token. Lease work per turn therefore does not grow with the sessions held.
// Correctness stays with the fenced writes: context commits expect the last sequence the
// actor knows, so an owner that lost its lease cannot commit stale state.
//
// Every replica consumes the shared durable consumer on SESSION_IN. A delivery is only a
// wake-up: the owner runs the session's actor, and the actor reads the session's inbox subject
// itself, in stream order, from the cursor kept in the session record (KV sessions). Order
// therefore comes from the log, not from delivery. The actor also hears its inbox subject as
// core NATS messages, so it reads a new event the moment it is published, whichever replica
// its delivery goes to; that copy decides nothing (a "not found" after it waits for the
// delivery, read from the leader), the delivery is held and acked as always.
//
// Affinity without bounce. A replica that gets a delivery for a session another replica owns
// rings the owner's doorbell (agent.wake.<owner>, one core NATS message with the session, the
// sequence and the delivery's ack subject; the deliveries queued for one owner meanwhile go in
// the same ring). The owner holds the delivery from then on: it sends its in-progress acks and
// acks it once its cursor has passed it and no open turn depends on it, and its actor reads the
// event from the log at once, if it has not already (it hears its inbox subject). Nothing waits
// for an answer; a ring that is lost leaves the delivery unacked, so it comes back after
// AckWait. No event waits for a redelivery or a NAK delay to reach the owner, however many
// replicas share the consumer. A replica remembers which replica owns a session for as long as
// that replica's worker lease (same epoch) lives, so a foreign delivery costs one ring (or a
// share of one) and no KV round trip. A ring for a session the replica no longer runs makes it
// claim the session and send the ringer a notice to forget the hint.
//
// Takeover. A killed process's connection closes at once, and with it its doorbell
// subscription: a request on agent.wake.<id> gets "no responders" from the server long before
// the process's lease would expire. Every replica probes its peers' doorbells every 200 ms
// (peers.go; a suspected peer every 50 ms); a peer silent for 400 ms is taken for dead: its worker lease is revoked
// (store.Leases.RevokeWorker) and the sessions it claimed (store.Leases.ClaimsOf, listed while
// the revocation is under way) are claimed at once, 128 at a time, whose actors (64 starting at a time, starts.go) read
// the inbox from the cursor and resume the open turns. Nothing waits for the dead replica's lease TTL or for its deliveries to come back
// after AckWait (they come later, with those of the rings it never read, and are acked by the
// new owner). The lease TTL and the redelivery remain the fallbacks: a claim whose owner's
// lease has ended is stale for every replica, and a delivery that comes back is claimed as any
// other.
//
// The view of the worker leases (which peers live, at which epoch, with how many sessions) is
// read afresh every 5 s or so (claim.go, viewInterval), not watched renewal by renewal: a watch
// cost every replica a delivery per renewal of every peer, N² in all. What needs certainty (a
// claim's liveness check) asks the stream leader whenever the view does not show the owner live.
//
// Lapsed leases. A renewal that cannot reach the bus (a NATS node failing over) does not stop
// the actors: they keep their sessions, and context commits wait (awaitFence) until the lease
// is back, renewed at its old revision or acquired again with the same epoch
// (store.Leases.ReacquireWorker). In the second case every claim is confirmed by a CAS on its
// token first (store.Leases.ConfirmClaim): the sessions another replica took meanwhile are
// dropped, the others go on with the same actor. A replica revoked by mistake (its doorbell
// had no responders while it reconnected) recovers the same way.
package ownership
