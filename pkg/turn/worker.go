// Package turn is the turn-worker role: session actors that own chat sessions and run the agent
// loop for them (DESIGN.md §4–§5).
//
// Ownership. Every replica holds one liveness lease, KV leases key worker.<id> (store.Leases
// AcquireWorker): a TTL lease renewed every LeaseTTL/3 whatever the number of sessions the
// replica owns; the revision at which it was acquired is the replica's epoch. A session is
// owned through a claim, KV leases key <sk> = {owner, epoch} (store.Leases.Claim), written once
// when the session's actor starts and purged when it stops, never renewed: it is in force while
// the owner's worker lease lives with that epoch. A claim whose owner's lease has expired or
// carries another epoch is stale and is taken over by a CAS on its revision, which is the
// session's fencing token. Lease work per turn therefore does not grow with the sessions held.
// Correctness stays with the fenced writes: context commits expect the last sequence the
// actor knows, so an owner that lost its lease cannot commit stale state.
//
// Every replica consumes the shared durable consumer on SESSION_IN. A delivery is only a
// wake-up: the owner runs the session's actor, and the actor reads the session's inbox subject
// itself, in stream order, from the cursor kept in the session record (KV sessions). Order
// therefore comes from the log, not from delivery. The actor also hears its inbox subject as
// core NATS messages, so it reads a new event the moment it is published, whichever replica
// its delivery goes to; that copy decides nothing (a "not found" after it waits for the
// delivery, read from the leader), the delivery is held and acked as always.
//
// Affinity without bounce. A replica that gets a delivery for a session another replica owns
// rings the owner's doorbell (agent.wake.<owner>, one core NATS message with the session, the
// sequence and the delivery's ack subject; the deliveries queued for one owner meanwhile go in
// the same ring). The owner holds the delivery from then on: it sends its in-progress acks and
// acks it once its cursor has passed it and no open turn depends on it, and its actor reads the
// event from the log at once, if it has not already (it hears its inbox subject). Nothing waits
// for an answer; a ring that is lost leaves the delivery unacked, so it comes back after
// AckWait. No event waits for a redelivery or a NAK delay to reach the owner, however many
// replicas share the consumer. A replica remembers which replica owns a session for as long as
// that replica's worker lease (same epoch) lives, so a foreign delivery costs one ring (or a
// share of one) and no KV round trip. A ring for a session the replica no longer runs makes it
// claim the session and send the ringer a notice to forget the hint.
//
// Takeover. A killed process's connection closes at once, and with it its doorbell
// subscription: a request on agent.wake.<id> gets "no responders" from the server long before
// the process's lease would expire. Every replica probes its peers' doorbells every 200 ms
// (peers.go); a peer silent for 400 ms is taken for dead: its worker lease is revoked
// (store.Leases.RevokeWorker) and the sessions it claimed are claimed at once
// (store.Leases.ClaimsOf), whose actors read the inbox from the cursor and resume the open
// turns. Nothing waits for the dead replica's lease TTL or for its deliveries to come back
// after AckWait (they come later, with those of the rings it never read, and are acked by the
// new owner). The lease TTL and the redelivery remain the fallbacks: a claim whose owner's
// lease has ended is stale for every replica, and a delivery that comes back is claimed as any
// other.
//
// Lapsed leases. A renewal that cannot reach the bus (a NATS node failing over) does not stop
// the actors: they keep their sessions, and context commits wait (awaitFence) until the lease
// is back, renewed at its old revision or acquired again with the same epoch
// (store.Leases.ReacquireWorker). In the second case every claim is confirmed by a CAS on its
// token first (store.Leases.ConfirmClaim): the sessions another replica took meanwhile are
// dropped, the others go on with the same actor. A replica revoked by mistake (its doorbell
// had no responders while it reconnected) recovers the same way.
//
// Durability. A delivery that started a turn is acked only when the turn is finished, and is
// kept alive with in-progress acks meanwhile; if the worker dies, the delivery comes back to
// another replica after AckWait, which claims the stale session, resumes the open turns
// recorded in the session record (see resume in turn.go) and re-reads the inbox after the
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
	"github.com/agentbus/agentbus/pkg/toolbus"
)

// ConsumerName is the durable consumer all turn-worker replicas share.
const ConsumerName = "turn-workers"

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
	toolc     *toolbus.Client // tool calls of turns and tasks (pkg/toolbus)
	approvals *approvals.Store
	bg        *background           // schedules and task records (background.go)
	media     jetstream.ObjectStore // nil: media:// images stay references
	router    *toolbus.Router
	// inboxHeard receives the core NATS copies of inbox events for the sessions this replica's
	// actors run (actor.inSub); pokeActors wakes the actor of each.
	inboxHeard chan *nats.Msg
	progress   *natsutil.InProgress // in-progress acks for held inbox deliveries and running subagent tasks
	log        *slog.Logger

	lmu    sync.Mutex
	wlease store.Lease   // this replica's liveness lease; its Token is the epoch its claims carry
	lgen   uint64        // lease generation: one more each time the lease was acquired again
	fence  chan struct{} // non-nil while the lease is being recovered: commits wait (awaitFence)

	mu        sync.Mutex
	actors    map[string]*actor      // by session key string
	claiming  map[string][]delivery  // sessions being claimed, with their deliveries
	owners    map[string]ownerHint   // sessions another replica was seen to own
	view      map[string]workerSeen  // worker leases, as the watch showed them (ownership.go)
	viewReady bool                   // the watch has delivered its initial values
	bells     map[string][]ringEntry // by owner: deliveries queued for a doorbell ring (ownership.go)
	bellWake  chan struct{}          // wakes ringBells
	bellSubj  string                 // this replica's doorbell, where rung replicas send notices
	suspect   map[string]suspicion   // peers whose doorbell had no responders (peers.go)
	adopted   map[string]uint64      // peers taken for dead: the epoch whose sessions were taken over
	shedPause time.Time              // no sessions are moved to another replica before (rebalance.go)
	killed    bool                   // Kill: no lease is released
	killCtx   context.Context        // ended by Kill only (replyContext)
	killNow   context.CancelFunc
	wakeSub   *nats.Subscription
	wg        sync.WaitGroup
	ctx       context.Context
	cancel    context.CancelFunc
	cc        jetstream.ConsumeContext
	stopOnce  sync.Once
	done      chan struct{} // closed when shutdown has finished

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
	w := &Worker{opts: opts, nc: nc, js: js, killCtx: killCtx, killNow: killNow, done: make(chan struct{}), actors: map[string]*actor{}, claiming: map[string][]delivery{}, owners: map[string]ownerHint{},
		view: map[string]workerSeen{}, bells: map[string][]ringEntry{}, bellWake: make(chan struct{}, 1), suspect: map[string]suspicion{}, adopted: map[string]uint64{},
		router: toolbus.NewRouter(), inboxHeard: make(chan *nats.Msg, inboxHeardBuffer), inboxPub: inbox.NewPublisher(js), log: opts.Log.With("worker", opts.ID)}
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
	// The doorbell before the lease: a peer that sees the lease probes the doorbell at once
	// (peers.go), and no ring for a session this replica is about to own must be missed.
	w.bellSubj = events.AgentWakeSubject(w.opts.ID)
	if w.wakeSub, err = w.nc.Subscribe(w.bellSubj, w.onWake); err != nil {
		return fmt.Errorf("subscribe to doorbell: %w", err)
	}
	if err := w.nc.FlushTimeout(5 * time.Second); err != nil {
		return fmt.Errorf("subscribe to doorbell: %w", err)
	}
	// The liveness lease before anything is claimed: every claim carries its epoch.
	if err := w.acquireWorkerLease(ctx); err != nil {
		return err
	}
	w.wg.Add(4)
	go w.ringBells()
	go w.followWorkers()
	go w.renewWorkerLease()
	go w.probePeers()
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
	if err := w.startSubagents(ctx); err != nil {
		return err
	}
	return w.startBackground(ctx)
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
	if w.wakeSub != nil {
		_ = w.wakeSub.Unsubscribe()
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
	w.mu.Lock()
	killed := w.killed
	w.mu.Unlock()
	if l := w.workerLease(); !killed && l.Revision != 0 {
		// Every actor has unclaimed its session; other replicas need not wait for the TTL.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = w.leases.Release(ctx, l)
		cancel()
	}
}

// Kill simulates a crash in tests: it stops consuming and abandons every actor without
// releasing leases or acking anything, as a killed process would.
func (w *Worker) Kill() {
	if w.wakeSub != nil {
		_ = w.wakeSub.Unsubscribe()
	}
	if w.cc != nil {
		w.cc.Stop()
	}
	if w.progress != nil {
		w.progress.Close() // a crashed process sends no more in-progress acks
	}
	w.killNow()
	w.mu.Lock()
	w.killed = true
	for _, a := range w.actors {
		a.killed.Store(true)
	}
	w.mu.Unlock()
	if w.cancel != nil {
		w.cancel() // a dead process renews nothing: no lease comes back after a revocation
	}
	_ = w.Stop(context.Background())
}

// onDelivery routes one SESSION_IN delivery to the session's actor, starting one if this
// worker can take the lease. It runs on the consumer's one callback goroutine, so anything
// that waits on the bus (taking a lease, reading a session) happens elsewhere: deliveries for
// a session being claimed wait in w.claiming and go to the actor, or back, when the claim ends.
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
	d := delivery{msg: msg, seq: meta.Sequence.Stream, redelivered: meta.NumDelivered > 1}
	key := sk.String()
	w.mu.Lock()
	defer w.mu.Unlock()
	if a := w.actors[key]; a != nil && a.alive() {
		a.deliver(d.msg, d.seq)
		return
	}
	if waiting, ok := w.claiming[key]; ok {
		w.claiming[key] = append(waiting, d)
		return
	}
	if h, ok := w.owners[key]; ok {
		// A redelivery means the last ring (if it was this replica's) was not taken: the
		// hint may name a replica that is gone, so the claim looks the owner up again.
		if !d.redelivered && !w.staleLocked(h.owner, h.epoch) {
			w.ringLocked(sk, h.owner, h.epoch, []delivery{d})
			return
		}
		delete(w.owners, key)
	}
	w.claiming[key] = []delivery{d}
	w.wg.Add(1)
	go w.claim(sk)
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
			w.mu.Lock()
			a := w.actors[sk.String()]
			w.mu.Unlock()
			if a != nil && a.alive() {
				a.poke()
			}
		}
	}
}

// delivery is a SESSION_IN message and its stream sequence.
type delivery struct {
	msg         jetstream.Msg
	seq         uint64
	redelivered bool
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
