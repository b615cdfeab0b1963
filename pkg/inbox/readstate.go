package inbox

import (
	"github.com/nats-io/nats.go/jetstream"
)

// ReadState is what a session's reader knows of its inbox besides the log: the deliveries it
// holds (it owes each an ack, or a NAK when it stops), the sequences another replica rang its
// doorbell for (their deliveries are held there), and its cursor, how far it has read. A
// delivery is acked once the cursor has passed it and nothing needs it any more (AckPassed).
//
// A ReadState is not safe for concurrent use. Its owner guards it with its own lock, the one
// that also guards what may still need a delivery (pkg/turn: actor.mu, with the session's
// running and queued turns), because the check that nothing needs a delivery and its ack
// must be one step.
type ReadState struct {
	held   map[uint64][]jetstream.Msg // by stream sequence; nil once closed
	known  map[uint64]struct{}        // sequences past the cursor rung without a delivery
	cursor uint64
}

// NewReadState returns an open ReadState with its cursor at 0.
func NewReadState() *ReadState {
	return &ReadState{held: map[uint64][]jetstream.Msg{}, known: map[uint64]struct{}{}}
}

// Cursor is how far the inbox is read.
func (r *ReadState) Cursor() uint64 { return r.cursor }

// Pass moves the cursor to seq, unless it is past it already.
func (r *ReadState) Pass(seq uint64) { r.cursor = max(r.cursor, seq) }

// Hold keeps delivery m of inbox event seq until AckPassed acks it or Close hands it back;
// false once closed (the caller hands it back itself).
func (r *ReadState) Hold(seq uint64, m jetstream.Msg) bool {
	if r.held == nil {
		return false
	}
	r.held[seq] = append(r.held[seq], m)
	return true
}

// Know notes that inbox event seq is in the log although its delivery is held elsewhere;
// false (nothing noted) once closed or when the cursor has passed seq.
func (r *ReadState) Know(seq uint64) bool {
	if r.held == nil || seq <= r.cursor {
		return false
	}
	r.known[seq] = struct{}{}
	return true
}

// Behind reports whether an event past the cursor is known to exist: a held delivery or a
// rung sequence past it. Rung sequences the cursor has passed are forgotten.
func (r *ReadState) Behind() bool {
	for seq := range r.held {
		if seq > r.cursor {
			return true
		}
	}
	for seq := range r.known {
		if seq > r.cursor {
			return true
		}
		delete(r.known, seq)
	}
	return false
}

// ForgetKnown forgets every rung sequence (the log had none of them: the replica that holds
// their deliveries brings them back).
func (r *ReadState) ForgetKnown() { clear(r.known) }

// Between returns the held delivery with the smallest sequence in (from, limit) that carries
// its event (a delivery handed over by a doorbell ring carries no copy).
func (r *ReadState) Between(from, limit uint64) (uint64, jetstream.Msg, bool) {
	var best uint64
	for seq, msgs := range r.held {
		if seq <= from || seq >= limit || best != 0 && seq > best {
			continue
		}
		for _, m := range msgs {
			if m.Data() != nil {
				best = seq
				break
			}
		}
	}
	if best == 0 {
		return 0, nil, false
	}
	for _, m := range r.held[best] {
		if m.Data() != nil {
			return best, m, true
		}
	}
	return 0, nil, false
}

// Empty reports whether nothing is held or known.
func (r *ReadState) Empty() bool { return len(r.held) == 0 && len(r.known) == 0 }

// AckPassed calls ack for every held delivery the cursor has passed and needed does not
// claim, and forgets it.
func (r *ReadState) AckPassed(needed func(seq uint64) bool, ack func(jetstream.Msg)) {
	for seq, msgs := range r.held {
		if seq > r.cursor || needed(seq) {
			continue
		}
		for _, m := range msgs {
			ack(m)
		}
		delete(r.held, seq)
	}
}

// Close returns every delivery still held and holds none from now on.
func (r *ReadState) Close() map[uint64][]jetstream.Msg {
	held := r.held
	r.held = nil
	return held
}
