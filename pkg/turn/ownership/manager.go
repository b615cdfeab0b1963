package ownership

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/metrics"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/store"
)

// ConsumerName is the durable consumer on SESSION_IN all turn-worker replicas share; a
// delivery handed over by a ring reports it as its consumer.
const ConsumerName = "turn-workers"

// Session is a session this replica runs, as ownership sees it (pkg/turn's actor). Its methods
// are called with the Manager's lock held, so they must not call back into the Manager, and
// must not block on the bus.
type Session interface {
	// Run is the session's life; it returns when the session stops (idle, handed over, lost,
	// or the replica stopping). The Manager calls it once, on a goroutine of its own.
	Run()
	// Alive reports whether the session still runs (it has not begun to stop).
	Alive() bool
	// Deliver hands over a SESSION_IN delivery the session now owes an ack.
	Deliver(msg jetstream.Msg, seq uint64)
	// Know notes that inbox event seq exists (a ring without a delivery).
	Know(seq uint64)
	// LeaseLost stops the session at once: another replica may own it now.
	LeaseLost(err error)
	// Shed asks an idle session to stop and hand itself to target (rebalancing); false when
	// it is busy or already moving.
	Shed(target string) bool
	// Kill marks the session as abandoned by a simulated crash: it releases nothing.
	Kill()
	// Claim is the session's claim, as Adopt got it.
	Claim() *Claim
	// Context ends when the session stops; it bounds the confirmation of its claim.
	Context() context.Context
}

// Sessions starts the sessions this replica claims: pkg/turn's Worker.
type Sessions interface {
	// Adopt returns the Session for sk under claim c, not yet running. It is called with the
	// Manager's lock held: it must only build the session.
	Adopt(sk events.SessionKey, c *Claim) Session
}

// Claim is a session's claim (store.Claim) and the lease generation it is confirmed for
// (AwaitFence). Safe for concurrent use.
type Claim struct {
	mu        sync.Mutex
	c         store.Claim
	gen       uint64
	confirmMu sync.Mutex // serializes confirmations (Manager.confirm)
}

// NewClaim is a claim confirmed for lease generation gen (tests, and sessions started
// outside a claim).
func NewClaim(c store.Claim, gen uint64) *Claim { return &Claim{c: c, gen: gen} }

// Token is the claim's fencing token: the revision of the claim in KV leases.
func (c *Claim) Token() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.c.Token
}

// Current is the claim as last written or confirmed.
func (c *Claim) Current() store.Claim {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.c
}

// Gen is the lease generation the claim is confirmed for.
func (c *Claim) Gen() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// Delivery is a SESSION_IN message and its stream sequence.
type Delivery struct {
	Msg         jetstream.Msg
	Seq         uint64
	Redelivered bool
}

// Config configures a Manager.
type Config struct {
	ID       string // this replica
	LeaseTTL time.Duration
	NC       *nats.Conn
	Leases   *store.Leases
	Sessions Sessions
	// Progress keeps held deliveries from redelivery (in-progress acks); a delivery rung over
	// or given back leaves it.
	Progress *natsutil.InProgress
	Metrics  *metrics.Turn // nil: not counted
	Log      *slog.Logger
}

// Manager holds this replica's ownership state. Its goroutines are counted in the WaitGroup
// Start is given and end with Start's ctx.
//
// Lock order (LOCKS.md): Manager.mu, then a Session's own lock (Deliver, Know, Alive, Shed
// are called under mu); leaseState.mu and Claim.mu are leaves.
type Manager struct {
	cfg      Config
	nc       *nats.Conn
	leases   *store.Leases
	progress *natsutil.InProgress
	log      *slog.Logger
	lease    leaseState

	ctx context.Context
	wg  *sync.WaitGroup

	mu        sync.Mutex
	sess      map[string]Session     // by session key string: the sessions this replica runs
	claiming  map[string][]Delivery  // sessions being claimed, with their deliveries
	owners    map[string]ownerHint   // sessions another replica was seen to own
	view      map[string]workerSeen  // worker leases, as the watch showed them
	viewReady bool                   // the watch has delivered its initial values
	bells     map[string][]ringEntry // by owner: deliveries queued for a doorbell ring
	bellWake  chan struct{}          // wakes ringBells
	bellSubj  string                 // this replica's doorbell, where rung replicas send notices
	suspect   map[string]suspicion   // peers whose doorbell had no responders (peers.go)
	adopted   map[string]uint64      // peers taken for dead: the epoch whose sessions were taken over
	shedPause time.Time              // no sessions are moved to another replica before (rebalance.go)
	killed    bool                   // Kill: no lease is released
	wakeSub   *nats.Subscription
	starts    chan struct{} // the start slots (starts.go)
}

// New returns a Manager; Start brings it up.
func New(cfg Config) *Manager {
	return &Manager{cfg: cfg, nc: cfg.NC, leases: cfg.Leases, progress: cfg.Progress, log: cfg.Log,
		sess: map[string]Session{}, claiming: map[string][]Delivery{}, owners: map[string]ownerHint{},
		view: map[string]workerSeen{}, bells: map[string][]ringEntry{}, bellWake: make(chan struct{}, 1),
		suspect: map[string]suspicion{}, adopted: map[string]uint64{}, bellSubj: events.AgentWakeSubject(cfg.ID),
		starts: make(chan struct{}, startSlots)}
}

// Start subscribes to the doorbell, takes the worker lease (retrying until startCtx ends) and
// starts the goroutines that ring doorbells, follow the worker leases, renew the lease and
// probe the peers. They run until ctx ends, each counted in wg.
func (o *Manager) Start(startCtx, ctx context.Context, wg *sync.WaitGroup) error {
	o.ctx, o.wg = ctx, wg
	// The doorbell before the lease: a peer that sees the lease probes the doorbell at once
	// (peers.go), and no ring for a session this replica is about to own must be missed.
	var err error
	if o.wakeSub, err = o.nc.Subscribe(o.bellSubj, o.onWake); err != nil {
		return fmt.Errorf("subscribe to doorbell: %w", err)
	}
	if err := o.nc.FlushTimeout(5 * time.Second); err != nil {
		return fmt.Errorf("subscribe to doorbell: %w", err)
	}
	// The liveness lease before anything is claimed: every claim carries its epoch.
	if err := o.acquireWorkerLease(startCtx); err != nil {
		return err
	}
	wg.Add(4)
	go o.ringBells()
	go o.followWorkers()
	go o.renewWorkerLease()
	go o.probePeers()
	return nil
}

// CloseDoorbell stops answering rings and probes (the first step of a stop or a crash).
func (o *Manager) CloseDoorbell() {
	if o.wakeSub != nil {
		_ = o.wakeSub.Unsubscribe()
	}
}

// Kill marks this replica as crashed: every session is marked killed and no lease is
// released at the end.
func (o *Manager) Kill() {
	o.mu.Lock()
	o.killed = true
	for _, a := range o.sess {
		a.Kill()
	}
	o.mu.Unlock()
}

// Release gives the worker lease up unless the replica was killed, so that other replicas
// need not wait for its TTL. Called once every session has stopped (and unclaimed).
func (o *Manager) Release(ctx context.Context) {
	o.mu.Lock()
	killed := o.killed
	o.mu.Unlock()
	if l := o.lease.get(); !killed && l.Revision != 0 {
		_ = o.leases.Release(ctx, l)
	}
}

// Route takes one SESSION_IN delivery for sk: to the session's running Session, to the claim
// under way, to the owner's doorbell when another replica was seen to own it, or it starts a
// claim. It never waits on the bus (it runs on the consumer's one callback goroutine).
func (o *Manager) Route(sk events.SessionKey, d Delivery) {
	key := sk.String()
	o.mu.Lock()
	defer o.mu.Unlock()
	if a := o.sess[key]; a != nil && a.Alive() {
		a.Deliver(d.Msg, d.Seq)
		return
	}
	if waiting, ok := o.claiming[key]; ok {
		o.claiming[key] = append(waiting, d)
		return
	}
	if h, ok := o.owners[key]; ok {
		// A redelivery means the last ring (if it was this replica's) was not taken: the
		// hint may name a replica that is gone, so the claim looks the owner up again.
		if !d.Redelivered && !o.staleLocked(h.owner, h.epoch) {
			o.ringLocked(sk, h.owner, h.epoch, []Delivery{d})
			return
		}
		delete(o.owners, key)
	}
	o.claiming[key] = []Delivery{d}
	o.wg.Add(1)
	go o.claim(sk)
}

// Session returns the running session of key, or nil.
func (o *Manager) Session(key string) Session {
	o.mu.Lock()
	defer o.mu.Unlock()
	if a := o.sess[key]; a != nil && a.Alive() {
		return a
	}
	return nil
}
