package webconsole

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/store"
)

// Conversation is one session as the session page shows it: every epoch's marks and turns in
// the order they happened, each turn with its causal chain.
type Conversation struct {
	Key     events.SessionKey
	Session *store.Session // nil when the session has events but no record (yet)
	Items   []Item
	Turns   []*Turn // the turns of Items, in order
	Totals  Totals
	// Fork is set when the session is a fork (platform events.PlatformFork).
	Fork *ForkOf
	// LastEvtSeq and LastCtxSeq are the last AGENT_EVENTS and AGENT_CTX sequences of the
	// session this read saw: the live stream starts after them, so nothing stored between the
	// read and the stream's start is missed.
	LastEvtSeq, LastCtxSeq uint64
}

// Totals sums a session's or a turn's model calls.
type Totals struct {
	Turns, Failed  int
	Input, Output  int
	Cost           float64
	ModelCalls     int
	ToolCalls      int
	LatencyMs      int64
	LastActivityMs int64
	// Model is the model of the last model call (the session list's fallback when the
	// session record names none).
	Model string `json:",omitempty"`
}

// Item is one entry of the conversation: a turn, or a mark (a new epoch, a compaction, a move
// of the session tree's active leaf).
type Item struct {
	Time time.Time
	Kind string // "turn", "epoch", "compaction", "leaf"
	Text string // a mark's description
	Turn *Turn
}

// Turn is one turn's causal chain: what came in, every model call and tool call in order, and
// the reply parts with their delivery state.
type Turn struct {
	ID      string
	Epoch   uint64
	Start   time.Time
	End     time.Time
	Model   string
	Worker  string
	Trigger events.InboxRef
	Inputs  []string
	Steps   []*Step
	Replies []*Reply
	Status  string // "committed", "failed", "open"
	Failure string // reason: error
	Usage   Totals
	// ContextSeq is the AGENT_CTX snapshot the turn ran on (where a fork from its input starts).
	ContextSeq uint64
	calls      map[string]*ToolStep
	// When and Cost are Start and Usage.Cost formatted once here rather than by template
	// functions: a 1,000-turn page calls them thousands of times.
	When, Cost string `json:"-"`
}

// Step is one link of the chain: a model call or a tool call.
type Step struct {
	Model *ModelStep
	Tool  *ToolStep
}

// ModelStep is one model call: the assistant message it produced.
type ModelStep struct {
	Model      string
	Input      int
	Output     int
	Cost       float64
	LatencyMs  int64
	StopReason string
	Text       string
	Thinking   string
	Error      string
	ts         int64
	// CostText and LatencyText are Cost and LatencyMs formatted (see Turn.When).
	CostText, LatencyText string `json:"-"`
}

// ToolStep is one tool call and its outcome.
type ToolStep struct {
	ID         string
	Name       string
	Args       string
	Result     string
	IsError    bool
	Done       bool
	DurationMs int64
	Worker     string
	// DurationText is DurationMs formatted (see Turn.When).
	DurationText string `json:"-"`
}

// Reply is one outbound part and its delivery state.
type Reply struct {
	OutID     string
	Part      int
	Text      string
	State     string // "sent", "pending", "dead-lettered", "local" (a fork: never sent)
	Reason    string // why it was dead-lettered
	MessageID string // the platform's id once sent
	DLQSeq    uint64
	// Retried: the part was put back on IM_OUT after it was dead-lettered (a retry).
	Retried bool
}

// ForkOf describes a fork: the session it was forked from.
type ForkOf struct {
	ID     string
	Origin events.SessionKey
}

// Reader reads everything the console shows from the bus: KV gets, batched direct gets of
// streams (scan). It keeps no state between calls, so any number of consoles can run.
type Reader struct {
	js       jetstream.JetStream
	turns    *store.TurnLog
	ctxlog   *store.ContextLog
	sessions *store.Sessions
	kv       jetstream.KeyValue
	// arch is the archive of ended epochs, read where the streams no longer hold an epoch (nil:
	// the streams alone, on a bus without the object store epochs).
	arch *store.EpochArchive
}

// NewReader binds the provisioned streams and buckets.
func NewReader(ctx context.Context, js jetstream.JetStream) (*Reader, error) {
	tl, err := store.NewTurnLog(ctx, js)
	if err != nil {
		return nil, fmt.Errorf("webconsole: %w", err)
	}
	cl, err := store.NewContextLog(ctx, js, store.ContextBounds{}, store.WithCacheSessions(0))
	if err != nil {
		return nil, fmt.Errorf("webconsole: %w", err)
	}
	kv, err := js.KeyValue(ctx, events.BucketSessions)
	if err != nil {
		return nil, fmt.Errorf("webconsole: open bucket %s: %w", events.BucketSessions, err)
	}
	arch, err := store.OpenEpochArchive(ctx, js, nil)
	if err != nil {
		arch = nil
	}
	return &Reader{js: js, turns: tl, ctxlog: cl, sessions: store.NewSessions(kv), kv: kv, arch: arch}, nil
}

// sources are everything Conversation reads, fetched concurrently (each its own batched
// direct gets; nothing depends on another read).
type sources struct {
	sess    *store.Session
	recs    []store.TurnRecord // AGENT_EVENTS
	ctx     [][]store.CtxRecord
	results []*events.Event[events.ToolResult]
	outs    []*events.Event[events.Outbound]
	outAt   []time.Time     // the storage time of each of outs
	sent    map[string]bool // out ids with a receipt
	dead    []deadPart
}

type deadPart struct {
	outID, reason string
	seq           uint64
}

func (r *Reader) fetch(ctx context.Context, sk events.SessionKey) (*sources, error) {
	src := &sources{}
	sess, err := r.sessions.Get(ctx, sk)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return nil, err
	default:
		src.sess = sess
	}
	epochs := uint64(1)
	if sess != nil {
		epochs = max(sess.Epoch, 1)
	}
	src.ctx = make([][]store.CtxRecord, epochs)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		for rec, err := range r.arch.Replay(gctx, r.turns, sk, epochs, store.ReplayFrom{}) {
			if err != nil {
				return err
			}
			src.recs = append(src.recs, rec)
		}
		return nil
	})
	for e := range epochs {
		g.Go(func() error {
			for cr, err := range r.arch.ContextHistory(gctx, r.ctxlog, events.SessionID{Key: sk, Epoch: e + 1}) {
				if err != nil {
					return err
				}
				src.ctx[e] = append(src.ctx[e], cr)
			}
			return nil
		})
	}
	g.Go(func() error {
		// The session's results, then those stored in the layout before issue 41 (a subject
		// per call) until TOOL_RESULTS ages them out.
		for _, filter := range []string{events.ToolResultSessionFilter(sk), events.ToolResultLegacySessionFilter(sk)} {
			err := store.Scan(gctx, r.js, events.StreamToolResults, filter, 1, time.Time{}, func(m *jetstream.RawStreamMsg) bool {
				ev := new(events.Event[events.ToolResult])
				if events.UnmarshalMsg(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}, ev) == nil {
					src.results = append(src.results, ev)
				}
				return true
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if sk.Platform != events.PlatformFork { // a fork's parts are never sent (egress skips them)
		g.Go(func() error {
			return store.Scan(gctx, r.js, events.StreamIMOut, events.IMOutSubject(sk), 1, time.Time{}, func(m *jetstream.RawStreamMsg) bool {
				ev := new(events.Event[events.Outbound])
				if events.UnmarshalMsg(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}, ev) == nil {
					src.outs = append(src.outs, ev)
					src.outAt = append(src.outAt, m.Time)
				}
				return true
			})
		})
		g.Go(func() error {
			// Receipts on the chat's subject name their part in a header (issue 41); those of
			// the layout before end their subject with the out id.
			src.sent = map[string]bool{}
			err := store.Scan(gctx, r.js, events.StreamIMSent, events.IMSentSubject(sk), 1, time.Time{}, func(m *jetstream.RawStreamMsg) bool {
				if id := m.Header.Get(events.HeaderOutID); id != "" {
					src.sent[id] = true
				}
				return true
			})
			if err != nil {
				return err
			}
			st, err := r.js.Stream(gctx, events.StreamIMSent)
			if err != nil {
				return err
			}
			prefix := events.IMSentSubject(sk) + "."
			info, err := st.Info(gctx, jetstream.WithSubjectFilter(prefix+"*"))
			if err != nil {
				return err
			}
			for subj := range info.State.Subjects {
				if id, err := events.DecodeToken(strings.TrimPrefix(subj, prefix)); err == nil {
					src.sent[id] = true
				}
			}
			return nil
		})
		g.Go(func() error {
			st, err := r.js.Stream(gctx, events.StreamDeadLetters)
			if err != nil || st.CachedInfo().State.Msgs == 0 {
				return nil
			}
			return store.Scan(gctx, r.js, events.StreamDeadLetters, events.PrefixDeadLetter+"."+events.RoleEgress+".>", 1, time.Time{}, func(m *jetstream.RawStreamMsg) bool {
				dl, ok := decodeDeadLetter(m)
				if !ok || dl.Subject != events.IMOutSubject(sk) {
					return true
				}
				var out struct {
					Data struct {
						OutID string `json:"outId"`
					} `json:"data"`
				}
				if json.Unmarshal(dl.Body(), &out) == nil && out.Data.OutID != "" {
					src.dead = append(src.dead, deadPart{outID: out.Data.OutID, reason: dl.Reason + ": " + dl.Error, seq: m.Sequence})
				}
				return true
			})
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if err := r.batchedReceipts(ctx, sk, src); err != nil {
		return nil, err
	}
	return src, nil
}

// batchedReceipts marks the parts of src.outs whose receipts egress wrote in a batch (issue
// 40): the chat's subject has none of them, the subject of the part's receipt bucket
// (events.IMSentBatchSubject) does. Each bucket with such parts is read once, from the first of
// them stored less store.ReceiptSkew, and only until all of them were seen.
func (r *Reader) batchedReceipts(ctx context.Context, sk events.SessionKey, src *sources) error {
	type bucket struct {
		since time.Time
		want  map[string]bool
	}
	buckets := map[uint64]*bucket{}
	for i, ev := range src.outs {
		id := ev.Data.OutID
		b, ok := events.ReceiptBucket(id)
		if !ok || src.sent[id] {
			continue
		}
		bk := buckets[b]
		if bk == nil {
			bk = &bucket{since: src.outAt[i], want: map[string]bool{}}
			buckets[b] = bk
		} else if src.outAt[i].Before(bk.since) {
			bk.since = src.outAt[i]
		}
		bk.want[id] = true
	}
	if len(buckets) == 0 {
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	var mu sync.Mutex // src.sent
	for b, bk := range buckets {
		g.Go(func() error {
			return store.Scan(gctx, r.js, events.StreamIMSent, events.IMSentBatchSubject(b), 0, bk.since.Add(-store.ReceiptSkew), func(m *jetstream.RawStreamMsg) bool {
				for _, id := range m.Header.Values(events.HeaderOutID) {
					if bk.want[id] && store.BatchedReceipt(m, sk, id).OK {
						delete(bk.want, id)
						mu.Lock()
						src.sent[id] = true
						mu.Unlock()
					}
				}
				return len(bk.want) > 0
			})
		})
	}
	return g.Wait()
}

// Conversation reads the whole of session sk.
func (r *Reader) Conversation(ctx context.Context, sk events.SessionKey) (*Conversation, error) {
	src, err := r.fetch(ctx, sk)
	if err != nil {
		return nil, err
	}
	c := &Conversation{Key: sk, Fork: forkOf(sk), Session: src.sess}
	byID := map[string]*Turn{}
	turnOf := func(id string, at time.Time) *Turn {
		t := byID[id]
		if t == nil {
			t = &Turn{ID: id, Start: at, Status: "open", calls: map[string]*ToolStep{}}
			byID[id] = t
			c.Items = append(c.Items, Item{Time: at, Kind: "turn", Turn: t})
		}
		if at.After(t.End) {
			t.End = at
		}
		return t
	}
	apply := func(rec store.TurnRecord) {
		t := turnOf(rec.Turn, rec.Time)
		switch e := rec.Event.(type) {
		case *events.Event[events.TurnStarted]:
			d := &e.Data
			t.Model = strings.TrimPrefix(d.Model.Provider+"/"+d.Model.ID, "/")
			t.Worker, t.Trigger, t.ContextSeq = d.Worker, d.Trigger, d.ContextSeq
			if sid, err := events.ParseSessionID(e.Session); err == nil {
				t.Epoch = sid.Epoch
			}
			for i := range d.Input {
				t.Inputs = append(t.Inputs, d.Input[i].TextContent())
			}
		case *events.Event[events.MessageEnd]:
			t.addMessage(&e.Data.Message, rec.Time)
		case *events.Event[events.ToolCallRequested]:
			s := t.tool(e.Data.CallID, e.Data.Tool)
			if s.Args == "" {
				s.Args = jsonText(e.Data.Args)
			}
		case *events.Event[events.ToolResultRecorded]:
			t.addResult(&e.Data.Result)
		case *events.Event[events.OutboundPublished]:
			t.reply(e.Data.OutID, e.Data.Part)
		case *events.Event[events.TurnCommitted]:
			t.Status = "committed"
		case *events.Event[events.TurnFailed]:
			t.Status, t.Failure = "failed", strings.TrimSpace(e.Data.Reason+": "+e.Data.Error)
		}
	}
	recs := src.recs
	for _, r := range recs {
		c.LastEvtSeq = max(c.LastEvtSeq, r.Seq)
	}
	for _, crs := range src.ctx {
		for _, cr := range crs {
			c.LastCtxSeq = max(c.LastCtxSeq, cr.Seq)
		}
	}
	// The context log of every epoch: the marks, and the closing commits that stand for the
	// tail and the commit of turns that wrote none to AGENT_EVENTS.
	for e, crs := range src.ctx {
		epoch := uint64(e + 1)
		sid := events.SessionID{Key: sk, Epoch: epoch}
		for i, cr := range crs {
			if i == 0 && epoch > 1 {
				c.Items = append(c.Items, Item{Time: cr.Time, Kind: "epoch", Text: fmt.Sprintf("epoch %d", epoch)})
			}
			recs = append(recs, store.ClosingRecords(sk, sid, cr)...)
			switch {
			case cr.Leaf != nil:
				l := cr.Leaf
				text := fmt.Sprintf("active leaf → context seq %d", l.LeafSeq)
				if l.BranchTo > 0 {
					text += fmt.Sprintf("; branch %d..%d left", l.BranchFrom, l.BranchTo)
				}
				if l.BranchSummary != "" {
					text += ": " + clip(l.BranchSummary, 300)
				}
				c.Items = append(c.Items, Item{Time: cr.Time, Kind: "leaf", Text: text})
			case cr.Summary != nil:
				s := cr.Summary
				c.Items = append(c.Items, Item{Time: cr.Time, Kind: "compaction",
					Text: fmt.Sprintf("compaction %d: %d messages summarized by %s: %s", s.Count, s.Covered, s.Model, clip(s.Text, 300))})
			}
		}
	}
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].Time.Before(recs[j].Time) })
	for _, rec := range recs {
		apply(rec)
	}
	// A commit closes its turn even when no record of AGENT_EVENTS says so.
	for _, crs := range src.ctx {
		for _, cr := range crs {
			if t := byID[cr.Turn]; t != nil && cr.Turn != "" && cr.Messages > 0 && t.Status == "open" {
				t.Status = "committed"
			}
		}
	}
	// Tool workers and durations (TOOL_RESULTS). A call's bus id is "<turn>-<call id>" (with
	// "~n" when a model reused an id in the turn).
	for _, ev := range src.results {
		t := byID[ev.Turn]
		if t == nil {
			continue
		}
		id := strings.TrimPrefix(ev.Data.CallID, ev.Turn+"-")
		if i := strings.LastIndexByte(id, '~'); i > 0 {
			id = id[:i]
		}
		if s := t.calls[id]; s != nil {
			s.Worker, s.DurationMs = ev.Data.Worker, ev.Data.DurationMs
			if !s.Done {
				s.Done, s.IsError, s.Result = true, ev.Data.IsError, clip(llm.TextContentOf(ev.Data.Content), 4000)
			}
		}
	}
	// Reply parts (IM_OUT), receipts (IM_SENT), dead letters of parts (DEAD_LETTERS).
	parts := map[string]*Reply{}
	for _, ev := range src.outs {
		t := byID[ev.Data.Turn]
		if t == nil {
			continue
		}
		if rp := parts[ev.Data.OutID]; rp != nil {
			// The same part published again: a dead letter's retry put it back.
			rp.Retried = true
			continue
		}
		rp := t.reply(ev.Data.OutID, ev.Data.Part)
		rp.Part, rp.Text = ev.Data.Part, ev.Data.Content.PlainText()
		parts[ev.Data.OutID] = rp
	}
	for id, rp := range parts {
		if src.sent[id] {
			rp.State = "sent"
		}
	}
	for _, d := range src.dead {
		rp := parts[d.outID]
		switch {
		case rp == nil:
		case rp.State == "sent":
			rp.Retried = true
		default:
			rp.State, rp.Reason, rp.DLQSeq = "dead-lettered", d.reason, d.seq
		}
	}
	sort.SliceStable(c.Items, func(i, j int) bool { return c.Items[i].Time.Before(c.Items[j].Time) })
	for _, it := range c.Items {
		if it.Turn == nil {
			continue
		}
		t := it.Turn
		t.finish()
		c.Turns = append(c.Turns, t)
		c.Totals.Turns++
		if t.Status == "failed" {
			c.Totals.Failed++
		}
		c.Totals.add(&t.Usage)
		c.Totals.LastActivityMs = max(c.Totals.LastActivityMs, t.End.UnixMilli())
	}
	return c, nil
}

func (s *Totals) add(o *Totals) {
	s.Input += o.Input
	s.Output += o.Output
	s.Cost += o.Cost
	s.ModelCalls += o.ModelCalls
	s.ToolCalls += o.ToolCalls
	s.LatencyMs += o.LatencyMs
}

func (t *Turn) tool(id, name string) *ToolStep {
	s := t.calls[id]
	if s == nil {
		s = &ToolStep{ID: id, Name: name}
		t.calls[id] = s
		t.Steps = append(t.Steps, &Step{Tool: s})
	}
	if s.Name == "" {
		s.Name = name
	}
	return s
}

func (t *Turn) addResult(r *events.ToolResult) {
	s := t.tool(r.CallID, r.Tool)
	s.Done, s.IsError = true, r.IsError
	s.Result = clip(llm.TextContentOf(r.Content), 4000)
	if r.Worker != "" {
		s.Worker, s.DurationMs = r.Worker, r.DurationMs
	}
}

func (t *Turn) addMessage(m *llm.Message, at time.Time) {
	switch m.Role {
	case llm.RoleAssistant:
		// The same assistant message may come from a message_end record and a closing commit:
		// keep one model step per message (its timestamp is the call's start).
		for _, s := range t.Steps {
			if s.Model != nil && s.Model.ts == m.Timestamp && m.Timestamp != 0 {
				return
			}
		}
		ms := &ModelStep{Model: strings.TrimPrefix(m.Provider+"/"+m.Model, "/"), StopReason: string(m.StopReason), Error: m.ErrorMessage, ts: m.Timestamp}
		if m.Usage != nil {
			ms.Input, ms.Output, ms.Cost = m.Usage.Input, m.Usage.Output, m.Usage.Cost.Total
		}
		var text, thinking []string
		for _, c := range m.Content {
			switch c.Type {
			case llm.ContentText:
				text = append(text, c.Text)
			case llm.ContentThinking:
				thinking = append(thinking, c.Thinking)
			}
		}
		ms.Text, ms.Thinking = strings.Join(text, "\n"), clip(strings.Join(thinking, "\n"), 2000)
		t.Steps = append(t.Steps, &Step{Model: ms})
		for _, c := range m.Content {
			if c.Type == llm.ContentToolCall {
				s := t.tool(c.ID, c.Name)
				s.Args = jsonText(c.Arguments)
			}
		}
		if t.Model == "" {
			t.Model = ms.Model
		}
	case llm.RoleToolResult:
		s := t.tool(m.ToolCallID, m.ToolName)
		if !s.Done {
			s.Done, s.IsError = true, m.IsError
			s.Result = clip(m.TextContent(), 4000)
		}
	case llm.RoleUser:
		// A steer / follow-up injected into the running turn.
		if txt := m.TextContent(); txt != "" && !contains(t.Inputs, txt) {
			t.Inputs = append(t.Inputs, txt)
		}
	}
	if at.After(t.End) {
		t.End = at
	}
}

// finish computes the turn's sums and each model call's latency: from the call's start (the
// assistant message's timestamp) to the next thing the turn recorded (the first tool result,
// less the tool's duration, or the turn's last record).
func (t *Turn) finish() {
	var models []*ModelStep
	for i, s := range t.Steps {
		if s.Model == nil {
			t.Usage.ToolCalls++
			continue
		}
		m := s.Model
		models = append(models, m)
		t.Usage.ModelCalls++
		t.Usage.Input += m.Input
		t.Usage.Output += m.Output
		t.Usage.Cost += m.Cost
		end := t.End.UnixMilli()
		for _, n := range t.Steps[i+1:] {
			if n.Model != nil && n.Model.ts > 0 {
				end = n.Model.ts
				break
			}
		}
		if m.ts > 0 && end >= m.ts {
			// Everything between this call and the next call's start that was tool time.
			var tools int64
			for _, n := range t.Steps[i+1:] {
				if n.Model != nil {
					break
				}
				tools = max(tools, n.Tool.DurationMs)
			}
			m.LatencyMs = max(end-m.ts-tools, 0)
			t.Usage.LatencyMs += m.LatencyMs
		}
	}
	if t.Model == "" && len(models) > 0 {
		t.Model = models[0].Model
	}
	if len(t.Replies) == 0 && len(models) > 0 && t.Status == "committed" {
		// No part was recorded (a fork, or parts not yet read): show the answer itself.
		if txt := models[len(models)-1].Text; txt != "" {
			t.Replies = append(t.Replies, &Reply{Text: txt, State: "local"})
		}
	}
	sort.SliceStable(t.Replies, func(i, j int) bool { return t.Replies[i].Part < t.Replies[j].Part })
	t.Usage.Turns = 1
	t.When, t.Cost = fmtWhen(t.Start), fmtUSD(t.Usage.Cost)
	for _, s := range t.Steps {
		if m := s.Model; m != nil {
			m.CostText, m.LatencyText = fmtUSD(m.Cost), fmtMs(m.LatencyMs)
		} else {
			s.Tool.DurationText = fmtMs(s.Tool.DurationMs)
		}
	}
}

func (t *Turn) reply(outID string, part int) *Reply {
	for _, r := range t.Replies {
		if r.OutID == outID {
			return r
		}
	}
	r := &Reply{OutID: outID, Part: part, State: "pending"}
	t.Replies = append(t.Replies, r)
	return r
}

func decodeDeadLetter(m *jetstream.RawStreamMsg) (events.DeadLetter, bool) {
	var ev events.Event[events.DeadLetter]
	if err := events.UnmarshalMsg(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}, &ev); err != nil {
		// An older or foreign record: take what decodes.
		var d events.DeadLetter
		if json.Unmarshal(m.Data, &d) != nil {
			return d, false
		}
		return d, d.Role != ""
	}
	return ev.Data, true
}

func jsonText(v any) string {
	if v == nil {
		return "{}"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return clip(string(b), 4000)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s // no more bytes than runes allowed
	}
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
