// Package turn is the turn-worker role: session actors that own chat sessions and run the agent
// loop for them (DESIGN.md §4–§5).
//
// Layout. Options (options.go) are typed and validated once; the turn worker reads no
// configuration file (pkg/app maps the ai: block onto them). The Worker (worker.go) starts and
// stops the role (Run, or New and Start; Stop; Done) and routes deliveries; the actor
// (actor.go) keeps one session's inbox order and concurrency policy, with parts of one job
// each (inbox.go reads the inbox, resume.go resumes open turns, context.go writes the context,
// commands*.go run slash commands, replies.go builds replies); turnRun (turn.go, turnloop.go,
// records.go) runs one turn: the loop, its records, the commit and the reply. What crosses
// roles lives below: pkg/turn/ownership (leases, claims, doorbells), pkg/inbox (the read
// state), pkg/toolbus (tool calls and the catalogue), pkg/tasks (background tasks: the tools
// that queue them and the runner that runs them), pkg/store (the logs). The lock order and
// which goroutine owns what are in LOCKS.md.
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
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/approvals"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/inbox"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/store"
	"github.com/agentbus/agentbus/pkg/toolbus"
	"github.com/agentbus/agentbus/pkg/turn/ownership"
)

// ConsumerName is the durable consumer all turn-worker replicas share.
const ConsumerName = ownership.ConsumerName

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
	runner    TaskRunner            // runs subagent and deferred tasks, schedules (pkg/tasks)
	media     jetstream.ObjectStore // nil: media:// images stay references
	// settler archives and trims ended epochs (epochs.go); nil when the object store is missing.
	settler *epochSettler
	router  *toolbus.Router
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

// New prepares a worker on a provisioned JetStream: it fills the defaults of opts, validates
// them (an error wraps ErrConfig) and opens the streams and buckets the worker uses (ctx bounds
// that). It starts nothing: Start does; Run is New and Start in one call.
func New(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, opts Options) (*Worker, error) {
	opts.setDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	killCtx, killNow := context.WithCancel(context.Background())
	w := &Worker{opts: opts, nc: nc, js: js, killCtx: killCtx, killNow: killNow, done: make(chan struct{}),
		router: toolbus.NewRouter(), inboxHeard: make(chan *nats.Msg, inboxHeardBuffer), inboxPub: inbox.NewPublisher(js), log: opts.Log.With("worker", opts.ID)}
	if opts.RateLimit.enabled() {
		w.limiter = newCallLimiter(opts.RateLimit)
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
	if w.ctxlog, err = store.NewContextLog(ctx, js, store.ContextBounds{
		MaxMessages: opts.History.ColdStartMaxMessages, MaxAge: opts.History.ColdStartMaxAge,
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
		Timeout: opts.ToolTimeout, Hints: w.toolHints, After: w.afterTool, Log: w.log}
	if w.approvals, err = approvals.Open(ctx, js); err != nil {
		return nil, err
	}
	if w.bg, err = newBackground(ctx, js); err != nil {
		return nil, err
	}
	if w.runner, err = newTaskRunner(w); err != nil {
		return nil, err
	}
	if arch, err := store.OpenEpochArchive(ctx, js, w.sessions); err != nil {
		w.log.Warn("epoch archive not available: ended epochs stay in SESSION_IN and AGENT_CTX", "err", err)
	} else {
		arch.CursorConsumer = ConsumerName
		w.settler = newEpochSettler(arch, w.sessions, w.log)
	}
	if w.media, err = js.ObjectStore(ctx, events.ObjectMedia); err != nil {
		w.log.Warn("media store not available: stored images reach the model as references only", "err", err)
		w.media = nil
	}
	return w, nil
}

// Run is New on opts.NC and opts.JS (default jetstream.New(opts.NC)) followed by Start: the
// lifecycle every role has (egress.Run, toolworker.Run). ctx bounds the start only; the
// worker runs until Stop (or Kill). On an error nothing keeps running.
func Run(ctx context.Context, opts Options) (*Worker, error) {
	if opts.NC == nil {
		return nil, fmt.Errorf("%w: NC is required", ErrConfig)
	}
	js := opts.JS
	if js == nil {
		var err error
		if js, err = jetstream.New(opts.NC); err != nil {
			return nil, fmt.Errorf("turn: jetstream: %w", err)
		}
	}
	w, err := New(ctx, opts.NC, js, opts)
	if err != nil {
		return nil, err
	}
	if err := w.Start(ctx); err != nil {
		_ = w.Stop(context.WithoutCancel(ctx))
		return nil, err
	}
	return w, nil
}

// ID returns the replica id.
func (w *Worker) ID() string { return w.opts.ID }

// Start begins consuming SESSION_IN; Stop ends it. ctx bounds the start only (the consumer,
// the worker lease, the background runners' start): the worker runs on a context of its own
// until Stop. Call it once. A failed Start may leave goroutines running: Stop the worker.
func (w *Worker) Start(ctx context.Context) error {
	w.ctx, w.cancel = context.WithCancel(context.Background())
	if w.settler != nil {
		w.settler.ctx = w.ctx
	}
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
	return w.runner.Start(ctx, w.ctx, &w.wg, w.progress)
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
	w.settler.wait() // started by actors only, which have all ended
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
