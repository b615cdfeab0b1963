package toolworker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbus/agentbus/internal/jsconflict"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/metrics"
	"github.com/agentbus/agentbus/pkg/store"
	"github.com/agentbus/agentbus/pkg/tools"
	"github.com/agentbus/agentbus/pkg/tracing"
)

// call is one request being handled.
type call struct {
	msg   jetstream.Msg
	meta  *jetstream.MsgMetadata
	ev    events.Event[events.ToolCall]
	start time.Time
	nm    nats.Msg // msg as a core message, for events.UnmarshalMsg
	// span is the call's execute_tool span (a no-op one with tracing off); failed says its
	// result was an error.
	span   trace.Span
	failed bool
	// marked says the call has a started marker in KV tool_markers (this attempt's or an
	// earlier one's), purged once its result is stored.
	marked bool
}

func (c *call) subject() string {
	return events.ToolResultSubject(c.ev.Data.SessionKey)
}

// since is where the search for the call's result starts. A fresh call (never requested
// before its request was made) can have no result older than its request: the request's
// creation less store.ToolResultSkew. Any other call id may have been answered for an
// earlier request (a subagent or deferred task run again, a resumed turn): the whole of what
// TOOL_RESULTS retains for the session, as the subject per call answered before issue 41.
func (c *call) since() time.Time {
	if !c.ev.Data.Fresh || c.ev.Time <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(c.ev.Time).Add(-store.ToolResultSkew)
}

// handle runs the steps listed in the package doc for one delivered request.
func (h *Handle) handle(s *served, msg jetstream.Msg) {
	h.progress.Add(msg)
	defer h.progress.Remove(msg)
	c := &call{msg: msg, start: time.Now()}
	meta, err := msg.Metadata()
	if err != nil {
		meta = &jetstream.MsgMetadata{NumDelivered: 1}
	}
	c.meta = meta
	c.nm.Subject, c.nm.Data, c.nm.Header = msg.Subject(), msg.Data(), msg.Headers()
	if err := events.UnmarshalMsg(&c.nm, &c.ev); err != nil {
		h.malformed(s, c, err)
		return
	}
	if c.ev.Data.Tool != s.name {
		h.malformed(s, c, fmt.Errorf("tool.call event: tool %q does not match subject %s (tool %q)", c.ev.Data.Tool, msg.Subject(), s.name))
		return
	}
	tc := c.ev.Data
	if tracing.Enabled(h.opts.Tracer) { // off, not even the span's name and options are built
		_, c.span = tracing.StartToolNATS(context.Background(), h.opts.Tracer, c.nm.Header, c.ev.Trace, tc.Tool, tc.CallID)
		defer func() { tracing.EndTool(c.span, c.failed) }()
	}

	// One handling per call id on this worker: a duplicate waits for the first to finish and
	// then finds its result.
	mine, ok := h.claim(tc.CallID)
	if !ok {
		return // killed while waiting
	}
	defer h.release(tc.CallID, mine)

	// A call its caller marks fresh was never requested before, so on its first delivery no
	// result can exist yet.
	fresh := tc.Fresh && meta.NumDelivered == 1
	switch err := h.resultExists(fresh, c); {
	case err == nil:
		h.ack(c)
		return
	case !errors.Is(err, jetstream.ErrMsgNotFound):
		if h.killed.Load() {
			return
		}
		h.logFor(c).Warn("tool worker: cannot check for an existing result; retrying later", "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}

	if int(meta.NumDelivered) > h.opts.MaxAttempts {
		reason := fmt.Sprintf("tool %s was not run: its call was delivered %d times without a recorded result (the workers handling it kept failing or crashing); giving up",
			tc.Tool, meta.NumDelivered)
		h.logFor(c).Error("tool worker: giving up on call", "deliveries", meta.NumDelivered)
		h.deadLetter(c, events.DLQMaxDeliveries, errors.New(reason))
		h.finish(c, tools.ErrorResult("%s", reason))
		return
	}
	if tc.Expired(time.Now()) {
		h.finish(c, tools.ErrorResult("tool %s was not run: deadline passed (the caller stopped waiting at %s)",
			tc.Tool, time.UnixMilli(tc.Deadline).UTC().Format(time.RFC3339)))
		return
	}
	t, ok := h.opts.Registry.Get(tc.Tool)
	if !ok {
		if int(meta.NumDelivered) < h.opts.MaxAttempts {
			_ = msg.NakWithDelay(time.Second) // another worker may still serve it
			return
		}
		h.finish(c, tools.ErrorResult("tool %s is not served by any tool worker right now", tc.Tool))
		return
	}
	env := envOf(tc, h.opts.Workspace)
	if why := refusal(t, tc, env); why != "" {
		h.logFor(c).Info("tool worker: call refused", "why", why)
		h.finish(c, tools.ErrorResult("tool %s refused: %s", tc.Tool, why))
		return
	}
	args, err := t.CheckArgs(tc.Args)
	if err != nil {
		h.finish(c, tools.ErrorResult("%v", err))
		return
	}
	if args, err = h.toolBefore(c, t, args); err != nil {
		h.finish(c, tools.ErrorResult("%v", err))
		return
	}
	timeout := h.timeoutFor(t.Name)
	if !t.Idempotent {
		proceed, rev := h.markStarted(c, t, timeout)
		if !proceed {
			return
		}
		stop := h.beatAttempt(c, rev)
		defer stop()
	}
	start := time.Now()
	res := h.run(t, tools.Call{ID: tc.CallID, Args: args, Env: env}, tc.Deadline, timeout)
	if h.killed.Load() {
		return
	}
	res = h.toolAfter(c, args, res)
	outcome := metrics.OutcomeOK
	if res.IsError {
		outcome = metrics.OutcomeError
	}
	h.opts.Metrics.Call(t.Name, outcome, time.Since(start))
	h.finish(c, res)
}

// logFor returns the logger for messages about call c. It is built when something is logged,
// not per call: With formats its attributes up front.
func (h *Handle) logFor(c *call) *slog.Logger {
	return h.log.With("tool", c.ev.Data.Tool, "call", c.ev.Data.CallID, "session", c.ev.Session, "turn", c.ev.Turn, "trace", c.ev.Trace)
}

// claim makes this handler the only one of callID on this worker, waiting for another
// handler of the same id to end first; release(callID, mine) ends the claim. ok is false when
// the worker was killed meanwhile.
func (h *Handle) claim(callID string) (mine chan struct{}, ok bool) {
	for {
		h.mu.Lock()
		ch, busy := h.inflight[callID]
		if !busy {
			mine := make(chan struct{})
			h.inflight[callID] = mine
			h.mu.Unlock()
			return mine, true
		}
		h.mu.Unlock()
		select {
		case <-ch:
		case <-h.killCtx.Done():
			return nil, false
		}
	}
}

// release ends a claim, letting a waiting duplicate of callID go on.
func (h *Handle) release(callID string, mine chan struct{}) {
	h.mu.Lock()
	delete(h.inflight, callID)
	h.mu.Unlock()
	close(mine)
}

// marker is the value of the "started" record of a non-idempotent call in KV tool_markers
// (and in KV delivered, written by versions before issue 41).
type marker struct {
	Worker string `json:"worker"`
	// Instance is the run of the worker that started the attempt (events.ToolAttemptSubject);
	// empty in markers of older versions, which are watched by their beats alone.
	Instance  string `json:"instance,omitempty"`
	Tool      string `json:"tool"`
	StartedAt int64  `json:"startedAt"`
	// Until is when that attempt stops waiting for the tool (its timeout), Unix ms.
	Until int64 `json:"until"`
}

// MarkerKey is the KV tool_markers key of a non-idempotent call's started marker.
func MarkerKey(callID string) string { return events.EncodeToken(callID) }

// LegacyMarkerKey is the KV delivered key versions before issue 41 gave the marker. Egress
// keys there are bare tokens, which never contain '.', so the "tool." prefix kept the two apart.
func LegacyMarkerKey(callID string) string { return "tool." + events.EncodeToken(callID) }

// markerPurgeTTL is how long the purge marker a finished call leaves in KV tool_markers is
// kept (a message TTL): nothing reads it, so only long enough for a watcher to see it. At a
// rate of r non-idempotent calls a second the bucket holds about r × 60 s purge markers besides
// the calls in flight.
const markerPurgeTTL = time.Minute

// attemptBeat is how often a running non-idempotent attempt rewrites its started marker, and
// attemptDead how long a marker may stay unchanged before a later attempt takes the earlier one
// for dead (its worker was killed): then the call is answered "interrupted" at once instead of
// after the earlier attempt's whole timeout. The check watches the marker's revision, not
// clocks, so clock skew between workers does not matter.
const (
	attemptBeat = time.Second
	attemptDead = 3 * attemptBeat
)

// beatAttempt rewrites the marker at revision rev every attemptBeat while the call runs (a CAS, so a
// marker someone else moved is left alone); the returned func stops it.
func (h *Handle) beatAttempt(c *call, rev uint64) func() {
	done := make(chan struct{})
	stopped := make(chan struct{})
	key := MarkerKey(c.ev.Data.CallID)
	go func() {
		defer close(stopped)
		t := time.NewTicker(attemptBeat)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-h.killCtx.Done():
				return
			case <-t.C:
			}
			e, err := h.markers.Get(h.killCtx, key)
			if err != nil || e.Revision() != rev {
				continue
			}
			ctx, cancel := context.WithTimeout(h.killCtx, attemptBeat)
			nrev, err := h.markers.Update(ctx, key, e.Value(), rev)
			cancel()
			if err == nil {
				rev = nrev
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}

// markStarted records that a non-idempotent call is about to run. It reports whether to run it
// (and the marker's revision, for beatAttempt); when an earlier attempt had already started, it
// settles the call itself (waiting for that attempt's result while the attempt is alive, else
// answering that the call was interrupted) and reports false.
//
// A marker is purged once its call's result is stored (finish), so creating one succeeds again
// after a finished attempt: the create is therefore followed by a look for the result
// (confirmed with the stream leader), which finds the result of any attempt whose marker is
// gone, since a result is stored before its marker is purged.
func (h *Handle) markStarted(c *call, t tools.Tool, timeout time.Duration) (bool, uint64) {
	now := time.Now()
	until := now.Add(timeout)
	if d := c.ev.Data.Deadline; d > 0 && time.UnixMilli(d).Before(until) {
		until = time.UnixMilli(d)
	}
	// A marker an older version wrote in KV delivered says as much as one of ours, until the
	// bucket's TTL (7 days) removes it.
	if h.legacy != nil {
		e, err := h.legacy.Get(h.killCtx, LegacyMarkerKey(c.ev.Data.CallID))
		switch {
		case err == nil:
			h.settleStarted(c, t, h.legacy, LegacyMarkerKey(c.ev.Data.CallID), e)
			return false, 0
		case !errors.Is(err, jetstream.ErrKeyNotFound):
			if h.killed.Load() {
				return false, 0
			}
			h.logFor(c).Warn("tool worker: cannot look for an older started marker; retrying later", "err", err)
			_ = c.msg.NakWithDelay(time.Second)
			return false, 0
		}
	}
	val, _ := json.Marshal(marker{Worker: h.opts.ID, Instance: h.instance, Tool: t.Name, StartedAt: now.UnixMilli(), Until: until.UnixMilli()})
	key := MarkerKey(c.ev.Data.CallID)
	rev, err := h.createMarker(key, val, until)
	if err == nil {
		c.marked = true
		switch err := h.resultExists(false, c); {
		case err == nil: // an earlier attempt finished and its marker was purged
			h.ack(c)
			h.purgeMarker(c)
			return false, 0
		case !errors.Is(err, jetstream.ErrMsgNotFound):
			if h.killed.Load() {
				return false, 0
			}
			// Withdraw the marker (only if still ours as written): the redelivery must not
			// take this attempt, which never ran the tool, for one that may have.
			h.logFor(c).Warn("tool worker: cannot check for an existing result after marking the start; retrying later", "err", err)
			h.purgeMarker(c, jetstream.LastRevision(rev))
			_ = c.msg.NakWithDelay(time.Second)
			return false, 0
		}
		return true, rev
	}
	if h.killed.Load() {
		return false, 0
	}
	if !jsconflict.Is(err) {
		h.logFor(c).Warn("tool worker: cannot record the start of a non-idempotent call; retrying later", "err", err)
		_ = c.msg.NakWithDelay(time.Second)
		return false, 0
	}
	c.marked = true // the earlier attempt's: purged with this call's result
	e, err := h.markers.Get(h.killCtx, key)
	if err != nil {
		e = nil // purged meanwhile (its result is stored) or unreadable: wait for the result only
	}
	h.settleStarted(c, t, h.markers, key, e)
	return false, 0
}

// settleStarted settles a call whose earlier attempt started it: the marker e (nil when it
// could not be read) is at key in kv. It waits until the attempt's own timeout has passed, or
// until its process is known to be gone or done with it (asked directly), or until its marker
// stops beating, and acks the call once the attempt's result is stored; else it answers that
// the call was interrupted.
func (h *Handle) settleStarted(c *call, t tools.Tool, kv jetstream.KeyValue, key string, e jetstream.KeyValueEntry) {
	var prev marker
	var prevRev uint64
	waitUntil := time.Now()
	if e != nil && json.Unmarshal(e.Value(), &prev) == nil && prev.Until > 0 {
		waitUntil = time.UnixMilli(prev.Until)
		prevRev = e.Revision()
	}
	waitUntil = waitUntil.Add(h.opts.InterruptGrace)
	h.logFor(c).Info("tool worker: non-idempotent call started before; waiting for that attempt's result",
		"previousWorker", prev.Worker, "until", waitUntil, "bucket", kv.Bucket())
	if h.awaitAttempt(c, kv, key, prev.Instance, prevRev, waitUntil) {
		h.ack(c)
		if c.marked {
			h.purgeMarker(c) // the earlier attempt may have died between its result and its purge
		}
		return
	}
	if h.killed.Load() {
		return
	}
	who := ""
	if prev.Worker != "" {
		who = " on worker " + prev.Worker
	}
	h.finish(c, tools.ErrorResult("tool %s was interrupted after it started%s and is not idempotent; not retried automatically (it may or may not have taken effect — check before calling it again)",
		t.Name, who))
}

// purgeMarker purges the call's started marker in KV tool_markers, leaving a purge marker that
// expires after markerPurgeTTL. Called once the call's result is stored (or, with
// LastRevision, to withdraw a marker whose attempt never ran). A failed purge leaves the
// marker to the bucket's TTL, which is harmless: every later delivery finds the result first.
func (h *Handle) purgeMarker(c *call, opts ...jetstream.KVDeleteOpt) {
	if h.killed.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(h.killCtx, markerAttempt)
	defer cancel()
	if err := h.markers.Purge(ctx, MarkerKey(c.ev.Data.CallID), append(opts, jetstream.PurgeTTL(markerPurgeTTL))...); err != nil && !h.killed.Load() {
		h.logFor(c).Warn("tool worker: cannot purge the started marker; it stays until the bucket's TTL", "err", err)
	}
}

// createMarker creates the started marker key with val and returns its revision. A create
// that fails for the bus (a NATS node lost: the bucket's stream elects a leader, a request sent
// to the dead node is never answered) is tried again, each try bounded by markerAttempt, until
// it succeeds, the key is someone else's (jsconflict.Is), or until passes: the call's request
// is held meanwhile (in-progress acks), so the call is not redelivered. A try that timed out may
// have stored val all the same; the next try then finds the key taken, and the marker is this
// very attempt's when it holds exactly val (which names this process's run and the start time
// to the millisecond): the call has not run, so it runs now instead of being answered
// "interrupted" by its own never-started attempt.
func (h *Handle) createMarker(key string, val []byte, until time.Time) (uint64, error) {
	wait := 100 * time.Millisecond
	uncertain := false // a try failed for the bus: val may be stored
	for {
		ctx, cancel := context.WithTimeout(h.killCtx, markerAttempt)
		rev, err := h.markers.Create(ctx, key, val)
		cancel()
		if err == nil {
			return rev, nil
		}
		if jsconflict.Is(err) {
			if !uncertain {
				return 0, err
			}
			ctx, cancel := context.WithTimeout(h.killCtx, markerAttempt)
			e, gerr := h.markers.Get(ctx, key)
			cancel()
			switch {
			case gerr == nil && bytes.Equal(e.Value(), val):
				return e.Revision(), nil
			case gerr == nil:
				return 0, err
			}
			err = gerr
		}
		uncertain = true
		if h.killCtx.Err() != nil || time.Now().Add(wait).After(until) {
			return 0, err
		}
		t := time.NewTimer(wait)
		select {
		case <-h.killCtx.Done():
			t.Stop()
			return 0, err
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// markerAttempt bounds one request of createMarker: a healthy leader answers well within it.
const markerAttempt = 2 * time.Second

// resultExists reports nil when a result of the call is stored, jetstream.ErrMsgNotFound when
// there is none (without asking when fresh), or the error of the look-up.
func (h *Handle) resultExists(fresh bool, c *call) error {
	if fresh {
		return jetstream.ErrMsgNotFound
	}
	// Confirmed with the stream leader: a lagging replica's "not found" would run the call twice.
	_, err := store.FindToolResult(h.killCtx, h.opts.JS, h.results, c.ev.Data.SessionKey, c.ev.Data.CallID, c.since())
	return err
}

// awaitAttempt waits for the result of an earlier attempt whose marker is key in kv at
// revision rev and names the worker run instance: it reports true once the result is stored, false when until
// passes or the attempt is known to be over without a result. Each round it first asks the
// attempt's process (probeAttempt): "no responders" means the process is gone, "idle" that it no
// longer handles the call, and either ends the wait after a last look for the result; an
// unanswered probe (or a marker without an instance) falls back to the marker's beats: a live
// attempt rewrites its marker every attemptBeat, so one that has not moved for attemptDead
// belongs to a worker that is gone.
func (h *Handle) awaitAttempt(c *call, kv jetstream.KeyValue, key, instance string, rev uint64, until time.Time) bool {
	if rev == 0 {
		return h.awaitResult(c, until)
	}
	moved := time.Now()
	for {
		if instance != "" {
			switch p := h.probeAttempt(instance, c.ev.Data.CallID); p {
			case probeRunning:
				moved = time.Now() // as good as a beat
			case probeGone, probeIdle:
				// A finished attempt stores its result before it lets go of the call, and a
				// killed one may have stored it just before its connection closed: a short
				// look catches a store still being replicated.
				grace := time.Duration(0)
				if p == probeGone {
					grace = goneGrace
				}
				if h.awaitResult(c, time.Now().Add(grace)) {
					return true
				}
				h.logFor(c).Info("tool worker: the earlier attempt is over without a result", "instance", instance, "probe", p.String())
				return false
			}
		}
		next := time.Now().Add(attemptBeat)
		if until.Before(next) {
			next = until
		}
		if h.awaitResult(c, next) {
			return true
		}
		if !time.Now().Before(until) || h.killCtx.Err() != nil {
			return false
		}
		e, err := kv.Get(h.killCtx, key)
		switch {
		case err == nil && e.Revision() != rev:
			rev, moved = e.Revision(), time.Now()
		case err == nil && time.Since(moved) >= attemptDead:
			h.logFor(c).Info("tool worker: the earlier attempt stopped beating; its worker is gone", "since", moved)
			return false
		}
	}
}

// goneGrace is how long a call whose earlier attempt's process is gone still looks for that
// attempt's result before answering "interrupted": a result published just before the kill
// may still be on its way into the stream. It is short because a redelivery comes at least
// 2/3 AckWait after the last in-progress ack, so such a result has usually long been stored.
const goneGrace = 250 * time.Millisecond

// probe is what a probe of an earlier attempt's process found.
type probe int

const (
	probeUnknown probe = iota // no answer in time, or a failed request: watch the marker
	probeRunning              // the process still handles the call
	probeIdle                 // the process is alive and no longer handles the call
	probeGone                 // no process answers on the instance's subject
)

func (p probe) String() string {
	return [...]string{"unknown", "running", "idle", "gone"}[p]
}

// probeAttempt asks the worker run instance whether it still handles callID
// (events.ToolAttemptSubject). A killed process's connection closes with it, so its subject has
// no responders at once.
func (h *Handle) probeAttempt(instance, callID string) probe {
	if instance == h.instance {
		// The earlier attempt ran in this process, and claim lets one handler of a call id run
		// here at a time: it is over (asking would find this very handler).
		return probeIdle
	}
	ctx, cancel := context.WithTimeout(h.killCtx, attemptBeat)
	defer cancel()
	m, err := h.opts.NC.RequestWithContext(ctx, events.ToolAttemptSubject(instance), []byte(callID))
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return probeGone
	case err != nil:
		return probeUnknown
	case string(m.Data) == events.ToolAttemptRunning:
		return probeRunning
	case string(m.Data) == events.ToolAttemptIdle:
		return probeIdle
	}
	return probeUnknown
}

// awaitResult waits until a result for the call is stored or until passes.
func (h *Handle) awaitResult(c *call, until time.Time) bool {
	subj := c.subject()
	sub, err := h.opts.NC.SubscribeSync(subj)
	if err == nil {
		defer sub.Unsubscribe()
	}
	for {
		if h.resultExists(false, c) == nil {
			return true
		}
		left := time.Until(until)
		if left <= 0 || h.killCtx.Err() != nil {
			return false
		}
		step := min(left, time.Second)
		if sub == nil {
			select {
			case <-time.After(step):
			case <-h.killCtx.Done():
				return false
			}
			continue
		}
		// The session's subject carries every call's results: wait for this call's (or the
		// step) before looking again.
		ctx, cancel := context.WithTimeout(h.killCtx, step)
		for {
			m, err := sub.NextMsgWithContext(ctx)
			if err != nil || store.ToolResultCallID(m.Header, m.Data) == c.ev.Data.CallID {
				break
			}
		}
		cancel()
	}
}

// run executes the tool with its timeout (never past the call's deadline). A tool that ignores
// its context is abandoned at the timeout; its result is then an error.
func (h *Handle) run(t tools.Tool, tc tools.Call, deadline int64, timeout time.Duration) tools.Result {
	ctx, cancel := context.WithTimeout(h.killCtx, timeout)
	defer cancel()
	byDeadline := false
	if deadline > 0 {
		if dl := time.UnixMilli(deadline); dl.Before(time.Now().Add(timeout)) {
			var c2 context.CancelFunc
			ctx, c2 = context.WithDeadline(ctx, dl)
			defer c2()
			byDeadline = true
		}
	}
	done := make(chan tools.Result, 1)
	go func() { done <- t.Run(ctx, tc) }()
	var res tools.Result
	select {
	case res = <-done:
		if ctx.Err() == nil || !res.IsError {
			return res
		}
	case <-ctx.Done():
	}
	if byDeadline {
		return tools.ErrorResult("tool %s did not finish before the call's deadline (the caller stopped waiting)", t.Name)
	}
	return tools.ErrorResult("tool %s timed out after %s", t.Name, timeout)
}

// finish records res as the call's result (waiting for the PubAck) and acks the request.
func (h *Handle) finish(c *call, res tools.Result) {
	if h.killed.Load() {
		return
	}
	tc := c.ev.Data
	step := tc.Step // the turn's record of the call's step: stored with the result (ToolCall.Step)
	if h.opts.NoStepCopy {
		step = nil
	}
	m, err := resultMsg(c.ev.Meta, tc.SessionKey, tc.CallID, tc.Tool, res, h.opts.ID, time.Since(c.start), h.opts.NC.MaxPayload(), step)
	if err == nil {
		c.failed = res.IsError
		if c.span != nil {
			tracing.InjectSpanContext(c.span.SpanContext(), m.Header)
		}
		err = h.publish(m)
	}
	if err != nil {
		if h.killed.Load() {
			return
		}
		h.log.Error("tool worker: cannot record result; the call will be redelivered", "tool", tc.Tool, "call", tc.CallID, "err", err)
		_ = c.msg.NakWithDelay(time.Second)
		return
	}
	h.ack(c)
	if c.marked {
		// Only now: every later delivery of the call finds the result before it looks at a
		// marker (and a marker created after the purge is followed by that look, markStarted).
		h.purgeMarker(c)
	}
}

// publish sends a message to JetStream with a few quick retries (a result is expensive to
// recompute and, for non-idempotent tools, cannot be).
func (h *Handle) publish(m *nats.Msg) error {
	var err error
	for i, wait := 0, 50*time.Millisecond; i < 4; i, wait = i+1, wait*4 {
		ctx, cancel := context.WithTimeout(h.killCtx, 5*time.Second)
		_, err = h.opts.JS.PublishMsg(ctx, m)
		cancel()
		if err == nil || h.killCtx.Err() != nil {
			return err
		}
		select {
		case <-time.After(wait):
		case <-h.killCtx.Done():
			return err
		}
	}
	return err
}

func (h *Handle) ack(c *call) {
	if h.killed.Load() {
		return
	}
	if err := c.msg.Ack(); err != nil {
		h.log.Warn("tool worker: ack", "subject", c.msg.Subject(), "err", err)
	}
}

// resultMsg builds the TOOL_RESULTS message for a call, with the call's correlation ids and
// the step its request carried (nil: none). An oversized result loses its content, never the
// step: the step may be the only stored copy of the turn's record once the request is acked.
func resultMsg(from events.Meta, sk events.SessionKey, callID, tool string, res tools.Result, worker string, took time.Duration, maxPayload int64, step json.RawMessage) (*nats.Msg, error) {
	content := res.Content
	if content == nil {
		content = []llm.Content{}
	}
	details := res.Details
	if res.NeedsOwner {
		details = withNeedsOwner(details)
	}
	tr := events.ToolResult{CallID: callID, Tool: tool, Content: content, IsError: res.IsError, Details: details,
		Worker: worker, DurationMs: took.Milliseconds(), Step: step}
	ev := events.New(tr, events.WithCorrelation(&from))
	subj := events.ToolResultSubject(sk)
	m, err := events.NewMsg(subj, ev)
	if err != nil {
		return nil, err
	}
	m.Header.Set(events.HeaderCallID, callID)
	// Leave room for headers; an oversized result is replaced by an error the model can act on.
	if maxPayload > 0 && int64(len(m.Data)) > maxPayload-4096 {
		ev.Data.Content = []llm.Content{llm.Text(fmt.Sprintf(
			"tool %s produced %d bytes of output, more than the bus can carry (%d); ask for less (narrower query, smaller range)",
			tool, len(m.Data), maxPayload))}
		ev.Data.Details, ev.Data.IsError = nil, true
		if m, err = events.NewMsg(subj, ev); err == nil {
			m.Header.Set(events.HeaderCallID, callID)
		}
		return m, err
	}
	return m, nil
}

func withNeedsOwner(d json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if len(d) == 0 || json.Unmarshal(d, &m) != nil || m == nil {
		w := map[string]any{"needsOwner": true}
		if len(d) > 0 {
			w["details"] = d
		}
		b, _ := json.Marshal(w)
		return b
	}
	m["needsOwner"] = json.RawMessage("true")
	b, _ := json.Marshal(m)
	return b
}

// malformed dead-letters an undecodable request and, when its call id and session key are
// readable, answers it with an error result so the waiting turn does not hang; then acks.
func (h *Handle) malformed(s *served, c *call, cause error) {
	h.log.Warn("tool worker: malformed tool call", "subject", c.msg.Subject(), "err", cause)
	h.deadLetter(c, events.DLQInvalid, cause)
	var peek struct {
		Data struct {
			CallID     string            `json:"callId"`
			Tool       string            `json:"tool"`
			SessionKey events.SessionKey `json:"sessionKey"`
		} `json:"data"`
	}
	_ = json.Unmarshal(c.msg.Data(), &peek) // best effort: type errors still fill the other fields
	d := peek.Data
	if d.CallID != "" && d.SessionKey.Validate() == nil {
		tool := d.Tool
		if tool == "" {
			tool = s.name
		}
		corr := events.CorrelationFromHeader(c.msg.Headers())
		from := events.Meta{Turn: corr.Turn, Trace: corr.Trace}
		if _, err := events.ParseSessionID(corr.Session); err == nil {
			from.Session = corr.Session
		} else {
			from.Session = d.SessionKey.String()
		}
		res := tools.ErrorResult("tool %s was not run: the request was malformed (%v)", tool, cause)
		if m, err := resultMsg(from, d.SessionKey, d.CallID, tool, res, h.opts.ID, time.Since(c.start), h.opts.NC.MaxPayload(), nil); err == nil {
			if err := h.publish(m); err != nil && !h.killed.Load() {
				h.log.Warn("tool worker: error result for malformed call", "err", err)
			}
		}
	}
	h.ack(c)
}

// deadLetter records the request on dlq.tool-worker.<reason> with the original bytes.
func (h *Handle) deadLetter(c *call, reason string, cause error) {
	if h.killed.Load() {
		return
	}
	dl := events.DeadLetter{Role: events.RoleToolWorker, Reason: reason, Error: cause.Error(), Subject: c.msg.Subject(),
		Stream: c.meta.Stream, Seq: c.meta.Sequence.Stream, Deliveries: c.meta.NumDelivered}
	if hdr := c.msg.Headers(); len(hdr) > 0 {
		dl.Headers = map[string][]string(hdr)
	}
	dl.SetBody(c.msg.Data())
	id := "tool-worker/" + reason + "/" + events.NewID()
	if c.meta.Sequence.Stream > 0 {
		id = "tool-worker/" + reason + "/" + c.meta.Stream + "/" + strconv.FormatUint(c.meta.Sequence.Stream, 10)
	}
	ev := events.New(dl, events.WithID(id))
	m, err := events.NewMsg(events.DeadLetterSubject(events.RoleToolWorker, reason), ev)
	if err == nil {
		if c.span != nil {
			tracing.InjectSpanContext(c.span.SpanContext(), m.Header)
		}
		err = h.publish(m)
	}
	if err != nil && !h.killed.Load() {
		h.log.Error("tool worker: dead letter", "subject", c.msg.Subject(), "err", err)
		return
	}
	h.opts.DeadLetters.Add(events.RoleToolWorker, reason)
}

// envOf is the tools.Env of a call: who it acts for, taken from the call's Caller and session.
func envOf(tc events.ToolCall, workspace string) tools.Env {
	return tools.Env{
		Platform: tc.Caller.Platform, BotID: tc.SessionKey.Bot, Scope: tc.Caller.Scope, SceneID: tc.SessionKey.Scene,
		SenderID: tc.Caller.SenderID, SenderRoles: normalizeRoles(tc.Caller.Roles), SessionKey: tc.SessionKey.String(),
		Workspace: workspace, Turn: tc.Turn,
		ModelID: modelID(tc.Model), ModelSize: tc.ModelSize, SkillChars: tc.SkillChars,
	}
}

// modelID is the model id of a "provider/model id" reference (ids may hold slashes too:
// "router/cu/claude-4.5-sonnet" is model "cu/claude-4.5-sonnet" of provider "router").
func modelID(ref string) string {
	if _, id, ok := strings.Cut(ref, "/"); ok {
		return id
	}
	return ref
}

// normalizeRoles maps the platform role names of events (owner, admin) to the tool API's
// (group_owner, group_admin); everyone is a user.
func normalizeRoles(in []string) []string {
	out := make([]string, 0, len(in)+1)
	out = append(out, tools.RoleUser)
	for _, r := range in {
		switch r {
		case events.RoleAdmin:
			r = tools.RoleGroupAdmin
		case events.RoleOwner:
			r = tools.RoleGroupOwner
		}
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// refusal re-checks the gating of t for the call (the turn worker filtered already; a tool
// worker never relies on that alone) and returns why it is refused, or "".
func refusal(t tools.Tool, tc events.ToolCall, env tools.Env) string {
	k := tc.SessionKey
	if tc.Caller.Platform != k.Platform || tc.Caller.Scope != k.Scope || (tc.Caller.Bot != "" && tc.Caller.Bot != k.Bot) {
		return fmt.Sprintf("the caller (%s/%s/%s) does not match the session %s", tc.Caller.Platform, tc.Caller.Bot, tc.Caller.Scope, k)
	}
	if len(t.Platforms) > 0 && !slices.Contains(t.Platforms, env.Platform) {
		return fmt.Sprintf("it is not available on platform %q (only %s)", env.Platform, strings.Join(t.Platforms, ", "))
	}
	if len(t.Scopes) > 0 && !slices.Contains(t.Scopes, env.Scope) {
		return fmt.Sprintf("it is not available in %s chats (only %s)", env.Scope, strings.Join(t.Scopes, ", "))
	}
	if !env.HasAnyRole(t.RequiredAnyRole...) {
		return fmt.Sprintf("it requires one of the roles %s and the sender has %s",
			strings.Join(t.RequiredAnyRole, ", "), strings.Join(env.SenderRoles, ", "))
	}
	return ""
}
