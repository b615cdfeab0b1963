package turn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/loop"
	"github.com/agentbus/agentbus/pkg/models"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/schedule"
	"github.com/agentbus/agentbus/pkg/tools"
	"github.com/agentbus/agentbus/pkg/tracing"
)

// ToolCatalog mirrors KV tools: the tools some tool worker serves right now. Entries vanish
// when their workers stop refreshing them (bucket TTL).
type ToolCatalog struct {
	kv     jetstream.KeyValue
	mu     sync.RWMutex
	m      map[string]events.ToolEntry
	sorted []events.ToolEntry // by name; Workers and UpdatedAt as when the offer last changed
	// views memoizes what each kind of sender may use: every turn asks, the answer changes only
	// with the catalog. Cleared on change.
	views map[viewKey]*toolView
}

// viewKey is what the permission filter of For looks at.
type viewKey struct{ platform, scope, roles string }

// toolView is the tools one kind of sender may use, in the shapes a turn needs them. It is
// shared by every turn that asks: read-only.
type toolView struct {
	entries []events.ToolEntry // by name
	avail   []tools.Tool       // entries for skills.Select
	agent   []loop.AgentTool   // entries for the loop
	index   map[string]int     // name -> position in entries
	pre     []events.ToolEntry // the preExecutable entries
}

// maxViews bounds the memo: roles come from configuration, so kinds of senders are few.
const maxViews = 256

// NewToolCatalog opens the registry bucket.
func NewToolCatalog(ctx context.Context, js jetstream.JetStream) (*ToolCatalog, error) {
	kv, err := natsutil.KeyValue(ctx, js, events.BucketTools)
	if err != nil {
		return nil, fmt.Errorf("open KV %s: %w", events.BucketTools, err)
	}
	return &ToolCatalog{kv: kv, m: map[string]events.ToolEntry{}}, nil
}

// Run follows the bucket until ctx ends, watching again a second after a watch fails, and
// returns when ctx ends. The caller runs it on a goroutine it owns and waits for it.
func (c *ToolCatalog) Run(ctx context.Context) {
	for ctx.Err() == nil {
		w, err := c.kv.WatchAll(ctx)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		c.follow(ctx, w)
		_ = w.Stop()
	}
}

// follow applies w's entries until the watch ends or ctx does (natsutil.NextUpdate: a
// worker's Stop waits for this loop).
func (c *ToolCatalog) follow(ctx context.Context, w jetstream.KeyWatcher) {
	for {
		e, ok := natsutil.NextUpdate(ctx, w)
		if !ok {
			return
		}
		if e != nil { // nil: the initial values are done
			c.apply(e)
		}
	}
}

func (c *ToolCatalog) apply(e jetstream.KeyValueEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := e.Key()
	old, had := c.m[key]
	if e.Operation() == jetstream.KeyValuePut {
		if te, err := events.UnmarshalToolEntry(e.Value()); err == nil {
			c.m[key] = te
			if !had || !sameOffer(old, te) {
				c.changedLocked()
			}
			return
		}
	}
	if had {
		delete(c.m, key)
		c.changedLocked()
	}
}

// sameOffer reports whether a and b describe the same tool to turns: everything but who serves
// it and since when, which every heartbeat changes.
func sameOffer(a, b events.ToolEntry) bool {
	return a.Name == b.Name && a.Description == b.Description && bytes.Equal(a.Parameters, b.Parameters) &&
		slices.Equal(a.Platforms, b.Platforms) && slices.Equal(a.Scopes, b.Scopes) && slices.Equal(a.Roles, b.Roles) &&
		a.Idempotent == b.Idempotent && a.PreExecutable == b.PreExecutable && a.TimeoutMs == b.TimeoutMs && a.Source == b.Source &&
		slices.Equal(a.Keywords, b.Keywords)
}

func (c *ToolCatalog) changedLocked() {
	sorted := make([]events.ToolEntry, 0, len(c.m))
	for _, t := range c.m {
		sorted = append(sorted, t)
	}
	slices.SortFunc(sorted, func(a, b events.ToolEntry) int { return strings.Compare(a.Name, b.Name) })
	c.sorted = sorted
	c.views = nil
}

// Refresh reads the bucket once (used before the watcher caught up, and by tests).
func (c *ToolCatalog) Refresh(ctx context.Context) error {
	keys, err := c.kv.ListKeys(ctx)
	if err != nil {
		return err
	}
	for k := range keys.Keys() {
		e, err := c.kv.Get(ctx, k)
		if err == nil {
			c.apply(e)
		}
	}
	return nil
}

// For returns the tools the sender of m may use here, sorted by name. The slice is shared:
// read-only.
func (c *ToolCatalog) For(m events.IMMessage) []events.ToolEntry { return c.view(m).entries }

// view returns the memoized toolView for m's kind of sender.
func (c *ToolCatalog) view(m events.IMMessage) *toolView {
	key := viewKey{m.Platform, m.Scene.Type, strings.Join(m.Sender.Roles, "\x00")}
	c.mu.RLock()
	v := c.views[key]
	c.mu.RUnlock()
	if v != nil {
		return v
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v = c.views[key]; v != nil {
		return v
	}
	v = &toolView{index: map[string]int{}}
	for _, t := range c.sorted {
		if len(t.Platforms) > 0 && !slices.Contains(t.Platforms, m.Platform) {
			continue
		}
		if len(t.Scopes) > 0 && !slices.Contains(t.Scopes, m.Scene.Type) {
			continue
		}
		if len(t.Roles) > 0 && !slices.ContainsFunc(t.Roles, m.Sender.HasRole) {
			continue
		}
		v.index[t.Name] = len(v.entries)
		v.entries = append(v.entries, t)
		v.avail = append(v.avail, tools.Tool{Name: t.Name, Description: t.Description, Parameters: t.Parameters, Keywords: t.Keywords})
		v.agent = append(v.agent, loop.AgentTool{Tool: llm.Tool{Name: t.Name, Description: t.Description, Parameters: t.Parameters}})
		if t.PreExecutable {
			v.pre = append(v.pre, t)
		}
	}
	if c.views == nil || len(c.views) >= maxViews {
		c.views = map[viewKey]*toolView{}
	}
	c.views[key] = v
	return v
}

func (c *ToolCatalog) count() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}

// served reports whether the registry lists a tool worker serving the tool (entries expire
// when their workers stop refreshing them).
func (c *ToolCatalog) served(name string) bool {
	t, ok := c.entry(name)
	return ok && len(t.Workers) > 0
}

func (c *ToolCatalog) entry(name string) (events.ToolEntry, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	t, ok := c.m[events.EncodeToken(name)]
	return t, ok
}

// busExecutor runs a tool call on a tool worker: the call goes to TOOL_CALLS (deduplicated on
// the call id) and the result is read from TOOL_RESULTS, where it may already be if this is a
// resumed turn.
type busExecutor struct {
	w     *Worker
	scope callScope
	// resumed: results may exist from before a takeover, so look for one before requesting.
	resumed bool
	// flush waits until the turn's recorded messages are stored (nil for subagents).
	flush func(context.Context) error
	// subscribed: the session's results already reach the worker's router (a session actor
	// subscribes once); otherwise each call subscribes to its own result.
	subscribed bool
	// fresh: no call of this executor was requested before (see turnRun.fresh).
	fresh bool
	// busID maps a model call id to its bus id (nil: the scope's turn plus the model's id).
	busID func(callID string) string
}

// callScope is who a tool call is made for: the session answering it, the turn (or task)
// that scopes its ids, and the caller the tool worker gates on.
type callScope struct {
	sk     events.SessionKey
	turn   string
	sid    string
	trace  string
	caller events.Caller
	// model serves the turn (nil: unknown); its id and resolved harness size go with each
	// call, so that tools sized by the model (activate_skill) see the turn's model.
	model *llm.Model
}

// executor returns the bus executor of a turn.
func (t *turnRun) executor() *busExecutor {
	m := t.msg
	return &busExecutor{w: t.a.w, resumed: t.resumed, flush: t.flush, subscribed: t.a.resultSub != nil,
		fresh: t.fresh && !t.resumed, busID: t.busID, scope: callScope{sk: t.a.sk, turn: t.id, sid: t.sidStr, trace: t.trace,
			caller: events.Caller{Platform: m.Platform, Bot: m.Bot, Scope: t.a.sk.Scope, SenderID: m.Sender.ID, Roles: m.Sender.Roles},
			model:  t.model}}
}

// ErrToolTimeout is the error result of a call no tool worker answered in time.
var ErrToolTimeout = errors.New("tool call timed out")

// Execute runs one call. On the bus the call id is the turn id plus the model's id: models
// (and small local servers) reuse ids like "call_0" across turns, and the bus keys results by
// id, so a bare model id could pick up another turn's result.
func (x *busExecutor) Execute(ctx context.Context, call loop.ToolCallRequest) (loop.ToolResult, error) {
	w, sc := x.w, x.scope
	if x.flush != nil {
		// A bus that is briefly away (a node lost, a leader being elected) is waited for: a
		// failure here would reach the model as a failed tool call.
		if err := retryTransient(ctx, func() error { return x.flush(ctx) }); err != nil {
			return loop.ToolResult{}, err
		}
	}
	busID := sc.turn + "-" + call.ID
	if x.busID != nil {
		busID = x.busID(call.ID)
	}
	subj := events.ToolResultSubject(sc.sk, busID)
	results, done := w.router.expect(subj)
	defer done()
	if !x.subscribed {
		sub, err := w.nc.ChanSubscribe(subj, w.router.in)
		if err != nil {
			return loop.ToolResult{}, fmt.Errorf("subscribe %s: %w", subj, err)
		}
		defer sub.Unsubscribe()
	}
	if x.resumed {
		if res, ok := x.existing(ctx, subj); ok {
			return x.after(ctx, call, res), nil
		}
	}
	timeout := w.opts.ToolTimeout
	entry, _ := w.tools.entry(call.Name)
	if entry.TimeoutMs > 0 {
		timeout = time.Duration(entry.TimeoutMs) * time.Millisecond
	}
	tc := events.ToolCall{
		CallID: busID, Tool: call.Name, Args: call.Args, SessionKey: sc.sk, Turn: sc.turn,
		Caller:     sc.caller,
		Deadline:   time.Now().Add(timeout).UnixMilli(),
		Idempotent: entry.Idempotent,
		Fresh:      x.fresh,
	}
	if m := sc.model; m != nil {
		h := models.ResolveHarness(w.opts.AI.Agent, m.Provider, m.ID)
		tc.Model, tc.ModelSize, tc.SkillChars = m.Provider+"/"+m.ID, h.ModelSizeHint, h.SkillInstructionMaxChars
	}
	if dl, ok := ctx.Deadline(); ok && dl.UnixMilli() < tc.Deadline {
		tc.Deadline = dl.UnixMilli() // a background task's time limit bounds its tool call too
	}
	if tc.Args == nil {
		tc.Args = map[string]any{}
	}
	ev := events.New(tc, events.WithSession(sc.sid), events.WithTurn(sc.turn), events.WithTrace(sc.trace))
	m, err := events.NewMsg(events.ToolCallSubject(call.Name), ev)
	if err != nil {
		return loop.ToolResult{}, err
	}
	tracing.InjectNATS(ctx, m.Header) // the tool worker's span continues the call's
	// Retried under the same Nats-Msg-Id (the call id): a publish that timed out may have been
	// stored, and the stream drops the repeat.
	var ack *jetstream.PubAck
	if err := retryTransient(ctx, func() error {
		var err error
		ack, err = w.publishOnce(ctx, m)
		return err
	}); err != nil {
		return loop.ToolResult{}, fmt.Errorf("request tool %s: %w", call.Name, err)
	}
	res, err := x.await(ctx, call.Name, subj, results, m, ack.Sequence, time.UnixMilli(tc.Deadline))
	if err != nil {
		return res, err
	}
	return x.after(ctx, call, res), nil
}

// after does what a tool's result asks of the turn worker itself, for the session and caller
// of this executor (never ones the result names): schedule_followup's reminder, which tool
// workers may not write (schedule.ApplyFollowUp). A reminder that cannot be written turns the
// result into an error the model sees.
func (x *busExecutor) after(ctx context.Context, call loop.ToolCallRequest, res loop.ToolResult) loop.ToolResult {
	if call.Name != schedule.FollowUpToolName || res.IsError || x.w.bg == nil {
		return res
	}
	sc := x.scope
	asked, err := schedule.ApplyFollowUp(ctx, x.w.bg.scheds, sc.sk, res.Details, events.Sender{ID: sc.caller.SenderID})
	switch {
	case !asked:
		return res
	case errors.Is(err, schedule.ErrBadSchedule) && x.resumed:
		return res // a resumed turn's old reminder that has fired meanwhile
	case err != nil:
		x.w.log.Warn("reminder not scheduled", "session", sc.sk.String(), "turn", sc.turn, "err", err)
		return loop.ToolResult{Content: []llm.Content{llm.Text("schedule_followup: the reminder could not be scheduled: " + err.Error())}, IsError: true}
	}
	return res
}

// await waits for the result of a requested call. A result counts whenever it arrives: the
// call's fate is known only from its result, so the wait does not end with the call's
// deadline. After the deadline a tool worker no longer starts the call (it records "not run:
// deadline passed"), so a result does come as long as a worker serves the tool. Results arrive
// as core messages; one published while the subscription was away (the connection was
// reconnecting to another NATS node) is found in TOOL_RESULTS (the leader's answer): await
// looks there firstLook after the request and then every recheck, deadline or not, and
// meanwhile:
//   - when the request left TOOL_CALLS without a result (the stream's limits removed it), it
//     asks again under the same call id, which the tool workers run at most once;
//   - when the deadline passed, the request is still queued and no tool worker serves the tool
//     any more, it withdraws the request; once the withdrawal succeeded nobody can start the
//     call, and that is what the model is told.
//
// ctx (the turn) bounds the wait.
func (x *busExecutor) await(ctx context.Context, tool, subj string, results <-chan *nats.Msg, req *nats.Msg, reqSeq uint64, deadline time.Time) (loop.ToolResult, error) {
	w := x.w
	recheck := min(max(time.Until(deadline)/4, time.Second), 10*time.Second)
	timer := time.NewTimer(min(firstLook, time.Until(deadline)+time.Second))
	defer timer.Stop()
	asked := 1
	for {
		select {
		case msg := <-results:
			if res, ok := decodeResult(msg); ok {
				return res, nil
			}
			continue
		case <-ctx.Done():
			return loop.ToolResult{}, ctx.Err()
		case <-timer.C:
		}
		// A result may have been stored while nothing was subscribed, or routed past us.
		if res, ok := x.existing(ctx, subj); ok {
			return res, nil
		}
		timer.Reset(recheck)
		lctx, cancel := context.WithTimeout(ctx, busTimeout)
		queued, err := natsutil.LeaderGetMsg(lctx, w.js, events.StreamToolCalls, natsutil.MsgQuery{Seq: reqSeq})
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound) || err == nil && queued.Subject != req.Subject:
			// Gone without a result: ask again (a fresh dedupe id, the same call id).
			asked++
			again := &nats.Msg{Subject: req.Subject, Data: req.Data, Header: nats.Header{}}
			for k, v := range req.Header {
				again.Header[k] = v
			}
			again.Header.Set(nats.MsgIdHdr, fmt.Sprintf("%s.r%d", req.Header.Get(nats.MsgIdHdr), asked))
			ack, perr := w.publishOnce(ctx, again)
			if perr != nil {
				w.log.WarnContext(ctx, "re-request tool call", "tool", tool, "subject", subj, "err", perr)
				continue
			}
			reqSeq = ack.Sequence
			w.log.WarnContext(ctx, "tool call left the queue without a result; asked again", "tool", tool, "subject", subj, "attempt", asked)
		case err != nil:
			w.log.WarnContext(ctx, "check tool call request", "tool", tool, "subject", subj, "err", err)
		case time.Now().After(deadline) && !w.tools.served(tool):
			dctx, cancel := context.WithTimeout(ctx, busTimeout)
			derr := w.calls.DeleteMsg(dctx, reqSeq)
			cancel()
			if derr == nil {
				// Withdrawn before any worker took it, unless one already holds it: a result
				// from such a worker would have been found above or arrives on the next look.
				if res, ok := x.existing(ctx, subj); ok {
					return res, nil
				}
				return loop.ToolResult{}, fmt.Errorf("%w: %s was not run: no tool worker serves it (the request was withdrawn after its deadline)", ErrToolTimeout, tool)
			}
		case time.Now().After(deadline):
			w.log.InfoContext(ctx, "still waiting for a tool result", "tool", tool, "subject", subj, "past_deadline", time.Since(deadline).Round(time.Second))
		}
	}
}

// firstLook is when await first looks for a result in TOOL_RESULTS: most calls are answered
// well before it (and cost no look); one whose result went past a reconnecting subscription
// waits this long, not until its deadline.
const firstLook = 2 * time.Second

func (x *busExecutor) existing(ctx context.Context, subj string) (loop.ToolResult, bool) {
	ctx, cancel := context.WithTimeout(ctx, busTimeout)
	defer cancel()
	raw, err := natsutil.GetMsg(ctx, x.w.js, x.w.results, natsutil.MsgQuery{LastFor: subj})
	if err != nil {
		return loop.ToolResult{}, false
	}
	return decodeResult(&nats.Msg{Data: raw.Data, Header: raw.Header})
}

func decodeResult(msg *nats.Msg) (loop.ToolResult, bool) {
	var ev events.Event[events.ToolResult]
	if err := events.UnmarshalMsg(msg, &ev); err != nil {
		return loop.ToolResult{}, false
	}
	r := ev.Data
	return loop.ToolResult{Content: r.Content, Details: r.Details, IsError: r.IsError}, true
}
