package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
)

// Headers that make LoadContext cheap. Every record on agent.ctx.<sk>.<epoch> carries the
// sequence of the latest summary record before it and that summary's anchor, so a load reads the
// subject's last record, then exactly the records after the anchor: no scan from the start.
const (
	HeaderCtxSummarySeq = "Agentbus-Ctx-Summary-Seq"
	HeaderCtxAnchorSeq  = "Agentbus-Ctx-Anchor-Seq"
)

// ContextBounds are the cold-start bounds of LoadContext (ai.sessions.coldStartMaxMessages /
// coldStartMaxAgeMs). Zero means unbounded.
type ContextBounds struct {
	MaxMessages int
	MaxAge      time.Duration
}

// Summary is a compaction summary (seed agent_summaries): it stands for every message in the
// records up to and including AnchorSeq.
type Summary struct {
	Text string
	// AnchorSeq is the AGENT_CTX sequence of the last record the summary covers (the seed's
	// anchor_message_id). Messages in later records are the tail LoadContext returns with it.
	AnchorSeq uint64
	// Covered counts the messages the summary replaces (informational).
	Covered int
	// Model that wrote the summary.
	Model string
	// Seq and Time are set on load: where the summary record is.
	Seq  uint64
	Time time.Time
}

// Loaded is what the model sees next turn, and where the log stood when it was read.
type Loaded struct {
	Summary  *Summary
	Messages []llm.Message
	// Seqs[i] is the AGENT_CTX sequence of the record holding Messages[i] (pick summary anchors
	// from these).
	Seqs []uint64
	// LastSeq is the session subject's last sequence (0 = empty log): pass it as the
	// expectedLastSeq of the next append.
	LastSeq uint64
}

// AppendOption adjusts one append.
type AppendOption func(*appendOpts)

type appendOpts struct {
	msgID, turn, trace string
}

// WithMsgID sets the Nats-Msg-Id of the record (e.g. "<turn>:commit"): a retried append of the
// same commit returns the original sequence instead of failing as stale, as long as nothing was
// appended after it (then the retry is stale and a reload shows the commit).
func WithMsgID(id string) AppendOption { return func(o *appendOpts) { o.msgID = id } }

// WithTurn and WithTrace set the record's correlation ids.
func WithTurn(turn string) AppendOption   { return func(o *appendOpts) { o.turn = turn } }
func WithTrace(trace string) AppendOption { return func(o *appendOpts) { o.trace = trace } }

// ContextLog is the context repository on AGENT_CTX (seed ADR D4: loadContext /
// appendMessages), one subject per session id.
//
// Atomicity: a commit is ONE stream message holding the whole batch (events.CtxMessages), not
// an atomic multi-message batch. One message is atomic by construction, fenced by one
// expected-last-subject-sequence check, costs one round trip, and needs no AllowAtomicPublish;
// the price is the max payload (1 MB by default) per commit, which holds any text turn, and
// images travel by object-store reference anyway. An oversized commit fails with ErrTooLarge
// and writes nothing.
type ContextLog struct {
	js       jetstream.JetStream
	stream   jetstream.Stream
	bounds   ContextBounds
	now      func() time.Time
	maxBytes int64

	mu  sync.Mutex
	ptr map[string]ctxPointer // subject -> summary pointer as of lastSeq
}

type ctxPointer struct {
	lastSeq, summarySeq, anchorSeq uint64
}

const ptrCacheMax = 8192

// NewContextLog binds the provisioned AGENT_CTX stream (it must allow direct gets).
func NewContextLog(ctx context.Context, js jetstream.JetStream, bounds ContextBounds) (*ContextLog, error) {
	st, err := js.Stream(ctx, streamAgentCtx)
	if err != nil {
		return nil, fmt.Errorf("open stream %s: %w", streamAgentCtx, err)
	}
	if !st.CachedInfo().Config.AllowDirect {
		return nil, fmt.Errorf("stream %s: AllowDirect is required for LoadContext", streamAgentCtx)
	}
	return &ContextLog{js: js, stream: st, bounds: bounds, now: time.Now, maxBytes: js.Conn().MaxPayload(), ptr: map[string]ctxPointer{}}, nil
}

func checkID(id events.SessionID) error {
	if err := id.Key.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if id.Epoch == 0 {
		return fmt.Errorf("%w: session id %s has no epoch", ErrInvalid, id)
	}
	return nil
}

func hdrUint(h nats.Header, k string) uint64 {
	v, _ := strconv.ParseUint(h.Get(k), 10, 64)
	return v
}

// pointerOf reads the summary pointer a record establishes for the records after it.
func pointerOf(m *jetstream.RawStreamMsg) ctxPointer {
	p := ctxPointer{lastSeq: m.Sequence, summarySeq: hdrUint(m.Header, HeaderCtxSummarySeq), anchorSeq: hdrUint(m.Header, HeaderCtxAnchorSeq)}
	if m.Header.Get(events.HeaderType) == events.TypeCtxSummary {
		p.summarySeq = m.Sequence
	}
	return p
}

func (l *ContextLog) remember(subj string, p ctxPointer) {
	l.mu.Lock()
	if len(l.ptr) >= ptrCacheMax {
		clear(l.ptr) // crude bound; a miss costs one direct get
	}
	l.ptr[subj] = p
	l.mu.Unlock()
}

// LoadContext returns the latest summary and the messages after its anchor, bounded by the
// cold-start bounds (the newest MaxMessages, none older than MaxAge; the summary is kept however
// old), and LastSeq for fencing the next append. Leading toolResult messages whose tool call fell
// outside the bounds are dropped, so the tail never starts mid tool exchange. An empty log is
// an empty Loaded with LastSeq 0.
//
// Cost: one direct get of the subject's last record, then one batched direct get of the records
// after the summary's anchor (or, without a summary, from MaxAge ago).
func (l *ContextLog) LoadContext(ctx context.Context, id events.SessionID) (Loaded, error) {
	if err := checkID(id); err != nil {
		return Loaded{}, err
	}
	subj := events.AgentCtxSubject(id)
	last, err := l.stream.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Loaded{}, nil
	}
	if err != nil {
		return Loaded{}, fmt.Errorf("load context %s: %w", id, err)
	}
	p := pointerOf(last)
	l.remember(subj, p)

	now := l.now()
	var cutoff int64 // Unix ms; messages older are outside the bounds
	if l.bounds.MaxAge > 0 {
		cutoff = now.Add(-l.bounds.MaxAge).UnixMilli()
	}
	var recs []*jetstream.RawStreamMsg
	switch {
	case p.summarySeq > 0 && p.anchorSeq+1 >= last.Sequence:
		recs = []*jetstream.RawStreamMsg{last}
	case p.summarySeq > 0:
		recs, err = l.readRange(ctx, subj, p.anchorSeq+1, time.Time{}, last.Sequence)
	case cutoff > 0:
		if last.Time.UnixMilli() < cutoff {
			return Loaded{LastSeq: last.Sequence}, nil // everything is older than the bound
		}
		recs, err = l.readRange(ctx, subj, 0, time.UnixMilli(cutoff), last.Sequence)
	case last.Sequence == 1:
		recs = []*jetstream.RawStreamMsg{last}
	default:
		recs, err = l.readRange(ctx, subj, 1, time.Time{}, last.Sequence)
	}
	if err != nil {
		return Loaded{}, fmt.Errorf("load context %s: %w", id, err)
	}
	out := Loaded{LastSeq: last.Sequence}
	for _, r := range recs {
		switch typ := r.Header.Get(events.HeaderType); typ {
		case events.TypeCtxMessages:
			var ev events.Event[events.CtxMessages]
			if err := events.Unmarshal(r.Data, &ev); err != nil {
				return Loaded{}, fmt.Errorf("load context %s: record %d: %w", id, r.Sequence, err)
			}
			for _, m := range ev.Data.Messages {
				ts := m.Timestamp
				if ts == 0 {
					ts = r.Time.UnixMilli()
				}
				if cutoff > 0 && ts < cutoff {
					continue
				}
				out.Messages = append(out.Messages, m)
				out.Seqs = append(out.Seqs, r.Sequence)
			}
		case events.TypeCtxSummary:
			var ev events.Event[events.CtxSummary]
			if err := events.Unmarshal(r.Data, &ev); err != nil {
				return Loaded{}, fmt.Errorf("load context %s: record %d: %w", id, r.Sequence, err)
			}
			out.Summary = &Summary{Text: ev.Data.Summary, AnchorSeq: ev.Data.AnchorSeq, Covered: ev.Data.Covered,
				Model: ev.Data.Model, Seq: r.Sequence, Time: r.Time}
			// Messages the summary covers are gone from the tail.
			k := 0
			for k < len(out.Seqs) && out.Seqs[k] <= ev.Data.AnchorSeq {
				k++
			}
			out.Messages, out.Seqs = out.Messages[k:], out.Seqs[k:]
		default:
			return Loaded{}, fmt.Errorf("load context %s: record %d has unknown type %q", id, r.Sequence, typ)
		}
	}
	if n := l.bounds.MaxMessages; n > 0 && len(out.Messages) > n {
		out.Messages, out.Seqs = out.Messages[len(out.Messages)-n:], out.Seqs[len(out.Seqs)-n:]
	}
	k := 0
	for k < len(out.Messages) && out.Messages[k].Role == llm.RoleToolResult {
		k++
	}
	out.Messages, out.Seqs = out.Messages[k:], out.Seqs[k:]
	return out, nil
}

const readPage = 512

// readRange reads the subject's records from seq (or from time when seq is 0) up to and
// including upTo, in pages of batched direct gets.
func (l *ContextLog) readRange(ctx context.Context, subj string, seq uint64, from time.Time, upTo uint64) ([]*jetstream.RawStreamMsg, error) {
	var out []*jetstream.RawStreamMsg
	for {
		opts := []jetstreamext.GetBatchOpt{jetstreamext.GetBatchSubject(subj)}
		if seq > 0 {
			opts = append(opts, jetstreamext.GetBatchSeq(seq))
		} else {
			opts = append(opts, jetstreamext.GetBatchStartTime(from))
		}
		it, err := jetstreamext.GetBatch(ctx, l.js, streamAgentCtx, readPage, opts...)
		if err != nil {
			return nil, err
		}
		n := 0
		for m, err := range it {
			if errors.Is(err, jetstreamext.ErrNoMessages) {
				break
			}
			if err != nil {
				return nil, err
			}
			if m.Sequence > upTo {
				return out, nil
			}
			out = append(out, m)
			n++
			seq = m.Sequence + 1
		}
		if n < readPage || seq > upTo {
			return out, nil
		}
	}
}

// pointerAt returns the summary pointer as of expectedLastSeq on subj.
func (l *ContextLog) pointerAt(ctx context.Context, subj string, expectedLastSeq uint64) (ctxPointer, error) {
	if expectedLastSeq == 0 {
		return ctxPointer{}, nil
	}
	l.mu.Lock()
	p, ok := l.ptr[subj]
	l.mu.Unlock()
	if ok && p.lastSeq == expectedLastSeq {
		return p, nil
	}
	m, err := l.stream.GetMsg(ctx, expectedLastSeq, jetstream.WithGetMsgSubject(subj))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return ctxPointer{}, ErrStaleWriter
	}
	if err != nil {
		return ctxPointer{}, err
	}
	if m.Sequence != expectedLastSeq {
		// The subject's next record after expectedLastSeq: expectedLastSeq is not a record of
		// this session, so it cannot be its last.
		return ctxPointer{}, ErrStaleWriter
	}
	return pointerOf(m), nil
}

// publish writes one record. p is the summary pointer the record carries: for a messages record
// the pointer as of expectedLastSeq, for a summary record its own anchor.
func (l *ContextLog) publish(ctx context.Context, id events.SessionID, expectedLastSeq uint64, ev events.Any, p ctxPointer, summary bool, o appendOpts) (uint64, error) {
	subj := events.AgentCtxSubject(id)
	msg, err := events.NewMsg(subj, ev)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if o.msgID != "" {
		msg.Header.Set(nats.MsgIdHdr, o.msgID)
	}
	if p.summarySeq > 0 {
		msg.Header.Set(HeaderCtxSummarySeq, strconv.FormatUint(p.summarySeq, 10))
	}
	if p.summarySeq > 0 || summary {
		msg.Header.Set(HeaderCtxAnchorSeq, strconv.FormatUint(p.anchorSeq, 10))
	}
	if size := int64(len(msg.Data) + len(subj) + 512); size > l.maxBytes {
		return 0, fmt.Errorf("%w: %d bytes, server max payload %d", ErrTooLarge, size, l.maxBytes)
	}
	ack, err := l.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(expectedLastSeq))
	if isWrongLastSeq(err) {
		// The server checks the expected sequence before deduplication, so a retry of a commit
		// that did land looks stale: if the subject's last record is this very commit, it is
		// the retry's answer.
		if o.msgID != "" {
			if last, lerr := l.stream.GetLastMsgForSubject(ctx, subj); lerr == nil && last.Header.Get(nats.MsgIdHdr) == o.msgID {
				return last.Sequence, nil
			}
		}
		return 0, ErrStaleWriter
	}
	if err != nil {
		return 0, err
	}
	if ack.Duplicate {
		// The same commit (same msg id) already landed: report where, without updating the
		// pointer cache (the log may have moved on since).
		return ack.Sequence, nil
	}
	p.lastSeq = ack.Sequence
	if summary {
		p.summarySeq = ack.Sequence
	}
	l.remember(subj, p)
	return ack.Sequence, nil
}

// AppendMessages commits msgs to the session's context as one record, only if the session's
// last context sequence is still expectedLastSeq (0 = the log must be empty). A writer that is
// behind (another writer committed, or it lost its lease and the new owner committed) gets an
// error matching ErrStaleWriter / ErrFenced and nothing is written. It returns the new last
// sequence.
func (l *ContextLog) AppendMessages(ctx context.Context, id events.SessionID, expectedLastSeq uint64, msgs []llm.Message, opts ...AppendOption) (uint64, error) {
	if err := checkID(id); err != nil {
		return 0, err
	}
	var o appendOpts
	for _, f := range opts {
		f(&o)
	}
	subj := events.AgentCtxSubject(id)
	p, err := l.pointerAt(ctx, subj, expectedLastSeq)
	if err != nil {
		return 0, fmt.Errorf("append %d messages to %s at %d: %w", len(msgs), id, expectedLastSeq, err)
	}
	ev := events.New(events.CtxMessages{Messages: msgs}, events.WithSession(id.String()), events.WithTurn(o.turn), events.WithTrace(o.trace))
	seq, err := l.publish(ctx, id, expectedLastSeq, ev, p, false, o)
	if err != nil {
		return 0, fmt.Errorf("append %d messages to %s at %d: %w", len(msgs), id, expectedLastSeq, err)
	}
	return seq, nil
}

// AppendSummary records a compaction summary covering the records up to s.AnchorSeq, fenced
// like AppendMessages. From then on LoadContext returns s and the messages after the anchor.
func (l *ContextLog) AppendSummary(ctx context.Context, id events.SessionID, expectedLastSeq uint64, s Summary, opts ...AppendOption) (uint64, error) {
	if err := checkID(id); err != nil {
		return 0, err
	}
	if s.AnchorSeq == 0 || s.AnchorSeq > expectedLastSeq {
		return 0, fmt.Errorf("%w: summary anchor %d must be in 1..%d (the log's last sequence)", ErrInvalid, s.AnchorSeq, expectedLastSeq)
	}
	var o appendOpts
	for _, f := range opts {
		f(&o)
	}
	ev := events.New(events.CtxSummary{Summary: s.Text, AnchorSeq: s.AnchorSeq, Covered: s.Covered, Model: s.Model},
		events.WithSession(id.String()), events.WithTurn(o.turn), events.WithTrace(o.trace))
	seq, err := l.publish(ctx, id, expectedLastSeq, ev, ctxPointer{anchorSeq: s.AnchorSeq}, true, o)
	if err != nil {
		return 0, fmt.Errorf("append summary to %s at %d: %w", id, expectedLastSeq, err)
	}
	return seq, nil
}
