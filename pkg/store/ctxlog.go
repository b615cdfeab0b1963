package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/natsutil"
)

// Headers that make LoadContext cheap. Every record on agent.ctx.<sk>.<epoch> carries the
// sequence of the latest summary record before it and that summary's anchor, so a load reads the
// subject's last record, then exactly the records after the anchor: no scan from the start.
//
// Agentbus-Ctx-Total counts the messages of the epoch's log up to and including the record; a
// cold load with a count bound binary-searches it to skip records that fall outside the bound.
const (
	HeaderCtxSummarySeq = "Agentbus-Ctx-Summary-Seq"
	HeaderCtxAnchorSeq  = "Agentbus-Ctx-Anchor-Seq"
	HeaderCtxTotal      = "Agentbus-Ctx-Total"
	// HeaderCtxInboxSeq on a turn's commit is the last SESSION_IN sequence the turn consumed
	// (its trigger and merged events): the commit carries the session's inbox cursor, so a turn
	// costs no session-record write (see LastCommit).
	HeaderCtxInboxSeq = "Agentbus-Inbox-Seq"
	// HeaderCtxReplyParts on a turn's commit says that the commit is also the turn's closing
	// record (no evt.turn_committed is written for it) and how many outbound parts the turn's
	// reply has (0: none). Such a commit is written only by a turn whose turn_started record is
	// in AGENT_EVENTS already (see FindTurnCommit); its reply goes to IM_OUT after it.
	HeaderCtxReplyParts = "Agentbus-Reply-Parts"
	// HeaderCtxTailFrom on a closing commit is the index (within the commit's messages, which
	// are the turn's messages from its input on) of the first message that the turn did not
	// record in AGENT_EVENTS: the commit's messages from there on are the turn's tail.
	HeaderCtxTailFrom = "Agentbus-Tail-From"
	// HeaderCtxTurnStart on a closing commit holds the turn's start when the turn did not write
	// its turn_started to AGENT_EVENTS (its tool-asking steps rode on their tool call requests,
	// events.ToolCall.Step): a ClosingStart as JSON. The tail (HeaderCtxTailFrom) then starts at
	// the first message the turn carried instead of recording.
	HeaderCtxTurnStart = "Agentbus-Turn-Start"
)

// ClosingStart is what a closing commit's HeaderCtxTurnStart holds: the turn's turn_started
// without its input (the commit's first Inputs messages are the input) and when it was made.
type ClosingStart struct {
	Inputs  int                `json:"inputs"`
	At      int64              `json:"at,omitempty"` // Unix ms
	Started events.TurnStarted `json:"started"`
}

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
	// Count numbers the compactions of the session id (1 = the first).
	Count int
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
	inboxSeq           uint64
	closes             bool // the commit closes its turn (HeaderCtxReplyParts)
	replyParts         int
	tailFrom           int
	start              []byte // HeaderCtxTurnStart
}

// WithInboxSeq records on the commit the last SESSION_IN sequence it consumed
// (HeaderCtxInboxSeq).
func WithInboxSeq(seq uint64) AppendOption { return func(o *appendOpts) { o.inboxSeq = seq } }

// WithClosing makes the commit its turn's closing record: it carries HeaderCtxReplyParts
// (parts, the number of the reply's outbound parts) and HeaderCtxTailFrom (tailFrom).
func WithClosing(parts, tailFrom int) AppendOption {
	return func(o *appendOpts) { o.closes, o.replyParts, o.tailFrom = true, max(parts, 0), max(tailFrom, 0) }
}

// WithClosingStart puts the turn's start on its closing commit (HeaderCtxTurnStart): for a turn
// whose turn_started is not in AGENT_EVENTS. at is when the turn started (Unix ms).
func WithClosingStart(s events.TurnStarted, at int64) AppendOption {
	inputs := len(s.Input)
	s.Input, s.Steps = nil, nil
	b, err := json.Marshal(ClosingStart{Inputs: inputs, At: at, Started: s})
	return func(o *appendOpts) {
		if err == nil {
			o.start = b
		}
	}
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
//
// Cache: the log is append-only per subject, so a decoded tail as of sequence n stays true
// forever. ContextLog keeps the decoded tail of recently used sessions (bounded by
// WithCacheSessions) and extends it with what it appends itself; LoadContext then costs one
// direct get of the subject's last record (to learn the current last sequence) plus a read of
// only the records it has not seen. Another writer's commits are picked up by that read, so the
// cache never serves a stale context.
type ContextLog struct {
	js       jetstream.JetStream
	stream   jetstream.Stream
	bounds   ContextBounds
	now      func() time.Time
	maxBytes int64
	cacheMax int

	decoded atomic.Int64 // records decoded by loads (tests check that skipping works)

	mu    sync.Mutex
	cache map[string]*ctxState // subject -> what this process knows of it
	tails int                  // entries with hasTail that are not kept (the ones cacheMax bounds)
	kept  map[string]int       // subject -> Keep calls not yet released
}

// ctxPointer is what a record says about the log up to it: the latest summary (at or before
// it) and its anchor, and the running message count (counted = the record carries one).
type ctxPointer struct {
	lastSeq, summarySeq, anchorSeq uint64
	total                          uint64
	counted                        bool
}

// ctxState is the known state of one session's log as of ptr.lastSeq: always the summary
// pointer, and (hasTail) the decoded latest summary and the messages after its anchor, trimmed
// to the newest bounds.MaxMessages.
type ctxState struct {
	ptr     ctxPointer
	hasTail bool
	summary *Summary
	msgs    []llm.Message
	seqs    []uint64
	times   []int64 // message time for the age bound: Timestamp, or the record's time
	// dropped counts the messages cut from the front of the slices since their backing
	// arrays were made: still reachable through the arrays, for the collector to trace.
	dropped int
}

// ptrCacheMax bounds the entries of the cache (pointers are a few words each).
const ptrCacheMax = 8192

// ContextLogOption configures a ContextLog.
type ContextLogOption func(*ContextLog)

// WithCacheSessions bounds how many sessions' decoded tails are kept (default 256; 0 keeps
// none, so every load decodes from the stream).
func WithCacheSessions(n int) ContextLogOption { return func(l *ContextLog) { l.cacheMax = n } }

// NewContextLog binds the provisioned AGENT_CTX stream (it must allow direct gets).
func NewContextLog(ctx context.Context, js jetstream.JetStream, bounds ContextBounds, opts ...ContextLogOption) (*ContextLog, error) {
	st, err := natsutil.Stream(ctx, js, streamAgentCtx)
	if err != nil {
		return nil, fmt.Errorf("open stream %s: %w", streamAgentCtx, err)
	}
	if !st.CachedInfo().Config.AllowDirect {
		return nil, fmt.Errorf("stream %s: AllowDirect is required for LoadContext", streamAgentCtx)
	}
	l := &ContextLog{js: js, stream: st, bounds: bounds, now: time.Now, maxBytes: js.Conn().MaxPayload(),
		cacheMax: 256, cache: map[string]*ctxState{}, kept: map[string]int{}}
	for _, o := range opts {
		o(l)
	}
	return l, nil
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
	if v := m.Header.Get(HeaderCtxTotal); v != "" {
		if n, err := strconv.ParseUint(v, 10, 64); err == nil {
			p.total, p.counted = n, true
		}
	}
	if m.Header.Get(events.HeaderType) == events.TypeCtxSummary {
		p.summarySeq = m.Sequence
	}
	return p
}

// store saves st for subj (caller holds l.mu). At most cacheMax entries that are not kept hold
// a decoded tail (an arbitrary one is demoted to its pointer to make room); kept ones do not
// count. At most ptrCacheMax entries are kept at all. Pointers are kept even with the tail cache
// off: they are tiny and save a direct get per append.
func (l *ContextLog) store(subj string, st *ctxState) {
	l.countTail(subj, l.cache[subj], -1)
	if st.hasTail && l.cacheMax <= 0 {
		st = &ctxState{ptr: st.ptr}
	}
	if st.hasTail && l.kept[subj] == 0 && l.tails >= l.cacheMax {
		for k, v := range l.cache {
			if v.hasTail && k != subj && l.kept[k] == 0 {
				l.cache[k] = &ctxState{ptr: v.ptr} // a new object: in-flight warm loads see the change
				l.tails--
				break
			}
		}
	}
	if l.cache[subj] == nil && len(l.cache) >= ptrCacheMax {
		for k, v := range l.cache {
			if k != subj && l.kept[k] == 0 {
				l.countTail(k, v, -1)
				delete(l.cache, k)
				break
			}
		}
	}
	l.cache[subj] = st
	l.countTail(subj, st, +1)
}

// countTail counts st (entering the cache under subj: d = +1, leaving: -1) against the bound.
func (l *ContextLog) countTail(subj string, st *ctxState, d int) {
	if st != nil && st.hasTail && l.kept[subj] == 0 {
		l.tails += d
	}
}

// Keep tells the cache that the session's owner will load and extend its context again soon:
// its decoded tail is not evicted, whatever WithCacheSessions says, until as many Release calls.
// A turn worker keeps the sessions its actors own, so the bound applies only to the others and
// an owner never reads its own log back from the stream. Memory grows with the sessions kept.
func (l *ContextLog) Keep(id events.SessionID) {
	subj := events.AgentCtxSubject(id)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.kept[subj] == 0 {
		l.countTail(subj, l.cache[subj], -1)
	}
	l.kept[subj]++
}

// Release undoes one Keep. The tail stays cached, as one of the bounded entries.
func (l *ContextLog) Release(id events.SessionID) {
	subj := events.AgentCtxSubject(id)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch n := l.kept[subj]; {
	case n == 0:
		return
	case n > 1:
		l.kept[subj] = n - 1
		return
	}
	delete(l.kept, subj)
	st := l.cache[subj]
	l.countTail(subj, st, +1)
	if st != nil && st.hasTail && l.tails > l.cacheMax {
		l.cache[subj] = &ctxState{ptr: st.ptr} // over the bound: the session just went idle
		l.tails--
	}
}

// ctxRec is one decoded record.
type ctxRec struct {
	seq      uint64
	recordMs int64
	msgs     []llm.Message
	summary  *Summary
	leaf     *Leaf
}

// decodeRec decodes one raw record.
func decodeRec(r *jetstream.RawStreamMsg) (ctxRec, error) {
	cr := ctxRec{seq: r.Sequence, recordMs: r.Time.UnixMilli()}
	switch typ := r.Header.Get(events.HeaderType); typ {
	case events.TypeCtxMessages:
		var ev events.Event[events.CtxMessages]
		if err := events.Unmarshal(r.Data, &ev); err != nil {
			return cr, fmt.Errorf("record %d: %w", r.Sequence, err)
		}
		cr.msgs = ev.Data.Messages
	case events.TypeCtxSummary:
		var ev events.Event[events.CtxSummary]
		if err := events.Unmarshal(r.Data, &ev); err != nil {
			return cr, fmt.Errorf("record %d: %w", r.Sequence, err)
		}
		cr.summary = &Summary{Text: ev.Data.Summary, AnchorSeq: ev.Data.AnchorSeq, Covered: ev.Data.Covered,
			Model: ev.Data.Model, Count: ev.Data.Count, Seq: r.Sequence, Time: r.Time}
	case events.TypeCtxLeaf:
		var ev events.Event[events.CtxLeaf]
		if err := events.Unmarshal(r.Data, &ev); err != nil {
			return cr, fmt.Errorf("record %d: %w", r.Sequence, err)
		}
		cr.leaf = leafOf(ev.Data, r.Sequence, r.Time)
	default:
		return cr, fmt.Errorf("record %d has unknown type %q", r.Sequence, typ)
	}
	return cr, nil
}

// apply extends st in place (the caller owns st, or holds l.mu for a cached one; the cache's
// slices are never handed out, result copies).
func (st *ctxState) apply(recs []ctxRec, maxMessages int) {
	for _, r := range recs {
		if r.summary != nil {
			st.setSummary(r.summary)
		} else if r.leaf != nil {
			st.moveLeaf(r.leaf)
		} else {
			st.appendMsgs(r.msgs, r.seq, r.recordMs)
		}
		st.trim(maxMessages)
	}
}

func (st *ctxState) appendMsgs(msgs []llm.Message, seq uint64, recordMs int64) {
	if len(st.msgs)+len(msgs) > cap(st.msgs) {
		st.dropped = 0 // the appends below move the slices to new arrays
	}
	for _, m := range msgs {
		ts := m.Timestamp
		if ts == 0 {
			ts = recordMs
		}
		st.msgs = append(st.msgs, m)
		st.seqs = append(st.seqs, seq)
		st.times = append(st.times, ts)
	}
}

// setSummary installs s; the messages it covers leave the tail.
func (st *ctxState) setSummary(s *Summary) {
	st.summary = s
	k := 0
	for k < len(st.seqs) && st.seqs[k] <= s.AnchorSeq {
		k++
	}
	st.drop(k)
}

// trim keeps the newest n messages (n <= 0: all). Older ones can never be loaded again: the
// count bound only ever selects newer messages as the log grows.
func (st *ctxState) trim(n int) {
	if n > 0 && len(st.msgs) > n {
		st.drop(len(st.msgs) - n)
	}
}

// drop cuts the oldest k messages. Re-slicing alone would leave them reachable through the
// backing arrays until an append outgrows them (a session's tail of n messages held up to n
// more that were cut, with everything they point to); once the cut part is a quarter of what
// is kept, the tail moves to new arrays with room to grow. The old arrays stay as they are for
// the views handed out (result), which never see anything change.
func (st *ctxState) drop(k int) {
	st.msgs, st.seqs, st.times = st.msgs[k:], st.seqs[k:], st.times[k:]
	st.dropped += k
	if n := len(st.msgs); st.dropped > n/4+4 {
		c := n + n/2 + 8
		st.msgs = append(make([]llm.Message, 0, c), st.msgs...)
		st.seqs = append(make([]uint64, 0, c), st.seqs...)
		st.times = append(make([]int64, 0, c), st.times...)
		st.dropped = 0
	}
}

// result applies the bounds to st and copies it out, or, with share, hands out views of the
// cache's slices capped at their length: the cache only appends past its length and re-slices,
// so a view never changes under its reader, and appending to a view reallocates.
func (l *ContextLog) result(st *ctxState, share bool) Loaded {
	out := Loaded{LastSeq: st.ptr.lastSeq}
	if st.summary != nil {
		s := *st.summary
		out.Summary = &s
	}
	i := 0
	if l.bounds.MaxAge > 0 {
		cutoff := l.now().Add(-l.bounds.MaxAge).UnixMilli()
		for i < len(st.times) && st.times[i] < cutoff {
			i++
		}
	}
	if n := l.bounds.MaxMessages; n > 0 && len(st.msgs)-i > n {
		i = len(st.msgs) - n
	}
	// Never start mid tool exchange: a toolResult whose call fell outside the bounds goes too.
	for i < len(st.msgs) && st.msgs[i].Role == llm.RoleToolResult {
		i++
	}
	switch n := len(st.msgs); {
	case i == n:
	case share:
		out.Messages = st.msgs[i:n:n]
		out.Seqs = st.seqs[i:n:n]
	default:
		out.Messages = append([]llm.Message(nil), st.msgs[i:]...)
		out.Seqs = append([]uint64(nil), st.seqs[i:]...)
	}
	return out
}

// LoadContext returns the latest summary and the messages after its anchor, bounded by the
// cold-start bounds (the newest MaxMessages, none older than MaxAge; the summary is kept however
// old), and LastSeq for fencing the next append. Leading toolResult messages whose tool call fell
// outside the bounds are dropped, so the tail never starts mid tool exchange. An empty log is
// an empty Loaded with LastSeq 0.
//
// The returned slices are the caller's, but the messages' inner slices (content blocks) are
// shared with the cache: treat them as read-only (llm.Message.Clone before mutating).
//
// Cost: one direct get of the subject's last record; then, for a session not cached, one
// batched direct get of the records after the summary's anchor (or, without a summary, from
// MaxAge ago); for a cached one, only of the records it has not seen.
func (l *ContextLog) LoadContext(ctx context.Context, id events.SessionID) (Loaded, error) {
	if err := checkID(id); err != nil {
		return Loaded{}, err
	}
	subj := events.AgentCtxSubject(id)
	// The leader's answer: a lagging replica could name an older last record (or none), and a
	// new owner would start from a context that misses committed turns.
	last, err := natsutil.ConsistentGetMsg(ctx, l.js, l.stream, natsutil.MsgQuery{LastFor: subj})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Loaded{}, nil
	}
	if err != nil {
		return Loaded{}, fmt.Errorf("load context %s: %w", id, err)
	}
	p := pointerOf(last)

	if out, ok, err := l.loadWarm(ctx, subj, last, p); ok || err != nil {
		if err != nil {
			return Loaded{}, fmt.Errorf("load context %s: %w", id, err)
		}
		return out, nil
	}
	out, err := l.loadCold(ctx, subj, last, p)
	if err != nil {
		return Loaded{}, fmt.Errorf("load context %s: %w", id, err)
	}
	return out, nil
}

// LoadContextAt is LoadContext for a reader that knows the log's last sequence: the session's
// owner, whose fenced commits are the only ones. When the tail this process cached is at
// lastSeq it is served without asking the server; otherwise it is LoadContext.
//
// Unlike LoadContext, a cache hit returns views of the cache without copying: Messages and Seqs
// are read-only (appending to them is fine, it copies). The turn worker copies the context into
// its run anyway, so a second copy per turn would be waste.
func (l *ContextLog) LoadContextAt(ctx context.Context, id events.SessionID, lastSeq uint64) (Loaded, error) {
	if err := checkID(id); err != nil {
		return Loaded{}, err
	}
	subj := events.AgentCtxSubject(id)
	l.mu.Lock()
	if st := l.cache[subj]; st != nil && st.hasTail && st.ptr.lastSeq == lastSeq {
		out := l.result(st, true)
		l.mu.Unlock()
		return out, nil
	}
	l.mu.Unlock()
	return l.LoadContext(ctx, id)
}

// loadWarm serves a load from the cached tail, reading only the records after it. ok=false means
// the cache cannot serve it (no tail, a new summary since, or a concurrent change).
func (l *ContextLog) loadWarm(ctx context.Context, subj string, last *jetstream.RawStreamMsg, p ctxPointer) (Loaded, bool, error) {
	l.mu.Lock()
	cached := l.cache[subj]
	if cached == nil || !cached.hasTail || cached.ptr.lastSeq > p.lastSeq || cached.ptr.summarySeq != p.summarySeq {
		l.mu.Unlock()
		return Loaded{}, false, nil
	}
	if cached.ptr.lastSeq == p.lastSeq {
		out := l.result(cached, false)
		l.mu.Unlock()
		return out, true, nil
	}
	base := cached.ptr.lastSeq
	l.mu.Unlock()

	var recs []ctxRec
	var err error
	if base+1 < last.Sequence {
		recs, err = l.readRange(ctx, subj, base+1, time.Time{}, last.Sequence)
	} else {
		recs, err = l.readOne(last)
	}
	if err != nil {
		return Loaded{}, false, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur := l.cache[subj]; cur == cached && cur.ptr.lastSeq == base {
		cur.apply(recs, l.bounds.MaxMessages)
		cur.ptr = p
		return l.result(cur, false), true, nil
	} else if cur != nil && cur.hasTail && cur.ptr.lastSeq == p.lastSeq {
		return l.result(cur, false), true, nil // a concurrent append or load got there first
	}
	return Loaded{}, false, nil
}

// loadCold decodes the tail from the summary's anchor (or from MaxAge ago, or the start),
// skipping by binary search the records that the count bound would drop anyway.
func (l *ContextLog) loadCold(ctx context.Context, subj string, last *jetstream.RawStreamMsg, p ctxPointer) (Loaded, error) {
	var lo uint64
	var loTime time.Time
	empty := false
	switch {
	case p.summarySeq > 0:
		lo = p.anchorSeq + 1
	case l.bounds.MaxAge > 0:
		loTime = l.now().Add(-l.bounds.MaxAge)
		empty = last.Time.Before(loTime) // everything is older than the bound
	default:
		lo = 1
	}
	var recs []ctxRec
	if !empty {
		start, err := l.countStart(ctx, subj, lo, loTime, last, p)
		if err != nil {
			return Loaded{}, err
		}
		if p.summarySeq > 0 && start > p.summarySeq {
			// The skipped part holds the summary record: fetch it on its own.
			m, err := l.stream.GetMsg(ctx, p.summarySeq)
			if err != nil {
				return Loaded{}, fmt.Errorf("summary record %d: %w", p.summarySeq, err)
			}
			if recs, err = l.readOne(m); err != nil {
				return Loaded{}, err
			}
		}
		var more []ctxRec
		switch {
		case start == last.Sequence:
			more, err = l.readOne(last)
		case start > 0:
			more, err = l.readRange(ctx, subj, start, time.Time{}, last.Sequence)
		default:
			more, err = l.readRange(ctx, subj, 0, loTime, last.Sequence)
		}
		if err != nil {
			return Loaded{}, err
		}
		recs = append(recs, more...)
	}
	st := &ctxState{ptr: p, hasTail: true}
	st.apply(recs, l.bounds.MaxMessages)

	l.mu.Lock()
	defer l.mu.Unlock()
	// Keep the newer of what we read and what a concurrent append/load stored meanwhile.
	if cur := l.cache[subj]; cur == nil || cur.ptr.lastSeq <= st.ptr.lastSeq {
		l.store(subj, st)
	}
	return l.result(st, false), nil
}

// countStart returns where a cold load must start reading so that the newest MaxMessages
// messages are included: lo (or 0 = from loTime) when the log from there is short, else the
// first record whose running total exceeds total-MaxMessages, found by binary search over
// sequences with single direct gets (log2 of the sequence span, instead of reading every record
// of a long, never-summarized epoch).
func (l *ContextLog) countStart(ctx context.Context, subj string, lo uint64, loTime time.Time, last *jetstream.RawStreamMsg, p ctxPointer) (uint64, error) {
	n := uint64(max(l.bounds.MaxMessages, 0))
	if n == 0 || !p.counted || p.total <= 2*n {
		return lo, nil
	}
	target := p.total - n // the first record with total > target holds the oldest message we keep
	var r0 *jetstream.RawStreamMsg
	var err error
	if lo > 0 {
		r0, err = l.stream.GetMsg(ctx, lo, jetstream.WithGetMsgSubject(subj))
	} else {
		r0, err = l.firstSince(ctx, subj, loTime)
	}
	if errors.Is(err, jetstream.ErrMsgNotFound) || r0 == nil {
		return lo, nil
	}
	if err != nil {
		return 0, err
	}
	p0 := pointerOf(r0)
	if !p0.counted || p0.total > target || p.total-p0.total <= 2*n {
		return r0.Sequence, nil // short enough to read from here
	}
	// Search the smallest sequence s whose first record at or after s has total > target (that
	// predicate only flips once as s grows); reading from s then starts at that record.
	lo, hi := r0.Sequence+1, last.Sequence
	for lo < hi {
		mid := lo + (hi-lo)/2
		r, err := l.stream.GetMsg(ctx, mid, jetstream.WithGetMsgSubject(subj))
		if err != nil {
			return 0, err
		}
		pr := pointerOf(r)
		if !pr.counted {
			return r0.Sequence, nil
		}
		if pr.total > target {
			hi = mid
		} else {
			lo = r.Sequence + 1 // every s in [mid, r] finds r: skip them all
		}
	}
	return lo, nil
}

// firstSince returns the subject's first record stored at or after t.
func (l *ContextLog) firstSince(ctx context.Context, subj string, t time.Time) (*jetstream.RawStreamMsg, error) {
	it, err := jetstreamext.GetBatch(ctx, l.js, streamAgentCtx, 1, jetstreamext.GetBatchSubject(subj), jetstreamext.GetBatchStartTime(t))
	if err != nil {
		return nil, err
	}
	for m, err := range it {
		if errors.Is(err, jetstreamext.ErrNoMessages) {
			return nil, jetstream.ErrMsgNotFound
		}
		return m, err
	}
	return nil, jetstream.ErrMsgNotFound
}

func (l *ContextLog) readOne(m *jetstream.RawStreamMsg) ([]ctxRec, error) {
	l.decoded.Add(1)
	r, err := decodeRec(m)
	if err != nil {
		return nil, err
	}
	return []ctxRec{r}, nil
}

// readRange reads and decodes the subject's records from seq (or from time when seq is 0) up to
// and including upTo. Records are decoded as they arrive, while the server is still sending the
// rest, so the JSON work overlaps the transfer.
func (l *ContextLog) readRange(ctx context.Context, subj string, seq uint64, from time.Time, upTo uint64) ([]ctxRec, error) {
	var out []ctxRec
	var derr error
	err := Scan(ctx, l.js, streamAgentCtx, subj, seq, from, func(m *jetstream.RawStreamMsg) bool {
		if m.Sequence > upTo {
			return false
		}
		l.decoded.Add(1)
		r, err := decodeRec(m)
		if err != nil {
			derr = err
			return false
		}
		out = append(out, r)
		return m.Sequence < upTo
	})
	if err == nil {
		err = derr
	}
	return out, err
}

// pointerAt returns the summary pointer as of expectedLastSeq on subj.
func (l *ContextLog) pointerAt(ctx context.Context, subj string, expectedLastSeq uint64) (ctxPointer, error) {
	if expectedLastSeq == 0 {
		return ctxPointer{}, nil
	}
	l.mu.Lock()
	var cached ctxPointer
	if st := l.cache[subj]; st != nil {
		cached = st.ptr
	}
	l.mu.Unlock()
	if cached.lastSeq == expectedLastSeq {
		return cached, nil
	}
	m, err := natsutil.GetMsg(ctx, l.js, l.stream, natsutil.MsgQuery{Seq: expectedLastSeq, NextFor: subj})
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

// publish writes one record. p is the pointer the record carries (the log as of this record:
// for a messages record the previous summary, for a summary record its own anchor; the running
// total including this record).
//
// On success the cache learns the commit through extend, applied (under l.mu) to the cached
// state when that state was exactly the one as of expectedLastSeq.
func (l *ContextLog) publish(ctx context.Context, id events.SessionID, expectedLastSeq uint64, ev events.Any, p ctxPointer, summary bool, o appendOpts, extend func(st *ctxState, seq uint64)) (uint64, error) {
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
	if p.counted {
		msg.Header.Set(HeaderCtxTotal, strconv.FormatUint(p.total, 10))
	}
	if o.inboxSeq > 0 {
		msg.Header.Set(HeaderCtxInboxSeq, strconv.FormatUint(o.inboxSeq, 10))
	}
	if o.closes {
		msg.Header.Set(HeaderCtxReplyParts, strconv.Itoa(o.replyParts))
		msg.Header.Set(HeaderCtxTailFrom, strconv.Itoa(o.tailFrom))
		if len(o.start) > 0 {
			msg.Header.Set(HeaderCtxTurnStart, string(o.start))
		}
	}
	if size := int64(len(msg.Data) + len(subj) + 512); size > l.maxBytes {
		return 0, fmt.Errorf("%w: %d bytes, server max payload %d", ErrTooLarge, size, l.maxBytes)
	}
	natsutil.ExpectLastSubjectSeq(msg, expectedLastSeq) // as a header, not an option: FastPublish's path
	ack, err := l.js.PublishMsg(ctx, msg)
	if isWrongLastSeq(err) {
		// The server checks the expected sequence before deduplication, so a retry of a commit
		// that did land looks stale: if the subject's last record is this very commit, it is
		// the retry's answer.
		if o.msgID != "" {
			if last, lerr := natsutil.LeaderGetMsg(ctx, l.js, l.stream.CachedInfo().Config.Name, natsutil.MsgQuery{LastFor: subj}); lerr == nil && last.Header.Get(nats.MsgIdHdr) == o.msgID {
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
	l.mu.Lock()
	defer l.mu.Unlock()
	cur := l.cache[subj]
	switch {
	case cur != nil && cur.ptr.lastSeq > p.lastSeq:
		// someone already cached a later state
	case cur != nil && cur.hasTail && cur.ptr.lastSeq == expectedLastSeq:
		extend(cur, ack.Sequence) // in place: the cache's slices are never handed out
		cur.trim(l.bounds.MaxMessages)
		cur.ptr = p
	case expectedLastSeq == 0:
		// The log was empty: this commit is the whole tail.
		next := &ctxState{ptr: p, hasTail: true}
		extend(next, ack.Sequence)
		next.trim(l.bounds.MaxMessages)
		l.store(subj, next)
	default:
		l.store(subj, &ctxState{ptr: p})
	}
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
	if p.counted || expectedLastSeq == 0 {
		p.total, p.counted = p.total+uint64(len(msgs)), true
	}
	ev := events.New(events.CtxMessages{Messages: msgs}, events.WithSession(id.String()), events.WithTurn(o.turn), events.WithTrace(o.trace))
	seq, err := l.publish(ctx, id, expectedLastSeq, ev, p, false, o, func(st *ctxState, seq uint64) {
		st.appendMsgs(msgs, seq, l.now().UnixMilli())
	})
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
	subj := events.AgentCtxSubject(id)
	prev, err := l.pointerAt(ctx, subj, expectedLastSeq)
	if err != nil {
		return 0, fmt.Errorf("append summary to %s at %d: %w", id, expectedLastSeq, err)
	}
	ev := events.New(events.CtxSummary{Summary: s.Text, AnchorSeq: s.AnchorSeq, Covered: s.Covered, Model: s.Model, Count: s.Count},
		events.WithSession(id.String()), events.WithTurn(o.turn), events.WithTrace(o.trace))
	seq, err := l.publish(ctx, id, expectedLastSeq, ev, ctxPointer{anchorSeq: s.AnchorSeq, total: prev.total, counted: prev.counted}, true, o, func(st *ctxState, seq uint64) {
		st.setSummary(&Summary{Text: s.Text, AnchorSeq: s.AnchorSeq, Covered: s.Covered, Model: s.Model, Count: s.Count, Seq: seq, Time: l.now()})
	})
	if err != nil {
		return 0, fmt.Errorf("append summary to %s at %d: %w", id, expectedLastSeq, err)
	}
	return seq, nil
}

// Purge deletes the whole context log of one session id (e.g. an archived epoch past its
// retention). LoadContext of that id is empty afterwards, in every process. Purge only ids that
// are no longer written (archived epochs): purging the current epoch would let the next append
// start a new log at expectedLastSeq 0, and another process's cached tail of the old log could be
// extended with the new records.
func (l *ContextLog) Purge(ctx context.Context, id events.SessionID) error {
	if err := checkID(id); err != nil {
		return err
	}
	subj := events.AgentCtxSubject(id)
	if err := l.stream.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
		return fmt.Errorf("purge context %s: %w", id, err)
	}
	l.mu.Lock()
	l.countTail(subj, l.cache[subj], -1)
	delete(l.cache, subj)
	l.mu.Unlock()
	return nil
}

// CommitMark is what the last record of a session id's context says about the inbox: a turn's
// commit carries the last SESSION_IN sequence it consumed (WithInboxSeq).
type CommitMark struct {
	Seq      uint64    // AGENT_CTX sequence of the record (0: the log is empty)
	InboxSeq uint64    // its HeaderCtxInboxSeq (0: not a turn's commit)
	Turn     string    // the turn that wrote it
	MsgID    string    // its Nats-Msg-Id
	Time     time.Time // when the server stored it
	Messages []llm.Message
	// Closes says the commit is its turn's closing record (HeaderCtxReplyParts); ReplyParts
	// is then the number of the turn's reply parts.
	Closes     bool
	ReplyParts int
}

// markOf reads a record's commit mark; the messages are decoded only for a turn's commit.
func markOf(m *jetstream.RawStreamMsg) CommitMark {
	mark := CommitMark{Seq: m.Sequence, InboxSeq: hdrUint(m.Header, HeaderCtxInboxSeq), Turn: m.Header.Get(events.HeaderTurn), MsgID: m.Header.Get(nats.MsgIdHdr), Time: m.Time}
	if v := m.Header.Get(HeaderCtxReplyParts); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			mark.Closes, mark.ReplyParts = true, n
		}
	}
	if mark.InboxSeq > 0 || mark.Closes {
		if ev, err := events.Decode(m.Data); err == nil {
			if cm, ok := ev.(*events.Event[events.CtxMessages]); ok {
				mark.Messages = cm.Data.Messages
				if mark.Turn == "" {
					mark.Turn = cm.Turn
				}
			}
		}
	}
	return mark
}

// LastCommit reads the last record of id's context from the stream leader (it decides where a
// new owner continues the inbox, so it must see every acknowledged commit).
func (l *ContextLog) LastCommit(ctx context.Context, id events.SessionID) (CommitMark, error) {
	if err := checkID(id); err != nil {
		return CommitMark{}, err
	}
	m, err := natsutil.ConsistentGetMsg(ctx, l.js, l.stream, natsutil.MsgQuery{LastFor: events.AgentCtxSubject(id)})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return CommitMark{}, nil
	}
	if err != nil {
		return CommitMark{}, fmt.Errorf("last commit of %s: %w", id, err)
	}
	return markOf(m), nil
}

// FindTurnCommit looks for turn's commit (Nats-Msg-Id "<turn>:commit") among the records of
// id's context after afterSeq, the context the turn started from (TurnStarted.ContextSeq): a
// turn commits after it loads its context, so its commit, if any, is there. It reads the
// records one by one in order, each "nothing more" confirmed by the stream leader, so a false
// answer means the turn did not commit (as of now). The records read are the session's own
// since the turn started: few.
func (l *ContextLog) FindTurnCommit(ctx context.Context, id events.SessionID, turn string, afterSeq uint64) (CommitMark, bool, error) {
	if err := checkID(id); err != nil {
		return CommitMark{}, false, err
	}
	if turn == "" {
		return CommitMark{}, false, fmt.Errorf("%w: empty turn id", ErrInvalid)
	}
	subj := events.AgentCtxSubject(id)
	want := turn + ":commit"
	for seq := afterSeq + 1; ; {
		m, err := natsutil.GetMsg(ctx, l.js, l.stream, natsutil.MsgQuery{Seq: seq, NextFor: subj})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return CommitMark{}, false, nil
		}
		if err != nil {
			return CommitMark{}, false, fmt.Errorf("find commit of turn %s in %s: %w", turn, id, err)
		}
		if m.Header.Get(nats.MsgIdHdr) == want {
			return markOf(m), true, nil
		}
		seq = m.Sequence + 1
	}
}
