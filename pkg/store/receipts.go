package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil"
)

// ReceiptSkew is how far before a part's own storage time FindReceipt looks for its receipt:
// the part (IM_OUT) and its receipt (IM_SENT) are stamped by different stream leaders, whose
// clocks may differ.
const ReceiptSkew = time.Minute

// receiptScanRounds bounds how often FindReceipt scans again while a lagging replica answers.
const receiptScanRounds = 5

// FindReceipt finds the receipt (IM_SENT, stream handle sent) of part outID of chat k: on the
// chat's subject events.IMSentSubject(k) among the receipts stored at or after since (the
// part's own storage time less ReceiptSkew; zero: all of them), matched by events.HeaderOutID
// (or the receipt's body), or on the part's own subject of the layout before issue 41
// (events.IMSentPartSubject). It returns jetstream.ErrMsgNotFound when there is none.
//
// The answer decides whether to send, so "not found" is the stream leader's: the search pages
// with batched direct gets (any replica answers, a lagging one with a prefix of the stream) and
// is complete only once it has reached the last receipt the leader holds on the chat's subject
// (natsutil.ConsistentGetMsg); until then it scans on from where it stopped.
func FindReceipt(ctx context.Context, js jetstream.JetStream, sent jetstream.Stream, k events.SessionKey, outID string, since time.Time) (*jetstream.RawStreamMsg, error) {
	subj := events.IMSentSubject(k)
	var found *jetstream.RawStreamMsg
	var last uint64 // the last receipt on subj the search has seen
	scan := func(seq uint64, from time.Time) error {
		return Scan(ctx, js, events.StreamIMSent, subj, seq, from, func(m *jetstream.RawStreamMsg) bool {
			last = m.Sequence
			if receiptFor(m) == outID {
				found = m
				return false
			}
			return true
		})
	}
	if since.IsZero() {
		since = time.Unix(0, 1) // from the first message
	}
	err := scan(0, since)
	for round := 1; err == nil && found == nil; round++ {
		lead, lerr := natsutil.ConsistentGetMsg(ctx, js, sent, natsutil.MsgQuery{LastFor: subj})
		if errors.Is(lerr, jetstream.ErrMsgNotFound) || lerr == nil && (lead.Sequence <= last || lead.Time.Before(since)) {
			break // the search saw every receipt the leader holds since then
		}
		if lerr != nil {
			return nil, fmt.Errorf("receipt of %s: %w", outID, lerr)
		}
		if round >= receiptScanRounds {
			return nil, fmt.Errorf("receipt of %s: replicas lag behind the leader (seen %d, leader %d)", outID, last, lead.Sequence)
		}
		if last == 0 {
			err = scan(0, since)
		} else {
			err = scan(last+1, time.Time{})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("receipt of %s: %w", outID, err)
	}
	if found != nil {
		return found, nil
	}
	m, err := natsutil.GetMsg(ctx, js, sent, natsutil.MsgQuery{LastFor: events.IMSentPartSubject(k, outID)})
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("receipt of %s: %w", outID, err)
	}
	return m, err
}

// receiptFor is the out id a stored receipt records: its HeaderOutID, or its body's.
func receiptFor(m *jetstream.RawStreamMsg) string {
	if id := m.Header.Get(events.HeaderOutID); id != "" {
		return id
	}
	var r events.Event[events.Receipt]
	if events.UnmarshalMsg(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}, &r) != nil {
		return ""
	}
	return r.Data.OutID
}
