// Package turn is the turn-worker role: session actors that own chat sessions and run the agent
// loop for them (DESIGN.md §4–§5).
//
// Ownership. Every replica consumes the shared durable consumer on SESSION_IN. A delivery is
// only a wake-up: the worker that holds the session's lease (KV leases) runs the session's
// actor, and the actor reads the session's inbox subject itself, in stream order, from the
// cursor kept in the session record (KV sessions). Order therefore comes from the log, not
// from delivery.
//
// Affinity without bounce. A worker without the lease rings the owner's doorbell (core NATS
// agent.wake.<owner>, with the session and the sequence) and NAKs its copy with a short delay:
// the owner reads the event from the log at once, so no event waits for a redelivery to reach
// the owner, however many replicas share the consumer. The copy comes back and is acked once
// the owner's cursor has passed it and no open turn depends on it; until then it is what
// brings the session to another replica if the owner dies. A replica remembers for LeaseTTL/2
// which replica owns a session, so most foreign deliveries cost no lease round trip. A ring for
// a session the replica no longer runs makes it claim the session. Leases and fenced writes
// stay the source of correctness; a lost ring only costs speed.
//
// Durability. A delivery that started a turn is acked only when the turn is finished, and is
// kept alive with in-progress acks meanwhile; if the worker dies, the delivery comes back to
// another replica, which takes the expired lease, resumes the open turns recorded in the
// session record (see resume in turn.go) and re-reads the inbox after the durable cursor: a
// turn started from its inbox event writes no session record, its context commit carries the
// cursor (see startTurn, takeOver and startCursor).
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

	"github.com/agentbus/agentbus/pkg/approvals"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/loop"
	"github.com/agentbus/agentbus/pkg/memory"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/skills"
	"github.com/agentbus/agentbus/pkg/store"
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
	// LeaseTTL is how long a session stays owned without renewal (default 2s; whole seconds,
	// at least 1s). A dead worker's sessions, turns in flight included, are taken over about
	// max(LeaseTTL, AckWait) after the crash; renewals go out every LeaseTTL/3.
	LeaseTTL time.Duration
	// AckWait of the shared consumer (default 2s); held deliveries get in-progress acks every
	// AckWait/3, so a crashed worker's deliveries come back after at most AckWait.
	AckWait time.Duration
	// IdleRelease is how long an actor with nothing to do keeps its lease (default 10s). Longer
	// keeps more sessions warm on this replica at the cost of a lease renewal every LeaseTTL/3
	// per idle session.
	IdleRelease time.Duration
	// ToolTimeout bounds one tool call (default ai.agent.toolTimeout).
	ToolTimeout time.Duration
	// StreamFn replaces llm.Stream (tests, benchmarks).
	StreamFn loop.StreamFunc
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
	Log    *slog.Logger
}

// Worker runs session actors for every session whose lease it holds.
type Worker struct {
	opts      Options
	nc        *nats.Conn
	js        jetstream.JetStream
	inbox     jetstream.Stream
	evts      jetstream.Stream
	results   jetstream.Stream
	calls     jetstream.Stream // TOOL_CALLS: to see whether a request is still queued
	sessions  *store.Sessions
	leases    *store.Leases
	ctxlog    *store.ContextLog
	turnlog   *store.TurnLog
	tools     *ToolCatalog
	approvals *approvals.Store
	bg        *background           // schedules and task records (background.go)
	media     jetstream.ObjectStore // nil: media:// images stay references
	router    *resultRouter
	progress  *natsutil.InProgress // in-progress acks for held inbox deliveries and running subagent tasks
	log       *slog.Logger

	mu       sync.Mutex
	actors   map[string]*actor     // by session key string
	claiming map[string][]delivery // sessions whose lease is being taken, with their deliveries
	owners   map[string]ownerHint  // sessions another replica was seen to own
	wakeSub  *nats.Subscription
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
		opts.IdleRelease = 10 * time.Second
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
	w := &Worker{opts: opts, nc: nc, js: js, done: make(chan struct{}), actors: map[string]*actor{}, claiming: map[string][]delivery{}, owners: map[string]ownerHint{},
		router: newResultRouter(), log: opts.Log.With("worker", opts.ID)}
	var err error
	if w.inbox, err = js.Stream(ctx, events.StreamSessionIn); err != nil {
		return nil, fmt.Errorf("open %s: %w", events.StreamSessionIn, err)
	}
	if w.evts, err = js.Stream(ctx, events.StreamAgentEvents); err != nil {
		return nil, fmt.Errorf("open %s: %w", events.StreamAgentEvents, err)
	}
	if w.results, err = js.Stream(ctx, events.StreamToolResults); err != nil {
		return nil, fmt.Errorf("open %s: %w", events.StreamToolResults, err)
	}
	if w.calls, err = js.Stream(ctx, events.StreamToolCalls); err != nil {
		return nil, fmt.Errorf("open %s: %w", events.StreamToolCalls, err)
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
	if w.tools, err = NewToolCatalog(ctx, js); err != nil {
		return nil, err
	}
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
	cons, err := w.js.CreateOrUpdateConsumer(ctx, events.StreamSessionIn, jetstream.ConsumerConfig{
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
	// The doorbell first, so that no ring for a session this replica is about to own is missed.
	if w.wakeSub, err = w.nc.Subscribe(events.AgentWakeSubject(w.opts.ID), w.onWake); err != nil {
		return fmt.Errorf("subscribe to doorbell: %w", err)
	}
	w.cc, err = cons.Consume(w.onDelivery, jetstream.PullMaxMessages(512))
	if err != nil {
		return fmt.Errorf("consume %s: %w", ConsumerName, err)
	}
	w.wg.Add(3)
	go func() {
		defer w.wg.Done()
		w.tools.Run(w.ctx)
	}()
	go w.renewLeases()
	go func() {
		defer w.wg.Done()
		w.router.run(w.ctx.Done())
	}()
	if err := w.startSubagents(ctx); err != nil {
		return err
	}
	return w.startBackground(ctx)
}

// renewLeases renews the leases of every live actor every LeaseTTL/3, in one pipelined batch
// per tick rather than one goroutine and round trip per session.
func (w *Worker) renewLeases() {
	defer w.wg.Done()
	t := time.NewTicker(w.opts.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-t.C:
		}
		w.mu.Lock()
		actors := make([]*actor, 0, len(w.actors))
		for _, a := range w.actors {
			if a.alive() {
				actors = append(actors, a)
			}
		}
		w.mu.Unlock()
		if len(actors) == 0 {
			continue
		}
		leases := make([]store.Lease, len(actors))
		for i, a := range actors {
			leases[i] = a.currentLease()
		}
		out, errs := w.leases.RenewAll(w.ctx, leases)
		if w.ctx.Err() != nil {
			return
		}
		for i, a := range actors {
			if errs[i] != nil {
				// A failed round trip is retried next tick while the lease is still valid.
				if errors.Is(errs[i], store.ErrLeaseLost) || !leases[i].Valid(time.Now().Add(w.opts.LeaseTTL/3)) {
					a.leaseLost(errs[i])
				}
				continue
			}
			a.setLease(out[i])
		}
	}
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
	w.mu.Lock()
	for _, a := range w.actors {
		a.killed.Store(true)
	}
	w.mu.Unlock()
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
		if time.Now().Before(h.until) {
			w.wg.Add(1)
			go func() {
				defer w.wg.Done()
				w.notOwner(sk, d, h.owner)
			}()
			return
		}
		delete(w.owners, key)
	}
	w.claiming[key] = []delivery{d}
	w.wg.Add(1)
	go w.claim(sk)
}

// onWake answers a ring of this replica's doorbell: another replica got a delivery for a
// session it saw this replica own. The session's actor reads the inbox up to the sequence rung;
// with no actor (it went idle, or this replica restarted) the replica claims the session,
// whose actor then reads the inbox from the cursor.
func (w *Worker) onWake(m *nats.Msg) {
	sk, seq, err := events.ParseWakeBody(m.Data)
	if err != nil {
		w.log.Warn("ignoring a malformed doorbell ring", "err", err)
		return
	}
	key := sk.String()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx.Err() != nil {
		return
	}
	if a := w.actors[key]; a != nil && a.alive() {
		a.know(seq)
		return
	}
	if _, ok := w.claiming[key]; ok {
		return // the claim's actor reads the inbox from the cursor
	}
	delete(w.owners, key)
	w.claiming[key] = nil
	w.wg.Add(1)
	go w.claim(sk)
}

// delivery is a SESSION_IN message and its stream sequence.
type delivery struct {
	msg         jetstream.Msg
	seq         uint64
	redelivered bool
}

// ownerHint is which replica was seen holding a session's lease, and until when to trust that
// without asking the leases bucket again.
type ownerHint struct {
	owner string
	until time.Time
}

// claim tries to take sk's lease and start its actor, then hands over the deliveries that
// waited for the claim.
func (w *Worker) claim(sk events.SessionKey) {
	defer w.wg.Done()
	key := sk.String()
	lease, err := w.leases.Acquire(w.ctx, sk, w.opts.ID, w.opts.LeaseTTL)
	w.mu.Lock()
	waiting := w.claiming[key]
	delete(w.claiming, key)
	if err != nil {
		var held *store.HeldError
		isHeld := errors.As(err, &held)
		if isHeld {
			w.owners[key] = ownerHint{owner: held.Owner, until: time.Now().Add(w.opts.LeaseTTL / 2)}
		}
		w.mu.Unlock()
		if !isHeld && w.ctx.Err() == nil {
			w.log.Warn("acquire lease", "session", key, "err", err)
		}
		for _, d := range waiting {
			if isHeld {
				w.notOwner(sk, d, held.Owner)
			} else {
				_ = d.msg.NakWithDelay(time.Second)
			}
		}
		return
	}
	delete(w.owners, key)
	a := newActor(w, sk, lease)
	w.actors[key] = a
	for _, d := range waiting {
		a.deliver(d.msg, d.seq)
	}
	w.wg.Add(1)
	w.mu.Unlock()
	go func() {
		defer w.wg.Done()
		a.run()
		w.mu.Lock()
		if w.actors[key] == a {
			delete(w.actors, key)
		}
		w.mu.Unlock()
	}()
}

// notOwner handles a delivery for a session owner holds. A first delivery rings the owner's
// doorbell, so the owner reads the event from the log at once, and comes back after a short
// delay; a redelivery is acked once the owner's cursor has passed it and no open turn still
// depends on it (the copy kept unacked is what brings the session to another replica if the
// owner dies), and otherwise rings again and comes back again.
func (w *Worker) notOwner(sk events.SessionKey, d delivery, owner string) {
	if d.redelivered {
		s, err := w.sessions.Get(w.ctx, sk)
		if err == nil && d.seq <= w.durableCursor(s) && !openTurnNeeds(s, d.seq) {
			_ = d.msg.Ack()
			return
		}
	}
	if owner != "" && owner != w.opts.ID {
		if err := w.nc.Publish(events.AgentWakeSubject(owner), events.WakeBody(sk, d.seq)); err != nil {
			w.log.Debug("ring doorbell", "owner", owner, "err", err)
		}
	}
	_ = d.msg.NakWithDelay(w.opts.LeaseTTL / 4)
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

func openTurnNeeds(s *store.Session, seq uint64) bool {
	for _, t := range s.OpenTurns {
		if t.InboxSeq == seq {
			return true
		}
	}
	return false
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
	w.log.Warn("dead-lettered", "subject", subject, "seq", seq, "reason", reason, "err", cause)
}
