package inbox

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/natsutil"
)

// maxWalk bounds how many predecessors Next follows before it asks the plain way: a backlog
// that long is read once by the scan the chain avoids, not walked again for every event.
const maxWalk = 16

// Next returns the first event on subj after sequence from, in the stream s (SESSION_IN), or
// jetstream.ErrMsgNotFound when there is none.
//
// confirmed says what a "none" may rest on. With confirmed, the answer reflects every write
// the stream has acknowledged (reads that could be answered by a lagging replica are
// confirmed with the stream leader, as natsutil.GetMsg does); without, any replica may answer,
// so "none" may be stale (use it to look for something new, not to decide that an event
// is gone). An event Next does return is always the right one: a replica holds a prefix of
// the stream, and the chain is the same on every replica.
func Next(ctx context.Context, js jetstream.JetStream, s jetstream.Stream, subj string, from uint64, confirmed bool) (*jetstream.RawStreamMsg, error) {
	m, err := s.GetLastMsgForSubject(ctx, subj)
	if confirmed && (errors.Is(err, jetstream.ErrMsgNotFound) || err == nil && m.Sequence <= from) {
		m, err = natsutil.ConsistentGetMsg(ctx, js, s, natsutil.MsgQuery{LastFor: subj})
	}
	if err != nil {
		return nil, err
	}
	if m.Sequence <= from {
		return nil, jetstream.ErrMsgNotFound
	}
	for range maxWalk {
		prev, ok := Prev(m.Header)
		if !ok {
			break
		}
		if prev <= from {
			return m, nil // nothing was stored on subj between from and m
		}
		// The predecessor exists unless the stream's limits removed it: a "not found" from a
		// replica is confirmed with the leader, and a confirmed one sends the read the plain way.
		p, err := natsutil.GetMsg(ctx, js, s, natsutil.MsgQuery{Seq: prev})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, err
		}
		if p.Subject != subj { // cannot happen for a server-checked header; never trust it then
			break
		}
		m = p
	}
	q := natsutil.MsgQuery{Seq: from + 1, NextFor: subj}
	if confirmed {
		return natsutil.GetMsg(ctx, js, s, q)
	}
	return s.GetMsg(ctx, q.Seq, jetstream.WithGetMsgSubject(q.NextFor))
}
