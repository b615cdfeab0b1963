package store

import (
	"errors"
	"fmt"
	"time"

	"github.com/agentbus/agentbus/internal/jsconflict"
)

var (
	// ErrNotFound: the session, lease or record does not exist.
	ErrNotFound = errors.New("store: not found")
	// ErrConflict: a read-modify-write lost the revision race more often than the retry bound.
	ErrConflict = errors.New("store: revision conflict, retries exhausted")
	// ErrLeaseHeld: another owner holds an unexpired lease on the session.
	ErrLeaseHeld = errors.New("store: lease held by another owner")
	// ErrLeaseLost: the lease's revision moved (it expired, was released or taken over); the
	// holder must stop acting for the session.
	ErrLeaseLost = errors.New("store: lease lost")
	// ErrStaleWriter: a fenced append expected a last sequence the session's context log no longer
	// has; nothing was written. The writer must reload (and usually re-check its lease).
	ErrStaleWriter = errors.New("store: stale writer, context log moved")
	// ErrFenced is ErrStaleWriter under the name the design uses for fencing.
	ErrFenced = ErrStaleWriter
	// ErrInvalid: bad input (wrapped with the reason).
	ErrInvalid = errors.New("store: invalid argument")
	// ErrTooLarge: a record exceeds the server's max payload (wrapped with the sizes).
	ErrTooLarge = errors.New("store: record too large")
)

// HeldError is the ErrLeaseHeld of Leases.Acquire: it names the owner that holds the lease, so
// the caller can hand the session's work to it. errors.Is(err, ErrLeaseHeld) matches it.
type HeldError struct {
	Key   string // session key
	Owner string
	// Epoch is the owner's worker epoch for a session claim (0 for a per-session TTL lease).
	Epoch uint64
	// RenewedAgo is how long before the acquire attempt the holder last renewed (holder's clock).
	RenewedAgo time.Duration
	TTL        time.Duration
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("store: acquire lease %s: held by %q (renewed %s ago, ttl %s)", e.Key, e.Owner, e.RenewedAgo.Round(time.Millisecond), e.TTL)
}

// Is makes errors.Is(err, ErrLeaseHeld) true.
func (e *HeldError) Is(target error) bool { return target == ErrLeaseHeld }

// isWrongLastSeq reports a lost compare-and-set (a failed expected-last-(subject-)sequence
// check or KV revision check), on single-server and replicated streams alike.
func isWrongLastSeq(err error) bool { return jsconflict.Is(err) }
