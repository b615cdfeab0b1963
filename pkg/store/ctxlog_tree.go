package store

import (
	"context"
	"fmt"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
)

// Leaf is a move of the active leaf of a session's message tree (events.CtxLeaf): the context
// continues after record LeafSeq; the records after it that precede the move are a branch left
// behind, still in the log, no longer loaded, represented by BranchSummary when there is one.
//
// The tree lives in the log itself, so that moving the leaf is one fenced record, ordered with
// every commit: a turn that loaded the context before the move commits after it, on the new
// branch, and a reader sees either the old branch or the new one, never a mix. The session
// record's ActiveLeaf mirrors the latest move for display.
type Leaf struct {
	LeafSeq              uint64
	BranchFrom, BranchTo uint64
	BranchSummary        string
	Model                string
	// Messages of a branch made active again (events.CtxLeaf.Messages).
	Messages []llm.Message
	// Seq and Time are set on load: where the move is.
	Seq  uint64
	Time time.Time
}

// BranchSummaryPrefix starts the message a branch summary is loaded as.
const BranchSummaryPrefix = "[summary of a branch of this conversation that was left]\n"

func leafOf(d events.CtxLeaf, seq uint64, t time.Time) *Leaf {
	return &Leaf{LeafSeq: d.LeafSeq, BranchFrom: d.BranchFrom, BranchTo: d.BranchTo, BranchSummary: d.BranchSummary, Model: d.Model,
		Messages: d.Messages, Seq: seq, Time: t}
}

// moveLeaf drops the messages of records after the leaf and loads the branch summary in their
// place, as a user message of the move's own record, followed by the messages of a branch made
// active again.
func (st *ctxState) moveLeaf(l *Leaf) {
	k := 0
	for k < len(st.seqs) && st.seqs[k] <= l.LeafSeq {
		k++
	}
	// Fresh slices: views handed out earlier (LoadContextAt) must not see the cut tail reused.
	st.msgs = append([]llm.Message(nil), st.msgs[:k]...)
	st.seqs = append([]uint64(nil), st.seqs[:k]...)
	st.times = append([]int64(nil), st.times[:k]...)
	st.dropped = 0
	if l.BranchSummary != "" {
		ms := l.Time.UnixMilli()
		st.msgs = append(st.msgs, llm.UserText(BranchSummaryPrefix+l.BranchSummary, ms))
		st.seqs = append(st.seqs, l.Seq)
		st.times = append(st.times, ms)
	}
	st.appendMsgs(l.Messages, l.Seq, l.Time.UnixMilli())
}

// AppendLeaf moves the session id's active leaf to the record l.LeafSeq, fenced like
// AppendMessages. LeafSeq must be a record after the latest summary's anchor (the summary
// already stands for what is before it) and at most expectedLastSeq. The records after the move
// carry no running message count (the count would no longer be monotonic), so cold loads of
// this epoch read from the latest summary's anchor instead of searching by count.
func (l *ContextLog) AppendLeaf(ctx context.Context, id events.SessionID, expectedLastSeq uint64, lf Leaf, opts ...AppendOption) (uint64, error) {
	if err := checkID(id); err != nil {
		return 0, err
	}
	if lf.LeafSeq == 0 || lf.LeafSeq > expectedLastSeq {
		return 0, fmt.Errorf("%w: leaf %d must be in 1..%d (the log's last sequence)", ErrInvalid, lf.LeafSeq, expectedLastSeq)
	}
	var o appendOpts
	for _, f := range opts {
		f(&o)
	}
	subj := events.AgentCtxSubject(id)
	p, err := l.pointerAt(ctx, subj, expectedLastSeq)
	if err != nil {
		return 0, fmt.Errorf("move leaf of %s at %d: %w", id, expectedLastSeq, err)
	}
	if p.summarySeq > 0 && lf.LeafSeq <= p.anchorSeq {
		return 0, fmt.Errorf("%w: leaf %d is inside the summary (anchor %d)", ErrInvalid, lf.LeafSeq, p.anchorSeq)
	}
	p.counted, p.total = false, 0
	ev := events.New(events.CtxLeaf{LeafSeq: lf.LeafSeq, BranchFrom: lf.BranchFrom, BranchTo: lf.BranchTo, BranchSummary: lf.BranchSummary, Model: lf.Model,
		Messages: lf.Messages},
		events.WithSession(id.String()), events.WithTurn(o.turn), events.WithTrace(o.trace))
	seq, err := l.publish(ctx, id, expectedLastSeq, ev, p, false, o, func(st *ctxState, seq uint64) {
		c := lf
		c.Seq, c.Time = seq, l.now()
		st.moveLeaf(&c)
	})
	if err != nil {
		return 0, fmt.Errorf("move leaf of %s at %d: %w", id, expectedLastSeq, err)
	}
	return seq, nil
}
