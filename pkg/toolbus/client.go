package toolbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/loop"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/store"
	"github.com/agentbus/agentbus/pkg/tracing"
)

// BusTimeout bounds one bus request of a call: a publish and the wait for its ack, a look
// into a stream, a withdrawal. The server answers such a request at once or not at all: a
// request, or its reply, lost while a NATS node dies (a stream without a leader drops it) is
// never answered, and a caller's ctx may run for the whole turn. The callers try again: a
// publish under the same Nats-Msg-Id, so one that did land is not stored twice.
const BusTimeout = 5 * time.Second

// Client requests tool calls on TOOL_CALLS and reads their results, for one turn-worker
// replica. Its fields are set once, before the first call; Executor makes the per-turn
// loop.ToolExecutor.
type Client struct {
	NC      *nats.Conn
	JS      jetstream.JetStream
	Results jetstream.Stream // TOOL_RESULTS: a result that went past the subscription
	Calls   jetstream.Stream // TOOL_CALLS: whether a request is still queued
	Router  *Router
	Catalog *Catalog
	// Timeout bounds a call whose catalogue entry names no timeout.
	Timeout time.Duration
	// Hints returns what a call tells the tool of the model it serves: the model's size
	// ("small", "medium", "large") and its skill-instruction budget in characters (the turn
	// worker resolves them from ai.agent.modelHarness). nil: calls carry neither.
	Hints func(provider, modelID string) (size string, skillChars int)
	// After does what a result asks of the caller itself (nil: nothing); see Call.Resumed.
	After func(ctx context.Context, sc Scope, resumed bool, call loop.ToolCallRequest, res loop.ToolResult) loop.ToolResult
	Log   *slog.Logger
}

// Call configures one Executor: who the calls are made for and how the turn runs them.
type Call struct {
	Scope Scope
	// Resumed: results may exist from before a takeover, so look for one before requesting.
	Resumed bool
	// Flush waits until the turn's recorded messages are stored (nil for subagents).
	Flush func(context.Context) error
	// Subscribed: the session's results already reach the Router (a session actor subscribes
	// once); otherwise each call subscribes to its own result.
	Subscribed bool
	// Fresh: no call of this executor was requested before.
	Fresh bool
	// Step returns the turn's records that the call's request carries (events.ToolCall.Step:
	// the step the call belongs to, and whatever else of the turn is not in AGENT_EVENTS);
	// nil: none. nil func: no call carries any.
	Step func() []byte
	// Withdrawing is called before a request that carries a step is withdrawn (deleted from
	// TOOL_CALLS after its deadline, no tool worker serving the tool): it must store what the
	// request carries elsewhere (the turn writes it to AGENT_EVENTS), because the withdrawal
	// deletes that copy. On error the request is not withdrawn (the next look tries again).
	Withdrawing func(ctx context.Context) error
	// BusID maps a model call id to its bus id (nil: the scope's turn plus the model's id).
	BusID func(callID string) string
	// Since bounds the looks for the results of calls that are not Fresh: none of them was
	// requested before it (zero: every result TOOL_RESULTS holds for the session, which is
	// exact whatever requested the call id before).
	Since time.Time
}

// Scope is who a tool call is made for: the session answering it, the turn (or task) that
// scopes its ids, and the caller the tool worker gates on.
type Scope struct {
	SK     events.SessionKey
	Turn   string
	SID    string
	Trace  string
	Caller events.Caller
	// Model serves the turn (nil: unknown); its id and resolved harness size go with each
	// call, so that tools sized by the model (activate_skill) see the turn's model.
	Model *llm.Model
}

// Executor runs tool calls on tool workers: the call goes to TOOL_CALLS (deduplicated on the
// call id) and the result is read from TOOL_RESULTS, where it may already be if this is a
// resumed turn.
type Executor struct {
	c *Client
	Call
}

// Executor returns the executor of one turn or task.
func (c *Client) Executor(call Call) *Executor { return &Executor{c: c, Call: call} }

// publishOnce is one publish of m, bounded by BusTimeout (or ctx, when that ends sooner).
func (c *Client) publishOnce(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error) {
	ctx, cancel := context.WithTimeout(ctx, BusTimeout)
	defer cancel()
	return c.JS.PublishMsg(ctx, m)
}

// ErrToolTimeout is the error result of a call no tool worker answered in time.
var ErrToolTimeout = errors.New("tool call timed out")

// Execute runs one call. On the bus the call id is the turn id plus the model's id: models
// (and small local servers) reuse ids like "call_0" across turns, and the bus keys results by
// id, so a bare model id could pick up another turn's result.
func (x *Executor) Execute(ctx context.Context, call loop.ToolCallRequest) (loop.ToolResult, error) {
	w, sc := x.c, x.Scope
	if x.Flush != nil {
		// A bus that is briefly away (a node lost, a leader being elected) is waited for: a
		// failure here would reach the model as a failed tool call.
		if err := store.RetryTransient(ctx, func() error { return x.Flush(ctx) }); err != nil {
			return loop.ToolResult{}, err
		}
	}
	busID := sc.Turn + "-" + call.ID
	if x.BusID != nil {
		busID = x.BusID(call.ID)
	}
	subj := events.ToolResultSubject(sc.SK)
	results, done := w.Router.Expect(busID)
	defer done()
	if !x.Subscribed {
		sub, err := w.NC.ChanSubscribe(subj, w.Router.In())
		if err != nil {
			return loop.ToolResult{}, fmt.Errorf("subscribe %s: %w", subj, err)
		}
		defer sub.Unsubscribe()
	}
	if x.Resumed {
		if res, ok := x.existing(ctx, busID, x.Since); ok {
			return x.after(ctx, call, res), nil
		}
	}
	timeout := w.Timeout
	entry, _ := w.Catalog.Entry(call.Name)
	if entry.TimeoutMs > 0 {
		timeout = time.Duration(entry.TimeoutMs) * time.Millisecond
	}
	tc := events.ToolCall{
		CallID: busID, Tool: call.Name, Args: call.Args, SessionKey: sc.SK, Turn: sc.Turn,
		Caller:     sc.Caller,
		Deadline:   time.Now().Add(timeout).UnixMilli(),
		Idempotent: entry.Idempotent,
		Fresh:      x.Fresh,
	}
	if m := sc.Model; m != nil {
		tc.Model = m.Provider + "/" + m.ID
		if w.Hints != nil {
			tc.ModelSize, tc.SkillChars = w.Hints(m.Provider, m.ID)
		}
	}
	if dl, ok := ctx.Deadline(); ok && dl.UnixMilli() < tc.Deadline {
		tc.Deadline = dl.UnixMilli() // a background task's time limit bounds its tool call too
	}
	if tc.Args == nil {
		tc.Args = map[string]any{}
	}
	if x.Step != nil {
		tc.Step = x.Step()
	}
	carried := len(tc.Step) > 0
	ev := events.New(tc, events.WithSession(sc.SID), events.WithTurn(sc.Turn), events.WithTrace(sc.Trace))
	m, err := events.NewMsg(events.ToolCallSubject(call.Name), ev)
	if err != nil {
		return loop.ToolResult{}, err
	}
	tracing.InjectNATS(ctx, m.Header) // the tool worker's span continues the call's
	// Retried under the same Nats-Msg-Id (the call id): a publish that timed out may have been
	// stored, and the stream drops the repeat.
	var ack *jetstream.PubAck
	if err := store.RetryTransient(ctx, func() error {
		var err error
		ack, err = w.publishOnce(ctx, m)
		return err
	}); err != nil {
		return loop.ToolResult{}, fmt.Errorf("request tool %s: %w", call.Name, err)
	}
	// A fresh call's result is stored after its request; any other may have been answered for
	// an earlier request of the same id.
	since := x.Since
	if tc.Fresh {
		since = time.UnixMilli(ev.Time).Add(-store.ToolResultSkew)
	}
	res, err := x.await(ctx, call.Name, busID, results, m, ack.Sequence, time.UnixMilli(tc.Deadline), since, carried)
	if err != nil {
		return res, err
	}
	return x.after(ctx, call, res), nil
}

// after applies the Client's After hook.
func (x *Executor) after(ctx context.Context, call loop.ToolCallRequest, res loop.ToolResult) loop.ToolResult {
	if x.c.After == nil {
		return res
	}
	return x.c.After(ctx, x.Scope, x.Resumed, call, res)
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
// ctx (the turn) bounds the wait; since bounds the looks (store.FindToolResult). carried: the
// request carries a step (Call.Withdrawing runs before it is withdrawn).
func (x *Executor) await(ctx context.Context, tool, callID string, results <-chan *nats.Msg, req *nats.Msg, reqSeq uint64, deadline, since time.Time, carried bool) (loop.ToolResult, error) {
	w := x.c
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
		if res, ok := x.existing(ctx, callID, since); ok {
			return res, nil
		}
		timer.Reset(recheck)
		lctx, cancel := context.WithTimeout(ctx, BusTimeout)
		queued, err := natsutil.LeaderGetMsg(lctx, w.JS, events.StreamToolCalls, natsutil.MsgQuery{Seq: reqSeq})
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
				w.Log.WarnContext(ctx, "re-request tool call", "tool", tool, "call", callID, "err", perr)
				continue
			}
			reqSeq = ack.Sequence
			w.Log.WarnContext(ctx, "tool call left the queue without a result; asked again", "tool", tool, "call", callID, "attempt", asked)
		case err != nil:
			w.Log.WarnContext(ctx, "check tool call request", "tool", tool, "call", callID, "err", err)
		case time.Now().After(deadline) && !w.Catalog.Served(tool):
			if carried && x.Withdrawing != nil {
				if werr := x.Withdrawing(ctx); werr != nil {
					w.Log.WarnContext(ctx, "store the step before withdrawing a tool call", "tool", tool, "call", callID, "err", werr)
					continue
				}
			}
			dctx, cancel := context.WithTimeout(ctx, BusTimeout)
			derr := w.Calls.DeleteMsg(dctx, reqSeq)
			cancel()
			if derr == nil {
				// Withdrawn before any worker took it, unless one already holds it: a result
				// from such a worker would have been found above or arrives on the next look.
				if res, ok := x.existing(ctx, callID, since); ok {
					return res, nil
				}
				return loop.ToolResult{}, fmt.Errorf("%w: %s was not run: no tool worker serves it (the request was withdrawn after its deadline)", ErrToolTimeout, tool)
			}
		case time.Now().After(deadline):
			w.Log.InfoContext(ctx, "still waiting for a tool result", "tool", tool, "call", callID, "past_deadline", time.Since(deadline).Round(time.Second))
		}
	}
}

// firstLook is when await first looks for a result in TOOL_RESULTS: most calls are answered
// well before it (and cost no look); one whose result went past a reconnecting subscription
// waits this long, not until its deadline.
const firstLook = 2 * time.Second

// existing is the result of call callID stored since then (store.FindToolResult), if any.
func (x *Executor) existing(ctx context.Context, callID string, since time.Time) (loop.ToolResult, bool) {
	ctx, cancel := context.WithTimeout(ctx, BusTimeout)
	defer cancel()
	raw, err := store.FindToolResult(ctx, x.c.JS, x.c.Results, x.Scope.SK, callID, since)
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
