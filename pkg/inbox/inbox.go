// Package inbox writes and reads session inboxes (SESSION_IN, one subject agent.in.<sk> per
// session) as chains, so that finding a session's next event costs the server a constant
// amount of work however many other sessions share the stream.
//
// The problem it solves: a session actor reads its inbox in sequence order from a cursor. The
// plain way, a direct get of the first message on the subject at or after cursor+1, makes
// nats-server's file store walk and decode every message between the cursor and the next
// event of that subject; with S sessions taking turns that is about S messages per read, so
// the read's cost grows with the sessions the server holds (at 2,000 sessions it was 11 % of
// the whole pipeline's CPU, and its decoded subjects were the largest source of garbage).
//
// The chain: every inbox event agentbus publishes carries Nats-Expected-Last-Subject-Sequence,
// the sequence of the event stored before it on the same subject (0: none). The server stores
// the event only if that is true at the moment of storing, and keeps the header, so a stored
// event's header is the server's own statement of its predecessor: nobody can forge it, a
// publisher that guessed wrong was refused. A reader then finds the event after its cursor
// from the subject's last event (one direct get the server answers from its per-subject index)
// by following predecessors back, normally zero steps. Events without the header (published
// by a third party, or fired by a schedule) and predecessors the stream's limits removed make
// the reader fall back to the plain get, so the chain is a fast path, never a condition of
// correctness.
package inbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/internal/jsconflict"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil"
)

// expectedSubjectHeader lets a publisher check another subject's last sequence instead of its
// own; an event carrying it says nothing about its own subject's predecessor.
const expectedSubjectHeader = "Nats-Expected-Last-Subject-Sequence-Subject"

// Prev returns the sequence of the event the server stored before the event with headers h on
// the same subject (0: it was the first), and false when h holds no such statement.
func Prev(h nats.Header) (uint64, bool) {
	v := h[jetstream.ExpectedLastSubjSeqHeader]
	if len(v) != 1 || len(h[expectedSubjectHeader]) != 0 {
		return 0, false
	}
	seq, err := strconv.ParseUint(v[0], 10, 64)
	if err != nil {
		return 0, false
	}
	return seq, true
}

// maxTries bounds the chained attempts of one Publish; after them the event goes out unchained.
const maxTries = 8

// cacheMax bounds the subjects a Publisher remembers (one uint64 and a key each).
const cacheMax = 1 << 16

// Publisher publishes inbox events with the chain header. It remembers the last sequence it
// stored on each subject, so a process that is the only writer of a session's inbox (the
// common case: the ingest replica its messages arrive at) needs no read before a publish.
// When another writer got in between, the server refuses the publish; the Publisher then asks
// the stream leader for the subject's last sequence and tries again.
//
// A Publisher is safe for concurrent use.
type Publisher struct {
	js jetstream.JetStream

	mu     sync.Mutex
	stream jetstream.Stream // SESSION_IN, opened on first need
	last   map[string]uint64
}

// NewPublisher returns a Publisher that publishes through js (for example one made by
// natsutil.FastPublish).
func NewPublisher(js jetstream.JetStream) *Publisher {
	return &Publisher{js: js, last: map[string]uint64{}}
}

// Publish stores m, an inbox event on its session's subject, with the chain header, and
// returns the stream's ack. The header in m is overwritten. If the chain cannot be kept (the
// subject is written by others faster than the Publisher can follow, or the stream's last
// sequence cannot be read), m is published without it rather than not at all: readers fall
// back to the plain read for such an event. Errors are the bus's (the publish failed).
//
// A repeat of an event already stored (same Nats-Msg-Id within the stream's duplicate window)
// is acknowledged as a duplicate and not stored again, chained or not.
func (p *Publisher) Publish(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error) {
	subj := m.Subject
	prev, known := p.cached(subj)
	var err error
	if !known {
		if prev, err = p.lastSeq(ctx, subj, false); err != nil {
			return p.unchained(ctx, m)
		}
	}
	wait := time.Millisecond
	for try := 1; ; try++ {
		natsutil.ExpectLastSubjectSeq(m, prev)
		ack, err := p.js.PublishMsg(ctx, m)
		if err == nil {
			p.remember(subj, ack)
			return ack, nil
		}
		p.forget(subj)
		if !jsconflict.Is(err) {
			return nil, err
		}
		if try == maxTries {
			return p.unchained(ctx, m)
		}
		if last, ok := lastFromRefusal(err); ok {
			// The refusal names the subject's last sequence as the checking server (the
			// leader) had it: another writer's event, typically another ingest replica's
			// when a load balancer alternates between them. Try again on it, no read.
			prev = last
			continue
		}
		if try > 1 {
			// A replicated stream refuses every expectation on a subject while another write
			// to it is in flight: give that write time to land.
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			case <-t.C:
			}
			wait = min(2*wait, 50*time.Millisecond)
		}
		if prev, err = p.lastSeq(ctx, subj, true); err != nil {
			return p.unchained(ctx, m)
		}
	}
}

// lastFromRefusal reads the subject's last sequence from a refused expectation: the server
// answers a stale one with error 10071, "wrong last sequence: <seq>", on one server and on a
// cluster's stream leader alike. A refusal while another write to the subject is in flight
// (10164, replicated streams) names none.
func lastFromRefusal(err error) (uint64, bool) {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		return 0, false
	}
	v, ok := strings.CutPrefix(apiErr.Description, "wrong last sequence: ")
	if !ok {
		return 0, false
	}
	seq, err := strconv.ParseUint(v, 10, 64)
	return seq, err == nil
}

// unchained publishes m without the chain header.
func (p *Publisher) unchained(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error) {
	if m.Header != nil {
		delete(m.Header, jetstream.ExpectedLastSubjSeqHeader)
	}
	p.forget(m.Subject)
	return p.js.PublishMsg(ctx, m)
}

// lastSeq reads the sequence of subj's last event (0: none). leader asks the stream leader,
// after a refused publish; a replica's older answer only costs one refused publish.
func (p *Publisher) lastSeq(ctx context.Context, subj string, leader bool) (uint64, error) {
	s, err := p.inbox(ctx)
	if err != nil {
		return 0, err
	}
	q := natsutil.MsgQuery{LastFor: subj}
	var raw *jetstream.RawStreamMsg
	if leader {
		raw, err = natsutil.ConsistentGetMsg(ctx, p.js, s, q)
	} else {
		raw, err = s.GetLastMsgForSubject(ctx, subj)
	}
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("read the last event of %s: %w", subj, err)
	}
	return raw.Sequence, nil
}

func (p *Publisher) inbox(ctx context.Context) (jetstream.Stream, error) {
	p.mu.Lock()
	s := p.stream
	p.mu.Unlock()
	if s != nil {
		return s, nil
	}
	s, err := natsutil.Stream(ctx, p.js, events.StreamSessionIn)
	if err != nil {
		return nil, fmt.Errorf("open stream %s: %w", events.StreamSessionIn, err)
	}
	p.mu.Lock()
	p.stream = s
	p.mu.Unlock()
	return s, nil
}

func (p *Publisher) cached(subj string) (uint64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	seq, ok := p.last[subj]
	return seq, ok
}

// remember records a stored event's sequence as subj's last. A duplicate's sequence is the
// original's, which may not be the last any more.
func (p *Publisher) remember(subj string, ack *jetstream.PubAck) {
	if ack.Duplicate {
		p.forget(subj)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.last[subj]; !ok && len(p.last) >= cacheMax {
		for k := range p.last { // an arbitrary one: a miss costs one read
			delete(p.last, k)
			break
		}
	}
	// Two publishes of this process to one subject may be acked out of order.
	p.last[subj] = max(p.last[subj], ack.Sequence)
}

func (p *Publisher) forget(subj string) {
	p.mu.Lock()
	delete(p.last, subj)
	p.mu.Unlock()
}
