package toolworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/hooks"
	"github.com/agentbus/agentbus/pkg/metrics"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/toolbus"
	"github.com/agentbus/agentbus/pkg/tools"
)

// Defaults of Options.
const (
	DefaultConcurrency    = 32
	DefaultTimeout        = 60 * time.Second
	DefaultAckWait        = time.Second
	DefaultMaxAttempts    = 4
	DefaultPollWait       = time.Second
	DefaultInterruptGrace = 5 * time.Second
	// DefaultHeartbeat is used when the tools bucket has no TTL; otherwise the default is TTL/4.
	DefaultHeartbeat = 30 * time.Second
)

// Options configure Run. NC, JS and Registry are required.
type Options struct {
	NC       *nats.Conn
	JS       jetstream.JetStream
	Registry *tools.Registry
	// ID names this worker in the registry, results and logs (default: "tool-worker-" + a NUID).
	ID  string
	Log *slog.Logger
	// Metrics counts executed calls by tool and outcome, DeadLetters the calls given up on.
	// nil: not counted.
	Metrics     *metrics.Tools
	DeadLetters *metrics.DeadLetters
	// Concurrency is how many calls of one tool this worker runs at once (default 32). Each
	// tool has its own budget, so a slow tool cannot starve the others.
	Concurrency int
	// HeartbeatEvery is how often registry entries are refreshed (default: the tools bucket
	// TTL / 4; clamped to TTL / 3 so an entry never lapses between two beats).
	HeartbeatEvery time.Duration
	// DefaultTimeout bounds one tool run (default 60s); Timeouts overrides it per tool name.
	// The effective value is announced as the entry's TimeoutMs.
	DefaultTimeout time.Duration
	Timeouts       map[string]time.Duration
	// AckWait of the per-tool consumers (default 1s); in-progress acks go out every AckWait/3
	// while a call is handled, so a call a crashed worker held comes back after at most AckWait.
	// It bounds how soon another worker answers a call a killed worker held: a call with no
	// result yet runs again (idempotent tools) or is answered "interrupted" (the started
	// marker's process is gone, asked over events.ToolAttemptSubject).
	AckWait time.Duration
	// MaxAttempts is how often a call may be delivered before the worker gives up on it with an
	// error result and a dead letter (default 4; the consumer's MaxDeliver is MaxAttempts+1, the
	// last delivery being the one that records the give-up).
	MaxAttempts int
	// PollWait is how long one pull request waits for calls (default 1s). Stop returns after
	// at most about this long plus the running calls.
	PollWait time.Duration
	// InterruptGrace is how long past a non-idempotent attempt's own timeout the worker waits
	// for its result before calling it interrupted (default 5s).
	InterruptGrace time.Duration
	// Workspace is copied into every call's tools.Env (tools that touch files need one).
	Workspace string
	// Tracer records an "execute_tool <tool>" span per handled call, continuing the caller's
	// span the call carries (nil: off).
	Tracer trace.TracerProvider
	// Hooks runs the tool.before and tool.after hooks (nil: none; see hooks.go).
	Hooks *hooks.Runner
	// NoStepCopy makes the worker behave as one of the versions before issue 40: it does not
	// copy a call's step into the result (events.ToolCall.Step) and does not announce that it
	// does (events.ToolEntry.StepWorkers), so turns keep those tools' steps in AGENT_EVENTS.
	// For mixed-version tests; nothing else needs it.
	NoStepCopy bool
}

func (o *Options) defaults() error {
	switch {
	case o.NC == nil:
		return fmt.Errorf("%w: NC is required", ErrConfig)
	case o.JS == nil:
		return fmt.Errorf("%w: JS is required", ErrConfig)
	case o.Registry == nil:
		return fmt.Errorf("%w: Registry is required", ErrConfig)
	case o.Concurrency < 0, o.HeartbeatEvery < 0, o.DefaultTimeout < 0, o.AckWait < 0, o.MaxAttempts < 0,
		o.PollWait < 0, o.InterruptGrace < 0:
		return fmt.Errorf("%w: durations and counts must not be negative", ErrConfig)
	}
	if o.ID == "" {
		o.ID = "tool-worker-" + events.NewID()
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.DefaultTimeout == 0 {
		o.DefaultTimeout = DefaultTimeout
	}
	if o.AckWait == 0 {
		o.AckWait = DefaultAckWait
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.PollWait == 0 {
		o.PollWait = DefaultPollWait
	}
	if o.PollWait < 100*time.Millisecond {
		o.PollWait = 100 * time.Millisecond
	}
	if o.InterruptGrace == 0 {
		o.InterruptGrace = DefaultInterruptGrace
	}
	return nil
}

// Handle is a running tool worker. Stop drains it; Kill drops everything like a crash.
type Handle struct {
	opts    Options
	log     *slog.Logger
	results jetstream.Stream
	toolsKV jetstream.KeyValue
	// markers is KV tool_markers, the started markers of non-idempotent calls; legacy is KV
	// delivered, where versions before issue 41 wrote them (nil when it does not exist).
	markers jetstream.KeyValue
	legacy  jetstream.KeyValue

	// killCtx is the parent of every tool run and fetch; cancelled by Kill and at the end of Stop.
	killCtx context.Context
	kill    context.CancelFunc
	killed  atomic.Bool
	// instance names this process's run on the bus (events.ToolAttemptSubject); unlike ID it
	// is unique per Run, so a restarted worker with the same ID is never taken for its
	// predecessor. probes is the subscription that answers on it.
	instance string
	probes   *nats.Subscription
	stopping chan struct{}
	stopOnce sync.Once
	done     chan struct{}

	loops sync.WaitGroup // fetch loops and the heartbeat loop
	calls sync.WaitGroup // calls being handled

	mu       sync.Mutex
	served   map[string]*served
	inflight map[string]chan struct{} // call id -> closed when its handling ends
	ann      toolbus.Announcer        // this worker's entries in KV tools
	beat     time.Duration

	progress *natsutil.InProgress // in-progress acks for the calls being handled
}

// served is one tool this worker consumes calls for.
type served struct {
	name string
	cons jetstream.Consumer
	sem  chan struct{}
	stop chan struct{} // closed when the tool left the registry
}

// Run starts a tool worker serving every tool of opts.Registry: it creates the per-tool
// consumers, announces the tools in KV "tools" and starts consuming. Tools added to or removed
// from the registry later are picked up at the next heartbeat. When ctx ends the worker stops
// as by Stop.
func Run(ctx context.Context, opts Options) (*Handle, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	h := &Handle{opts: opts, log: opts.Log.With("worker", opts.ID), stopping: make(chan struct{}), done: make(chan struct{}),
		served: map[string]*served{}, inflight: map[string]chan struct{}{}}
	var err error
	if h.results, err = natsutil.Stream(ctx, opts.JS, events.StreamToolResults); err != nil {
		return nil, fmt.Errorf("open stream %s: %w", events.StreamToolResults, err)
	}
	if h.toolsKV, err = natsutil.KeyValue(ctx, opts.JS, events.BucketTools); err != nil {
		return nil, fmt.Errorf("open KV %s: %w", events.BucketTools, err)
	}
	if h.markers, err = natsutil.KeyValue(ctx, opts.JS, events.BucketToolMarkers); err != nil {
		return nil, fmt.Errorf("open KV %s (are the streams provisioned by this version?): %w", events.BucketToolMarkers, err)
	}
	// Markers of older versions, in KV delivered, are honoured until they age out (read only).
	if h.legacy, err = natsutil.KeyValue(ctx, opts.JS, events.BucketDelivered); err != nil {
		if !errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, fmt.Errorf("open KV %s: %w", events.BucketDelivered, err)
		}
		h.legacy = nil // a deployment without it has no older markers
	}
	h.beat = opts.HeartbeatEvery
	var ttl time.Duration
	if st, err := h.toolsKV.Status(ctx); err == nil {
		ttl = st.TTL()
	}
	switch {
	case h.beat == 0 && ttl > 0:
		h.beat = ttl / 4
	case h.beat == 0:
		h.beat = DefaultHeartbeat
	case ttl > 0 && h.beat > ttl/3:
		h.log.Warn("tool worker: heartbeat too slow for the tools bucket TTL; clamped", "heartbeat", h.beat, "ttl", ttl)
		h.beat = ttl / 3
	}
	h.ann = toolbus.Announcer{KV: h.toolsKV, ID: opts.ID, Window: 2 * h.beat, CopiesStep: !opts.NoStepCopy}
	h.killCtx, h.kill = context.WithCancel(context.Background())
	h.instance = events.NewID()
	if h.probes, err = opts.NC.Subscribe(events.ToolAttemptSubject(h.instance), h.answerProbe); err != nil {
		h.kill()
		return nil, fmt.Errorf("subscribe %s: %w", events.ToolAttemptSubject(h.instance), err)
	}
	h.progress = natsutil.NewInProgress(opts.AckWait / 3)

	for _, t := range opts.Registry.List() {
		if err := h.serve(ctx, t); err != nil {
			h.Kill()
			return nil, err
		}
	}
	h.loops.Add(1)
	go h.heartbeatLoop()
	go func() {
		select {
		case <-ctx.Done():
			_ = h.Stop(context.Background())
		case <-h.done:
		}
	}()
	h.log.Info("tool worker started", "tools", len(h.served), "heartbeat", h.beat)
	return h, nil
}

// ID returns the worker id.
func (h *Handle) ID() string { return h.opts.ID }

// Tools returns the names of the tools this worker serves now.
func (h *Handle) Tools() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.served))
	for n := range h.served {
		out = append(out, n)
	}
	return out
}

// ConsumerName is the durable consumer of a tool's calls on TOOL_CALLS.
func ConsumerName(tool string) string { return "tool_" + events.EncodeToken(tool) }

func (h *Handle) consumerConfig(name string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       ConsumerName(name),
		Description:   "agentbus: calls of tool " + name,
		FilterSubject: events.ToolCallSubject(name),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       h.opts.AckWait,
		MaxDeliver:    h.opts.MaxAttempts + 1,
	}
}

// serve starts consuming t's calls and announces it.
func (h *Handle) serve(ctx context.Context, t tools.Tool) error {
	cons, err := natsutil.Consumer(ctx, h.opts.JS, events.StreamToolCalls, h.consumerConfig(t.Name))
	if err != nil {
		return fmt.Errorf("consumer for tool %s: %w", t.Name, err)
	}
	if err := natsutil.Retry(ctx, func(ctx context.Context) error { return h.ann.Announce(ctx, h.Entry(t)) }); err != nil {
		return fmt.Errorf("announce tool %s: %w", t.Name, err)
	}
	s := &served{name: t.Name, cons: cons, sem: make(chan struct{}, h.opts.Concurrency), stop: make(chan struct{})}
	h.mu.Lock()
	h.served[t.Name] = s
	h.mu.Unlock()
	h.loops.Add(1)
	go h.fetchLoop(s)
	return nil
}

// sync follows registry changes: new tools are served, removed ones withdrawn.
func (h *Handle) sync(ctx context.Context) {
	want := map[string]tools.Tool{}
	for _, t := range h.opts.Registry.List() {
		want[t.Name] = t
	}
	h.mu.Lock()
	var gone []*served
	for name, s := range h.served {
		if _, ok := want[name]; !ok {
			gone = append(gone, s)
			delete(h.served, name)
		}
	}
	var added []tools.Tool
	for name, t := range want {
		if _, ok := h.served[name]; !ok {
			added = append(added, t)
		}
	}
	h.mu.Unlock()
	for _, s := range gone {
		close(s.stop)
		if err := h.ann.Withdraw(ctx, s.name); err != nil {
			h.log.Warn("tool worker: withdraw removed tool", "tool", s.name, "err", err)
		}
	}
	for _, t := range added {
		if err := h.serve(ctx, t); err != nil {
			h.log.Warn("tool worker: serve new tool", "tool", t.Name, "err", err)
		}
	}
}

func (h *Handle) heartbeatLoop() {
	defer h.loops.Done()
	tick := time.NewTicker(h.beat)
	defer tick.Stop()
	for {
		select {
		case <-h.stopping:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(h.killCtx, h.beat)
		h.sync(ctx)
		h.mu.Lock()
		names := make([]string, 0, len(h.served))
		for n := range h.served {
			names = append(names, n)
		}
		h.mu.Unlock()
		for _, n := range names {
			t, ok := h.opts.Registry.Get(n)
			if !ok {
				continue
			}
			if err := h.ann.Announce(ctx, h.Entry(t)); err != nil && h.killCtx.Err() == nil {
				h.log.Warn("tool worker: heartbeat", "tool", n, "err", err)
			}
		}
		cancel()
	}
}

// fetchLoop pulls calls of one tool as long as the worker runs, never more than the tool's
// free concurrency slots, so no fetched call waits in a buffer without in-progress acks.
func (h *Handle) fetchLoop(s *served) {
	defer h.loops.Done()
	// Calls run on handler goroutines that the loop starts as calls need them (never more
	// than the tool's concurrency, since every call holds a slot) and that live as long as
	// the loop: a goroutine per call paid on every call for starting and for growing its
	// stack through argument validation again. Closing work ends them once their call is done.
	work := make(chan jetstream.Msg)
	defer close(work)
	handlers := 0
	dispatch := func(msg jetstream.Msg) {
		h.calls.Add(1)
		select {
		case work <- msg:
			return
		default:
		}
		if handlers < cap(s.sem) {
			handlers++
			h.loops.Add(1)
			go h.handler(s, work)
		}
		work <- msg // a handler is free, or is about to be: this call holds one of the slots
	}
	for {
		// Stopping wins over a free slot: otherwise the select below may start one more poll
		// and Stop waits for it.
		select {
		case <-h.stopping:
			return
		case <-s.stop:
			return
		default:
		}
		select {
		case s.sem <- struct{}{}:
		case <-h.stopping:
			return
		case <-s.stop:
			return
		}
		n := 1
	grab:
		for n < cap(s.sem) {
			select {
			case s.sem <- struct{}{}:
				n++
			default:
				break grab
			}
		}
		// FetchMaxWait, not a context deadline: the batch then ends with the server's own
		// expiry notice, after every message the server sent for it. A client-side deadline
		// can end the batch while a message is in flight, and that message would sit unacked
		// for a whole AckWait.
		batch, err := s.cons.Fetch(n, jetstream.FetchMaxWait(h.opts.PollWait))
		got := 0
		if err == nil {
			msgs := batch.Messages()
		recv:
			for {
				select {
				case msg, ok := <-msgs:
					if !ok {
						break recv
					}
					got++
					dispatch(msg)
				case <-h.killCtx.Done():
					break recv // a crash: whatever else arrives stays unacked
				}
			}
			if h.killCtx.Err() == nil {
				err = batch.Error()
			}
		}
		for ; got < n; got++ {
			<-s.sem
		}
		if err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) && h.killCtx.Err() == nil {
			h.log.Warn("tool worker: fetch", "tool", s.name, "err", err)
			select {
			case <-time.After(500 * time.Millisecond):
			case <-h.stopping:
			case <-s.stop:
			}
		}
	}
}

// handler runs the calls fetchLoop hands it until work is closed. Each call's slot is freed
// once the call is done.
func (h *Handle) handler(s *served, work <-chan jetstream.Msg) {
	defer h.loops.Done()
	for msg := range work {
		h.handle(s, msg)
		<-s.sem
		h.calls.Done()
	}
}

// Stop drains the worker: no new calls are fetched, running calls finish and record their
// results, then the worker's id is removed from its registry entries (the entry itself when it
// was the last worker). It waits for all of that at most until ctx ends; then it abandons the
// calls still running as Kill does (they come back to another worker after AckWait) and
// returns ctx's error, while Done reports when the last goroutine has ended. Safe to call more
// than once, concurrently and after Kill; every call waits for the same shutdown.
func (h *Handle) Stop(ctx context.Context) error {
	h.stopOnce.Do(func() { go h.shutdown() })
	select {
	case <-h.done:
		return nil
	case <-ctx.Done():
		h.killed.Store(true)
		h.endProbes()
		h.kill()
		return fmt.Errorf("toolworker: stop: %w", ctx.Err())
	}
}

// shutdown runs once, on its own goroutine (started by Stop), and closes h.done at its end.
func (h *Handle) shutdown() {
	close(h.stopping)
	h.loops.Wait()
	h.calls.Wait()
	if !h.killed.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		h.mu.Lock()
		names := make([]string, 0, len(h.served))
		for n := range h.served {
			names = append(names, n)
		}
		h.mu.Unlock()
		for _, n := range names {
			if err := h.ann.Withdraw(ctx, n); err != nil {
				h.log.Warn("tool worker: withdraw on stop", "tool", n, "err", err)
			}
		}
		cancel()
	}
	h.endProbes()
	h.progress.Close()
	h.kill()
	h.log.Info("tool worker stopped")
	close(h.done)
}

// endProbes stops answering probes: from then on a probe of this instance gets "no responders",
// as it would once the process is gone.
func (h *Handle) endProbes() {
	h.mu.Lock()
	sub := h.probes
	h.probes = nil
	h.mu.Unlock()
	if sub != nil {
		_ = sub.Unsubscribe()
	}
}

// answerProbe answers a probe of this instance (body: a call id): ToolAttemptRunning while a
// handler of that call runs here, ToolAttemptIdle otherwise. A handler releases its call only
// after its result was stored (or it gave the call back), so "idle" means: the result is there,
// or this instance will not store one.
func (h *Handle) answerProbe(m *nats.Msg) {
	if m.Reply == "" || h.killed.Load() {
		return
	}
	h.mu.Lock()
	_, busy := h.inflight[string(m.Data)]
	h.mu.Unlock()
	answer := events.ToolAttemptIdle
	if busy {
		answer = events.ToolAttemptRunning
	}
	_ = m.Respond([]byte(answer))
}

// Kill stops the worker as a crash would: running tools are cancelled, nothing more is
// published or acknowledged (the calls come back to another worker after AckWait), probes of
// its instance go unanswered ("no responders", as when a process dies) and the registry
// entries are left to expire with the bucket TTL. It returns once the worker's
// goroutines have ended. For tests of crash recovery.
func (h *Handle) Kill() {
	h.killed.Store(true)
	h.endProbes() // a killed process's connection closes: its probes go unanswered at once
	h.progress.Close()
	h.kill()
	_ = h.Stop(context.Background())
}

// Done is closed once the worker has stopped.
func (h *Handle) Done() <-chan struct{} { return h.done }
