package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// FoundReceipt is a part's receipt as FindReceipt found it.
type FoundReceipt struct {
	// Receipt is the part's receipt, decoded; zero (OK false) when a plain receipt's body does
	// not decode: the stored message still counts as the part's delivery record.
	Receipt events.Receipt
	OK      bool
	// Msg is the stored message: the receipt, or the batch (events.ReceiptBatch) holding it.
	Msg *jetstream.RawStreamMsg
}

// FindReceipt finds the receipt (IM_SENT, stream handle sent) of part outID of chat k among the
// receipts stored at or after since (the part's own storage time less ReceiptSkew; zero: all
// of them). It looks where egress writes receipts and where earlier versions did:
//
//   - the chat's subject events.IMSentSubject(k), matched by events.HeaderOutID (or the
//     receipt's body): a part egress recorded alone;
//   - the subject of the part's receipt bucket, events.IMSentBatchSubject (when the out id has
//     one, events.ReceiptBucket), matched by one of the batch's HeaderOutID values: a part
//     recorded in a group commit with others of its bucket (issue 40);
//   - the part's own subject of the layout before issue 41 (events.IMSentPartSubject).
//
// It returns jetstream.ErrMsgNotFound when there is none.
//
// The answer decides whether to send, so "not found" is the stream leader's: each subject's
// search pages with batched direct gets (any replica answers, a lagging one with a prefix of the
// stream) and is complete only once it has reached the last message the leader holds on that
// subject (natsutil.ConsistentGetMsg); until then it scans on from where it stopped.
func FindReceipt(ctx context.Context, js jetstream.JetStream, sent jetstream.Stream, k events.SessionKey, outID string, since time.Time) (FoundReceipt, error) {
	found, err := FindOnSubject(ctx, js, sent, events.StreamIMSent, events.IMSentSubject(k), since, func(m *jetstream.RawStreamMsg) bool {
		return receiptFor(m) == outID
	})
	if err != nil {
		return FoundReceipt{}, fmt.Errorf("receipt of %s: %w", outID, err)
	}
	if found != nil {
		return decodeFound(found, outID), nil
	}
	if bucket, ok := events.ReceiptBucket(outID); ok {
		var f FoundReceipt
		_, err = FindOnSubject(ctx, js, sent, events.StreamIMSent, events.IMSentBatchSubject(bucket), since, func(m *jetstream.RawStreamMsg) bool {
			f = BatchedReceipt(m, k, outID)
			return f.OK
		})
		if err != nil {
			return FoundReceipt{}, fmt.Errorf("receipt of %s: %w", outID, err)
		}
		if f.OK {
			return f, nil
		}
	}
	m, err := natsutil.GetMsg(ctx, js, sent, natsutil.MsgQuery{LastFor: events.IMSentPartSubject(k, outID)})
	if err != nil {
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			err = fmt.Errorf("receipt of %s: %w", outID, err)
		}
		return FoundReceipt{}, err
	}
	return decodeFound(m, outID), nil
}

// decodeFound decodes the receipt of outID in m, a plain receipt or a batch.
func decodeFound(m *jetstream.RawStreamMsg, outID string) FoundReceipt {
	f := FoundReceipt{Msg: m}
	for _, r := range Receipts(m.Subject, m.Header, m.Data) {
		if r.OutID == outID {
			f.Receipt, f.OK = r, true
			break
		}
	}
	return f
}

// BatchedReceipt finds the receipt of part outID of chat k in m, a batch of receipts
// (events.ReceiptBatch) on a receipt bucket's subject: OK false when m has none. The headers
// say which parts m holds (one HeaderOutID value each), so only a batch that names outID is
// decoded, and its receipt counts only when it is for chat k.
func BatchedReceipt(m *jetstream.RawStreamMsg, k events.SessionKey, outID string) FoundReceipt {
	if !slices.Contains(m.Header.Values(events.HeaderOutID), outID) {
		return FoundReceipt{}
	}
	f := decodeFound(m, outID)
	if f.OK && f.Receipt.SessionKey() != k {
		return FoundReceipt{}
	}
	return f
}

// Receipts decodes an IM_SENT message: the receipt it is (events.Receipt), or the receipts it
// holds (events.ReceiptBatch), each with the message's correlation filled in as a plain
// receipt's would be. A message that decodes as neither gives none.
func Receipts(subject string, h nats.Header, data []byte) []events.Receipt {
	ev, err := events.DecodeMsg(&nats.Msg{Subject: subject, Header: h, Data: data})
	if err != nil {
		return nil
	}
	switch e := ev.(type) {
	case *events.Event[events.Receipt]:
		return []events.Receipt{e.Data}
	case *events.Event[events.ReceiptBatch]:
		return e.Data.Receipts
	}
	return nil
}

// FindOnSubject returns the first message of stream (named name) on subj stored at or after
// since (zero: all of them) for which match is true, or nil when there is none.
//
// "None" is the stream leader's answer: the search pages with batched direct gets (any
// replica answers, a lagging one with a prefix of the stream) and is complete only once it has
// reached the last message the leader holds on subj (natsutil.ConsistentGetMsg); until then it
// scans on from where it stopped, at most receiptScanRounds times.
func FindOnSubject(ctx context.Context, js jetstream.JetStream, st jetstream.Stream, name, subj string, since time.Time, match func(*jetstream.RawStreamMsg) bool) (*jetstream.RawStreamMsg, error) {
	var found *jetstream.RawStreamMsg
	var last uint64 // the last message on subj the search has seen
	scan := func(seq uint64, from time.Time) error {
		return Scan(ctx, js, name, subj, seq, from, func(m *jetstream.RawStreamMsg) bool {
			last = m.Sequence
			if match(m) {
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
		lead, lerr := natsutil.ConsistentGetMsg(ctx, js, st, natsutil.MsgQuery{LastFor: subj})
		if errors.Is(lerr, jetstream.ErrMsgNotFound) || lerr == nil && (lead.Sequence <= last || lead.Time.Before(since)) {
			break // the search saw every message the leader holds since then
		}
		if lerr != nil {
			return nil, lerr
		}
		if round >= receiptScanRounds {
			return nil, fmt.Errorf("replicas of %s lag behind the leader (seen %d, leader %d)", name, last, lead.Sequence)
		}
		if last == 0 {
			err = scan(0, since)
		} else {
			err = scan(last+1, time.Time{})
		}
	}
	if err != nil {
		return nil, err
	}
	return found, nil
}

// ToolResultSkew is how far before a call was requested FindToolResult's callers look for its
// result: the request's time is stamped by the caller's clock, the result's storage time by the
// TOOL_RESULTS leader's, and a re-request (a resumed turn, a redelivery) may come after an
// earlier attempt's result.
const ToolResultSkew = 10 * time.Minute

// FindToolResult finds the result (TOOL_RESULTS, stream handle results) of call callID of
// session k: on the session's subject events.ToolResultSubject(k) among the results stored at
// or after since (zero: all the stream holds), matched by events.HeaderCallID (or the result's
// body), or on the call's own subject of the layout before issue 41
// (events.ToolResultCallSubject). It returns jetstream.ErrMsgNotFound when there is none, as
// the stream leader knows it (FindOnSubject): the answer decides whether a tool runs.
func FindToolResult(ctx context.Context, js jetstream.JetStream, results jetstream.Stream, k events.SessionKey, callID string, since time.Time) (*jetstream.RawStreamMsg, error) {
	found, err := FindOnSubject(ctx, js, results, events.StreamToolResults, events.ToolResultSubject(k), since, func(m *jetstream.RawStreamMsg) bool {
		return ToolResultCallID(m.Header, m.Data) == callID
	})
	if err != nil || found != nil {
		if err != nil {
			err = fmt.Errorf("result of %s: %w", callID, err)
		}
		return found, err
	}
	m, err := natsutil.GetMsg(ctx, js, results, natsutil.MsgQuery{LastFor: events.ToolResultCallSubject(k, callID)})
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("result of %s: %w", callID, err)
	}
	return m, err
}

// ToolResultCallID is the call id a tool result answers: its HeaderCallID, or its body's.
func ToolResultCallID(h nats.Header, data []byte) string {
	if id := h.Get(events.HeaderCallID); id != "" {
		return id
	}
	var r events.Event[events.ToolResult]
	if events.UnmarshalMsg(&nats.Msg{Header: h, Data: data}, &r) != nil {
		return ""
	}
	return r.Data.CallID
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
