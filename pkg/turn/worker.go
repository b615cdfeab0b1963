// Package turn is the turn-worker role: session actors that own chat sessions and run the agent
// loop for them (DESIGN.md §4–§5).
//
// Layout. The Worker (worker.go) starts and stops the role and routes deliveries; the actor
// (actor.go) keeps one session's inbox order and concurrency policy, with parts of one job
// each (inbox.go reads the inbox, resume.go resumes open turns, context.go writes the context,
// commands*.go run slash commands, replies.go builds replies); turnRun (turn.go, turnloop.go,
// records.go) runs one turn: the loop, its records, the commit and the reply. What crosses
// roles lives below: pkg/turn/ownership (leases, claims, doorbells), pkg/inbox (the read
// state), pkg/toolbus (tool calls and the catalogue), pkg/tasks (background-task records and
// tools), pkg/store (the logs). The lock order and which goroutine owns what are in LOCKS.md.
//
// Ownership (the worker lease and its epoch, claims, doorbells, peer probes, rebalancing and
// the commit fence) is pkg/turn/ownership's; its package comment tells the protocol. The
// Worker routes each delivery through it (ownership.Manager.Route) and runs the actor of each
// session it adopts (Worker.Adopt).
//
// Durability. A delivery that started a turn is acked only when the turn is finished, and is
// kept alive with in-progress acks meanwhile; if the worker dies, the delivery comes back to
// another replica after AckWait, which claims the stale session, resumes the open turns
// recorded in the session record (see resume.go) and re-reads the inbox after the
// durable cursor: a turn started from its inbox event writes no session record, its context
// commit carries the cursor (see startTurn, takeOver and startCursor). A resume that cannot
// read what it needs hands the session over (its deliveries go back unacked) rather than go on
// without it.
package turn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbus/agentbus/pkg/approvals"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/hooks"
	"github.com/agentbus/agentbus/pkg/inbox"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/loop"
	"github.com/agentbus/agentbus/pkg/memory"
	"github.com/agentbus/agentbus/pkg/metrics"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/skills"
	"github.com/agentbus/agentbus/pkg/store"
	"github.com/agentbus/agentbus/pkg/tasks"
	"github.com/agentbus/agentbus/pkg/toolbus"
	"github.com/agentbus/agentbus/pkg/turn/ownership"
)

// ConsumerName is the durable consumer all turn-worker replicas share.
const ConsumerName = ownership.ConsumerName

// Options configure a Worker. Zero values pick the documented defaults.
type Options struct {
	// ID names this replica in leases and logs (default: a random id).
	ID string
	// AI is the ai: block (agents, agent, sessions, trigger).
	AI config.AI
	// Models resolves ai.agents bindings to models.
	Models *llm.Registry
	// LeaseTTL is the TTL of the replica's liveness lease (default 2s; whole seconds, at least
	// 1s), renewed every LeaseTTL/3. A killed worker's sessions are taken over once its
	// doorbell has had no responders for 400 ms (peers.go); the TTL is the fallback for a
	// process that stalls with its connection open.
	LeaseTTL time.Duration
	// AckWait of the shared consumer (default 2s); held deliveries get in-progress acks every
	// AckWait/3, so a crashed worker's deliveries come back after at most AckWait.
	AckWait time.Duration
	// IdleRelease is how long an actor with nothing to do keeps its session (default 60s).
	// Longer keeps more sessions warm on this replica; an idle actor costs memory (its
	// session's context stays cached), no bus traffic: its claim is never renewed. A message
	// that finds no actor pays a cold start on its reply path (the claim, the session record,
	// the inbox's last event, the last commit, the context), so the default outlasts the pause
	// between two messages of a conversation: people answer within seconds to a minute, and
	// at 2,000 sessions and 200 turns/s each session talks every 10 s, which a release after
	// 10 s turned into a cold start for nearly every message.
	IdleRelease time.Duration
	// ToolTimeout bounds one tool call (default ai.agent.toolTimeout).
	ToolTimeout time.Duration
	// Endpoints are the configured IM endpoints that hold no connection ("webhook/<bot>"),
	// which /endpoints lists besides the adapters in KV presence.
	Endpoints []string
	// StreamFn replaces llm.Stream (tests, benchmarks).
	StreamFn loop.StreamFunc
	// Tracer records a span per turn and per tool call (nil: off). Model-call spans come from
	// the StreamFn, wrapped with tracing.WrapStream by the composition root.
	Tracer trace.TracerProvider
	// Secrets are removed from model errors before they are stored or shown
	// (llm.StreamOptions.Secrets): every configured provider key, token and password.
	Secrets []string
	// Prompt adds sections to the system prompt (bootstrap files, profiles); may be nil.
	Prompt PromptSource
	// Health adds lines to /health; may be nil.
	Health HealthSource
	// ModelsReport answers /models (default: models.Report without discovery status).
	ModelsReport func() string
	// Skills drives the seed's two-level tool selection (skills by keywords, then tools
	// ranked, ai.agent.maxSkills / maxTools); nil offers every permitted tool.
	Skills *skills.Store
	// FetchImage inlines an image a message references by URL, for vision models; nil sends
	// the reference as text.
	FetchImage func(ctx context.Context, url string) (data []byte, mimeType string, err error)
	// Memory holds the memory files the housekeeping turn before a compaction may write; nil
	// skips that turn.
	Memory *memory.Store
	// Metrics counts turns, sessions owned and lease takeovers; DeadLetters the dead letters
	// this worker publishes. nil: not counted.
	Metrics     *metrics.Turn
	DeadLetters *metrics.DeadLetters
	Log         *slog.Logger
	// Hooks runs the turn worker's ai.hooks events (nil: none; hooks.go).
	Hooks *hooks.Runner
}

// Worker runs session actors for every session whose lease it holds.
type Worker struct {
	opts      Options
	nc        *nats.Conn
	js        jetstream.JetStream
	inbox     jetstream.Stream
	inboxPub  *inbox.Publisher // results of background work posted into a session's inbox
	limiter   *callLimiter     // ai.agent.rateLimit (nil: no limit)
	evts      jetstream.Stream
	results   jetstream.Stream
	calls     jetstream.Stream // TOOL_CALLS: to see whether a request is still queued
	imOut     jetstream.Stream // IM_OUT and IM_SENT: whether a closing commit's reply is stored
	imSent    jetstream.Stream
	sessions  *store.Sessions
	leases    *store.Leases
	ctxlog    *store.ContextLog
	turnlog   *store.TurnLog
	tools     *toolbus.Catalog
	toolc     toolClient // tool calls of turns and tasks (a toolbus.Client)
	approvals *approvals.Store
	bg        *background           // schedules and task records (background.go)
	runner    taskRunner            // runs subagent and deferred tasks, schedules (background.go)
	records   tasks.Records         // the KV tasks records of the tasks it runs (pkg/tasks)
	media     jetstream.ObjectStore // nil: media:// images stay references
	router    *toolbus.Router
	// inboxHeard receives the core NATS copies of inbox events for the sessions this replica's
	// actors run (actor.inSub); pokeActors wakes the actor of each.
	inboxHeard chan *nats.Msg
	progress   *natsutil.InProgress // in-progress acks for held inbox deliveries and running subagent tasks
	log        *slog.Logger

	// own decides which sessions this replica runs (pkg/turn/ownership); made by Start.
	own *ownership.Manager

	killCtx  context.Context // ended by Kill only (replyContext)
	killNow  context.CancelFunc
	wg       sync.WaitGroup
	ctx      context.Context
	cancel   context.CancelFunc
	cc       jetstream.ConsumeContext
	stopOnce sync.Once
	done     chan struct{} // closed when shutdown has finished

}

// New prepares a worker on a provisioned JetStream.
func New(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, opts Options) (*Worker, error) {
	if opts.ID == "" {
		opts.ID = "tw-" + events.NewID()[:8]
	}
	if opts.LeaseTTL == 0 {
		opts.LeaseTTL = 2 * time.Second
	}
	if opts.AckWait == 0 {
		opts.AckWait = 2 * time.Second
	}
	if opts.IdleRelease == 0 {
		opts.IdleRelease = time.Minute
	}
	if opts.ToolTimeout == 0 {
		opts.ToolTimeout = time.Duration(opts.AI.Agent.ToolTimeoutMs) * time.Millisecond
		if opts.ToolTimeout == 0 {
			opts.ToolTimeout = time.Minute
		}
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Models == nil {
		return nil, errors.New("turn: Options.Models is required")
	}
	killCtx, killNow := context.WithCancel(context.Background())
	w := &Worker{opts: opts, nc: nc, js: js, killCtx: killCtx, killNow: killNow, done: make(chan struct{}),
		router: toolbus.NewRouter(), inboxHeard: make(chan *nats.Msg, inboxHeardBuffer), inboxPub: inbox.NewPublisher(js), log: opts.Log.With("worker", opts.ID)}
	w.runner = taskRunner{w}
	if opts.AI.Agent.RateLimit.Enabled() {
		w.limiter = newCallLimiter(opts.AI.Agent.RateLimit)
	}
	var err error
	for _, b := range []struct {
		name string
		st   *jetstream.Stream
	}{
		{events.StreamSessionIn, &w.inbox}, {events.StreamAgentEvents, &w.evts}, {events.StreamToolResults, &w.results},
		{events.StreamToolCalls, &w.calls}, {events.StreamIMOut, &w.imOut}, {events.StreamIMSent, &w.imSent},
	} {
		if *b.st, err = natsutil.Stream(ctx, js, b.name); err != nil {
			return nil, fmt.Errorf("open %s: %w", b.name, err)
		}
	}
	if w.sessions, err = store.OpenSessions(ctx, js); err != nil {
		return nil, err
	}
	if w.leases, err = store.NewLeases(ctx, js); err != nil {
		return nil, err
	}
	s := opts.AI.Sessions
	if w.ctxlog, err = store.NewContextLog(ctx, js, store.ContextBounds{
		MaxMessages: s.ColdStartMaxMessages, MaxAge: time.Duration(s.ColdStartMaxAgeMs) * time.Millisecond,
	}); err != nil {
		return nil, err
	}
	if w.turnlog, err = store.NewTurnLog(ctx, js); err != nil {
		return nil, err
	}
	if w.tools, err = toolbus.NewCatalog(ctx, js); err != nil {
		return nil, err
	}
	w.toolc = &toolbus.Client{NC: nc, JS: js, Results: w.results, Calls: w.calls, Router: w.router, Catalog: w.tools,
		Timeout: opts.ToolTimeout, Agent: opts.AI.Agent, After: w.afterTool, Log: w.log}
	if w.approvals, err = approvals.Open(ctx, js); err != nil {
		return nil, err
	}
	if w.bg, err = newBackground(ctx, js); err != nil {
		return nil, err
	}
	w.records = tasks.Records{Tasks: w.bg.tasks, Worker: opts.ID, Log: w.log}
	if w.media, err = js.ObjectStore(ctx, events.ObjectMedia); err != nil {
		w.log.Warn("media store not available: stored images reach the model as references only", "err", err)
		w.media = nil
	}
	return w, nil
}

// ID returns the replica id.
func (w *Worker) ID() string { return w.opts.ID }

// Start begins consuming SESSION_IN. Stop ends it.
func (w *Worker) Start(ctx context.Context) error {
	w.ctx, w.cancel = context.WithCancel(context.Background())
	cons, err := natsutil.Consumer(ctx, w.js, events.StreamSessionIn, jetstream.ConsumerConfig{
		Durable:       ConsumerName,
		FilterSubject: events.PrefixAgentIn + ".>",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       w.opts.AckWait,
		MaxAckPending: 20000,
		MaxDeliver:    -1,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("create consumer %s: %w", ConsumerName, err)
	}
	w.progress = natsutil.NewInProgress(w.opts.AckWait / 3)
	// The doorbell and the worker lease before the consumer: every claim carries the lease's
	// epoch (ownership.Manager.Start).
	w.own = ownership.New(ownership.Config{ID: w.opts.ID, LeaseTTL: w.opts.LeaseTTL, NC: w.nc, Leases: w.leases,
		Sessions: w, Progress: w.progress, Metrics: w.opts.Metrics, Log: w.log})
	if err := w.own.Start(ctx, w.ctx, &w.wg); err != nil {
		return err
	}
	// Heartbeats every second instead of the client's default (half the 30 s expiry): a pull
	// request parked on a consumer leader that died with its NATS node is noticed missing after
	// 2 s and sent again, to the leader the cluster elects meanwhile, instead of after 30 s.
	w.cc, err = cons.Consume(w.onDelivery, jetstream.PullMaxMessages(512),
		jetstream.PullExpiry(5*time.Second), jetstream.PullHeartbeat(time.Second))
	if err != nil {
		return fmt.Errorf("consume %s: %w", ConsumerName, err)
	}
	w.wg.Add(2)
	go func() {
		defer w.wg.Done()
		w.tools.Run(w.ctx)
	}()
	go func() {
		defer w.wg.Done()
		w.router.Run(w.ctx.Done())
	}()
	w.wg.Add(1)
	go w.pokeActors()
	if err := w.runner.startSubagents(ctx); err != nil {
		return err
	}
	return w.runner.startBackground(ctx)
}

// Stop stops consuming, aborts running turns and releases the leases it holds. Turns that were
// interrupted stay open in their session records and are resumed by whichever worker takes the
// session next.
//
// Stop waits for that at most until ctx ends, then returns ctx's error while the shutdown goes
// on; Done reports its end. Safe to call more than once, concurrently, after Kill and on a
// worker that was never started.
func (w *Worker) Stop(ctx context.Context) error {
	w.stopOnce.Do(func() { go w.shutdown() })
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("turn: stop: %w", ctx.Err())
	}
}

// Done is closed once the worker has stopped and every goroutine it started has ended.
func (w *Worker) Done() <-chan struct{} { return w.done }

// shutdown runs once, on its own goroutine (started by Stop), and closes w.done at its end.
func (w *Worker) shutdown() {
	defer close(w.done)
	if w.own != nil {
		w.own.CloseDoorbell()
	}
	if w.cc != nil {
		w.cc.Stop()
	}
	if w.cancel != nil {
		w.cancel()
	}
	w.wg.Wait()
	if w.progress != nil {
		w.progress.Close()
	}
	w.killNow() // every turn has ended: nothing publishes on killCtx any more
	if w.own != nil {
		// Every actor has unclaimed its session; other replicas need not wait for the TTL.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		w.own.Release(ctx)
		cancel()
	}
}

// Kill simulates a crash in tests: it stops consuming and abandons every actor without
// releasing leases or acking anything, as a killed process would.
func (w *Worker) Kill() {
	if w.own != nil {
		w.own.CloseDoorbell()
	}
	if w.cc != nil {
		w.cc.Stop()
	}
	if w.progress != nil {
		w.progress.Close() // a crashed process sends no more in-progress acks
	}
	w.killNow()
	if w.own != nil {
		w.own.Kill()
	}
	if w.cancel != nil {
		w.cancel() // a dead process renews nothing: no lease comes back after a revocation
	}
	_ = w.Stop(context.Background())
}

// onDelivery routes one SESSION_IN delivery to the session's actor (ownership.Manager.Route),
// starting one if this worker can claim the session. It runs on the consumer's one callback
// goroutine, so anything that waits on the bus (a claim, reading a session) happens elsewhere.
func (w *Worker) onDelivery(msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		_ = msg.Term()
		return
	}
	sk, err := events.ParseAgentInSubject(msg.Subject())
	if err != nil {
		w.deadLetter(msg.Subject(), meta.Sequence.Stream, msg.Data(), msg.Headers(), "bad_subject", err)
		_ = msg.Ack()
		return
	}
	w.own.Route(sk, ownership.Delivery{Msg: msg, Seq: meta.Sequence.Stream, Redelivered: meta.NumDelivered > 1})
}

// inboxHeardBuffer bounds inbox events heard and not yet handed to their actors. Handing one
// over is a map lookup, so it stays near empty; one dropped when it is full only means its
// actor waits for the event's delivery.
const inboxHeardBuffer = 4096

// pokeActors wakes the actor of every inbox event heard on inboxHeard until the worker stops.
// The owner of a session thereby reads a new event as soon as it is published, whichever
// replica the consumer delivers it to: with several replicas, about half the deliveries reach
// one that does not own the session, and their doorbell ring is no longer on the reply path.
func (w *Worker) pokeActors() {
	defer w.wg.Done()
	for {
		select {
		case <-w.ctx.Done():
			return
		case m := <-w.inboxHeard:
			sk, err := events.ParseAgentInSubject(m.Subject)
			if err != nil {
				continue
			}
			if a, ok := w.own.Session(sk.String()).(*actor); ok {
				a.poke(m.Header)
			}
		}
	}
}

// Adopt is the actor of a session this replica has just claimed (ownership.Sessions); the
// Manager runs it.
func (w *Worker) Adopt(sk events.SessionKey, c *ownership.Claim) ownership.Session {
	return newActor(w, sk, c)
}

// durableCursor is how far the session's inbox is durably processed: the session record's
// cursor, or the inbox sequence the session's last context commit consumed when that is later
// (a turn started from its inbox event moves the cursor only with its commit).
func (w *Worker) durableCursor(s *store.Session) uint64 {
	sid, err := s.ID()
	if err != nil {
		return s.InboxCursor
	}
	mark, err := w.ctxlog.LastCommit(w.ctx, sid)
	if err != nil {
		return s.InboxCursor
	}
	return max(s.InboxCursor, mark.InboxSeq)
}

// deadLetter records something the worker gave up on, with the reason.
func (w *Worker) deadLetter(subject string, seq uint64, body []byte, h nats.Header, reason string, cause error) {
	dl := events.DeadLetter{Role: "turn-worker", Reason: reason, Error: cause.Error(), Subject: subject,
		Stream: events.StreamSessionIn, Seq: seq, Headers: map[string][]string(h)}
	dl.SetBody(body)
	ev := events.New(dl)
	m, err := events.NewMsg(events.DeadLetterSubject("turn-worker", reason), ev)
	if err == nil {
		_, err = w.js.PublishMsg(w.ctx, m)
	}
	if err != nil {
		w.log.Error("dead letter not recorded", "subject", subject, "seq", seq, "reason", reason, "err", err)
		return
	}
	w.opts.DeadLetters.Add(events.RoleTurnWorker, reason)
	w.log.Warn("dead-lettered", "subject", subject, "seq", seq, "reason", reason, "err", cause)
}

// busTimeout bounds one bus request of a turn (toolbus.BusTimeout: a publish and the wait for
// its ack, a look into a stream, a withdrawal). A caller's ctx may run for the whole turn
// (ai.agent.timeout), and a request lost while a NATS node dies is never answered, which lost
// turns in the fault test.
const busTimeout = toolbus.BusTimeout

// publishOnce is one publish of m, bounded by busTimeout (or ctx, when that ends sooner).
func (w *Worker) publishOnce(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error) {
	ctx, cancel := context.WithTimeout(ctx, busTimeout)
	defer cancel()
	return w.js.PublishMsg(ctx, m)
}
