package egress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agentbus/agentbus/pkg/im"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/hooks"
	"github.com/agentbus/agentbus/pkg/metrics"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/store"
	"github.com/agentbus/agentbus/pkg/store/transcript"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of Options.
const (
	DefaultDurable         = "egress"
	DefaultConcurrency     = 16
	DefaultAckWait         = time.Second
	DefaultMaxAckPending   = 1024
	DefaultMaxRetries      = 3
	DefaultRetryInitial    = 200 * time.Millisecond
	DefaultRetryMax        = 5 * time.Second
	DefaultMaxDeliveries   = 8
	DefaultRedeliveryDelay = 2 * time.Second
	DefaultMaxRedelivery   = 2 * time.Minute
	DefaultSendTimeout     = 15 * time.Second
	DefaultHandlerTimeout  = 5 * time.Minute
	DefaultMaxRetryAfter   = 2 * time.Minute
)

// Options configure Run. NC is required; everything else has a default (zero picks it). Run
// fills the defaults (setDefaults) and then checks the result once (Validate); egress reads no
// configuration file: pkg/app maps the im.egress block onto these fields.
type Options struct {
	// NC is the bus connection. Egress opens one more connection with the same options (but
	// none of its callbacks) for consuming IM_OUT, so pulls and acks have a socket of their own
	// and Stop can cut them cleanly, and uses NC for receipts, KV, dead letters and the search
	// service.
	NC *nats.Conn
	// JS is the JetStream context on NC (default jetstream.New(NC)).
	JS jetstream.JetStream
	// DataDir holds transcripts.db, the transcript archive (empty: no archive, unless
	// Transcripts is set).
	DataDir string
	// Log is the logger (default slog.Default()).
	Log *slog.Logger
	// Metrics counts sends by platform and outcome, DeadLetters the parts given up on. nil:
	// not counted.
	Metrics     *metrics.Egress
	DeadLetters *metrics.DeadLetters
	// Senders are the platforms' outbound halves by platform name (the composition root builds
	// them from the pkg/im registry). A part for a platform without one is dead-lettered with
	// reason "no_sender"; nil values are ignored.
	Senders map[string]im.Sender
	// Transcripts is an already open archive to serve transcripts.search from (Run does not
	// close it). When nil and DataDir is set, Run opens DataDir/transcripts.db and closes it on
	// Stop.
	Transcripts *transcript.DB

	// ArchiverNode names this node's archiver consumers (transcripts-<node>-in/-sent): every
	// archive needs its own so that it gets every message. Default: with DataDir, the name kept
	// in DataDir/transcripts.node (made when the archive is new; see archiveNode), so replicas
	// with data directories of their own need nothing set; with Transcripts, "default".
	ArchiverNode string
	// NoArchiver serves searches from the archive without filling it (another process does).
	NoArchiver bool

	// Durable names the shared IM_OUT consumer and its deliver group: every egress replica with
	// the same name shares the work (default "egress").
	Durable string
	// Concurrency is how many parts this process handles at once (default 16).
	Concurrency int
	// AckWait of the consumer (default 1 s): how soon the parts a crashed egress held reach
	// another replica (a reply a killed replica held is sent about AckWait after the kill). From the moment a part is fetched (waiting in its lane included) until
	// its verdict it gets an in-progress ack within AckWait/2 and then every AckWait/3, so a
	// slow send or a throttled platform never waits for a redelivery on another replica.
	AckWait time.Duration
	// MaxAckPending bounds unacknowledged parts across all replicas (default 1024). Keep it
	// below rate × AckWait when a platform is throttled, or buffered parts outlive AckWait.
	MaxAckPending int
	// MaxRetries, RetryInitial, RetryMax: in-process retries of transient failures within one
	// delivery (exponential backoff, multiplier 2).
	MaxRetries   int
	RetryInitial time.Duration
	RetryMax     time.Duration
	// MaxDeliveries: after this many deliveries that all failed transiently the part is
	// dead-lettered (reason max_deliveries) instead of redelivered (default 8).
	MaxDeliveries int
	// RedeliveryDelay is the NAK delay after the first failed delivery; it doubles per
	// delivery up to MaxRedeliveryDelay (defaults 2 s and 2 min).
	RedeliveryDelay    time.Duration
	MaxRedeliveryDelay time.Duration
	// SendTimeout bounds one Send call (default 15 s). A send that has started is not
	// cancelled by Stop: it runs to its end so its outcome is recorded.
	SendTimeout time.Duration
	// HandlerTimeout bounds one delivery including throttling and retries (default 5 min).
	HandlerTimeout time.Duration
	// RateLimits per platform ("*" = default for platforms not listed). Default: none.
	RateLimits map[string]RateLimit
	// MaxRetryAfter caps how long a platform's Retry-After pauses it (default 2 min).
	MaxRetryAfter time.Duration
	// Tracer records a "send <platform>" span per delivery, continuing the turn's span the part
	// carries; senders that speak HTTP add a client span and pass traceparent on (nil: off).
	Tracer trace.TracerProvider
	// Hooks runs message.sending and message.sent (nil: none; hooks.go).
	Hooks *hooks.Runner

	// afterRecord is a test hook run after a part was sent, recorded and its receipt published,
	// before the handler returns (and so before the ack).
	afterRecord func(out events.Outbound)
	// beforeRecord is a test hook run after the platform accepted a part, before its receipt is
	// handed to the group commit; true makes the handler fail there (a process killed between
	// the platform's 2xx and the receipt write).
	beforeRecord func(out events.Outbound) bool
	// beforeWrite is a test hook the receipt writer runs before each write, with the number of
	// receipts it took.
	beforeWrite func(n int)
}

// setDefaults fills every zero (or negative) field with its default.
func (o *Options) setDefaults() {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Durable == "" {
		o.Durable = DefaultDurable
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.Concurrency, DefaultConcurrency)
	def(&o.MaxRetries, DefaultMaxRetries)
	def(&o.MaxDeliveries, DefaultMaxDeliveries)
	def(&o.MaxAckPending, DefaultMaxAckPending)
	dur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	dur(&o.AckWait, DefaultAckWait)
	dur(&o.RetryInitial, DefaultRetryInitial)
	dur(&o.RetryMax, DefaultRetryMax)
	dur(&o.RedeliveryDelay, DefaultRedeliveryDelay)
	dur(&o.MaxRedeliveryDelay, DefaultMaxRedelivery)
	dur(&o.SendTimeout, DefaultSendTimeout)
	dur(&o.HandlerTimeout, DefaultHandlerTimeout)
	dur(&o.MaxRetryAfter, DefaultMaxRetryAfter)
}

// Validate reports the first unusable field of o (after setDefaults), wrapping ErrConfig.
func (o Options) Validate() error {
	switch {
	case o.NC == nil:
		return fmt.Errorf("%w: NC is required", ErrConfig)
	case o.RetryInitial > o.RetryMax:
		return fmt.Errorf("%w: RetryInitial %v is above RetryMax %v", ErrConfig, o.RetryInitial, o.RetryMax)
	case o.RedeliveryDelay > o.MaxRedeliveryDelay:
		return fmt.Errorf("%w: RedeliveryDelay %v is above MaxRedeliveryDelay %v", ErrConfig, o.RedeliveryDelay, o.MaxRedeliveryDelay)
	}
	for p, l := range o.RateLimits {
		if l.PerSecond < 0 || l.Burst < 0 {
			return fmt.Errorf("%w: RateLimits[%q]: perSecond and burst must not be negative", ErrConfig, p)
		}
	}
	return nil
}

// Stats counts what a running egress did.
type Stats struct {
	Delivered    uint64 // parts sent and recorded
	Skipped      uint64 // deliveries of parts already recorded (their IM_SENT receipt, or an older KV delivered entry; not sent again)
	DeadLettered uint64 // parts moved to DEAD_LETTERS
	Failures     uint64 // failed send attempts (transient or permanent)
}

// Handle is a running egress.
type Handle struct {
	e        *egress
	router   *message.Router
	runDone  chan struct{}
	runErr   error
	svc      micro.Service
	db       *transcript.DB
	ownDB    bool
	archiver *transcript.Archiver
	sub      *laneSubscriber
	subConn  *nats.Conn

	stopOnce sync.Once
	stopped  chan struct{} // closed when shutdown has finished
	stopErr  error         // set before stopped is closed
}

// Stats returns the counters so far.
func (h *Handle) Stats() Stats {
	return Stats{
		Delivered:    h.e.delivered.Load(),
		Skipped:      h.e.skipped.Load(),
		DeadLettered: h.e.deadLettered.Load(),
		Failures:     h.e.failures.Load(),
	}
}

// Transcripts returns the archive egress serves searches from (nil when there is none).
func (h *Handle) Transcripts() *transcript.DB { return h.db }

// Stop closes the router (waiting for parts in flight, up to SendTimeout + 5 s), the search
// service, the archive (when Run opened it) and the subscription connection. Parts whose ack
// was not sent are redelivered to another replica (or this one after restart) and skipped
// there via their IM_SENT receipt. It waits at most until ctx ends and then returns ctx's error while
// the shutdown goes on (Done, then a later Stop, report its end). Safe to call more than once
// and concurrently; every call returns the same result once the shutdown is over.
func (h *Handle) Stop(ctx context.Context) error {
	h.stopOnce.Do(func() { go h.shutdown() })
	select {
	case <-h.stopped:
		return h.stopErr
	case <-ctx.Done():
		return fmt.Errorf("egress: stop: %w", ctx.Err())
	}
}

// shutdown runs once, on its own goroutine (started by Stop), and closes h.stopped at its end.
func (h *Handle) shutdown() {
	defer close(h.stopped)
	var errs []error
	if err := h.router.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close router: %w", err))
	}
	<-h.runDone
	h.e.progress.Close()
	h.e.workers.close()
	if h.svc != nil {
		if err := h.svc.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stop search service: %w", err))
		}
	}
	if h.archiver != nil {
		if err := h.archiver.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("archiver: %w", err))
		}
	}
	if h.ownDB && h.db != nil {
		if err := h.db.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	// The router closes the subscriber only on some paths (its handler may see the router's
	// context end first); closing it is idempotent and waits for the last acks.
	_ = h.sub.Close()
	// Acks are plain publishes: make sure the server has them before the connection goes
	// (one lost would only mean a redelivery, skipped via its IM_SENT receipt).
	if err := h.subConn.FlushTimeout(5 * time.Second); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		h.e.log.Warn("egress: flushing the last acks", "err", err)
	}
	h.subConn.Close()
	h.stopErr = errors.Join(errs...)
}

// Done is closed when egress has stopped delivering: after Stop, or when its subscription died
// (then Stop still releases the rest).
func (h *Handle) Done() <-chan struct{} { return h.runDone }

// egress is the handler state shared by the middleware.
type egress struct {
	o        Options
	log      *slog.Logger
	js       jetstream.JetStream
	sent     jetstream.Stream   // IM_SENT: the delivery records (receipts), one subject per chat
	kv       jetstream.KeyValue // KV delivered: records of older versions only (read, never written)
	senders  map[string]im.Sender
	limiter  *limiter
	inflight inflight
	sentHere sentCache // out ids this process sent (and recorded): skipped without a lookup
	// freshFrom is the first IM_OUT sequence published after this process bound to its
	// consumer (0: none known, every part is looked up). See newSinceBind.
	freshFrom atomic.Uint64
	progress  *natsutil.InProgress
	workers   *workers
	receipts  *receiptWriter

	delivered, skipped, deadLettered, failures atomic.Uint64
}

// Run starts egress: a watermill router on the shared IM_OUT consumer (created or updated;
// streams and buckets must already be provisioned, egress never creates or alters them), the
// transcripts.search service when an archive is available, and returns once the router is
// running. ctx bounds the start only; the role runs until Handle.Stop.
func Run(ctx context.Context, o Options) (*Handle, error) {
	o.setDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	js := o.JS
	if js == nil {
		var err error
		if js, err = jetstream.New(o.NC); err != nil {
			return nil, fmt.Errorf("egress: jetstream: %w", err)
		}
	}
	kv, err := natsutil.KeyValue(ctx, js, events.BucketDelivered)
	if err != nil {
		return nil, fmt.Errorf("egress: KV %s (are the streams provisioned?): %w", events.BucketDelivered, err)
	}
	sent, err := natsutil.Stream(ctx, js, events.StreamIMSent)
	if err != nil {
		return nil, fmt.Errorf("egress: stream %s (are the streams provisioned?): %w", events.StreamIMSent, err)
	}
	if _, err := natsutil.Stream(ctx, js, events.StreamDeadLetters); err != nil {
		return nil, fmt.Errorf("egress: stream %s (are the streams provisioned?): %w", events.StreamDeadLetters, err)
	}
	filter := events.PrefixIMOut + ".>"
	consCfg := jetstream.ConsumerConfig{
		Durable:       o.Durable,
		Description:   "agentbus egress: outbound delivery",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       o.AckWait,
		MaxDeliver:    -1, // egress dead-letters after MaxDeliveries itself: nothing expires silently
		MaxAckPending: o.MaxAckPending,
		FilterSubject: filter,
	}
	if _, err := natsutil.Consumer(ctx, js, events.StreamIMOut, consCfg); err != nil {
		return nil, fmt.Errorf("egress: consumer %s on %s (is the stream provisioned?): %w", o.Durable, events.StreamIMOut, err)
	}

	e := &egress{
		o:       o,
		log:     o.Log.With("role", events.RoleEgress),
		js:      js,
		sent:    sent,
		kv:      kv,
		senders: buildSenders(o),
		limiter: newLimiter(o.RateLimits, o.MaxRetryAfter),
	}
	e.receipts = newReceiptWriter(e)

	subOpts := o.NC.Opts
	if subOpts.Name != "" {
		subOpts.Name += " "
	}
	subOpts.Name += "egress-sub"
	// The shared connection's callbacks belong to whoever made it (a ClosedCB that exits the
	// process, say); this connection reports to the egress log instead.
	subOpts.ClosedCB = nil
	subOpts.DisconnectedCB, subOpts.ReconnectedCB, subOpts.DiscoveredServersCB = nil, nil, nil
	subOpts.DisconnectedErrCB = func(_ *nats.Conn, err error) {
		if err != nil {
			e.log.Warn("egress: subscriber disconnected", "err", err)
		}
	}
	subOpts.AsyncErrorCB = func(_ *nats.Conn, _ *nats.Subscription, err error) {
		e.log.Warn("egress: subscriber error", "err", err)
	}
	subOpts.ConnectedCB, subOpts.LameDuckModeHandler, subOpts.ReconnectErrCB = nil, nil, nil
	subConn, err := subOpts.Connect()
	if err != nil {
		return nil, fmt.Errorf("egress: connect subscriber: %w", err)
	}
	wlog := routerLogger{
		LoggerAdapter: watermill.NewSlogLoggerWithLevelMapping(e.log, map[slog.Level]slog.Level{slog.LevelInfo: slog.LevelDebug}),
		log:           e.log,
	}
	subJS, err := jetstream.New(subConn)
	if err != nil {
		subConn.Close()
		return nil, fmt.Errorf("egress: subscriber jetstream: %w", err)
	}
	// Retried like the create above: a restart while a NATS node is down must not end on one
	// unanswered lookup.
	var cons jetstream.Consumer
	if err := natsutil.Retry(ctx, func(ctx context.Context) error {
		var err error
		cons, err = subJS.Consumer(ctx, events.StreamIMOut, o.Durable)
		return err
	}); err != nil {
		subConn.Close()
		return nil, fmt.Errorf("egress: consumer %s: %w", o.Durable, err)
	}
	// Bound: what IM_OUT holds now may have been delivered before (newSinceBind); what comes
	// after may not. Without the figure every part is looked up.
	if err := natsutil.Retry(ctx, func(ctx context.Context) error {
		st, err := js.Stream(ctx, events.StreamIMOut)
		if err != nil {
			return err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return err
		}
		e.freshFrom.Store(info.State.LastSeq + 1)
		return nil
	}); err != nil {
		e.log.Warn("egress: IM_OUT's last sequence unknown; every part is looked up", "err", err)
	}
	e.progress = natsutil.NewInProgress(o.AckWait / 3)
	pullMax := 2 * o.Concurrency
	if pullMax > o.MaxAckPending {
		pullMax = o.MaxAckPending
	}
	sub := &laneSubscriber{
		cons:         cons,
		lanes:        o.Concurrency,
		laneBuf:      32,
		pullMax:      pullMax,
		delay:        redeliveryDelay{base: o.RedeliveryDelay, max: o.MaxRedeliveryDelay},
		closeTimeout: o.SendTimeout + 5*time.Second,
		progress:     e.progress,
		log:          e.log,
		onErr:        e.markConsumerLost,
		closing:      make(chan struct{}),
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: o.SendTimeout + 5*time.Second}, wlog)
	if err != nil {
		e.progress.Close()
		subConn.Close()
		return nil, fmt.Errorf("egress: router: %w", err)
	}
	retry := middleware.Retry{
		MaxRetries:          o.MaxRetries,
		InitialInterval:     o.RetryInitial,
		MaxInterval:         o.RetryMax,
		Multiplier:          2,
		RandomizationFactor: 0.2,
		ShouldRetry: func(p middleware.RetryParams) bool {
			_, perm := classify(p.Err)
			return !perm
		},
	}
	// Outermost first: correlation ids and the delivery's metadata into the context; dead
	// letters for permanent failures and exhausted deliveries; in-progress acks while a part is
	// handled; in-process retries of transient failures; panics turned into errors.
	router.AddMiddleware(e.correlation, e.deadLetter, e.inProgress, retry.Middleware, middleware.Recoverer)
	e.workers = newWorkers(o.Concurrency)
	router.AddConsumerHandler("egress", filter, sub, e.workers.handler(e.handle))

	h := &Handle{e: e, router: router, sub: sub, runDone: make(chan struct{}), stopped: make(chan struct{}), subConn: subConn}
	go func() {
		defer close(h.runDone)
		h.runErr = router.Run(context.Background())
	}()
	select {
	case <-router.Running():
	case <-h.runDone:
		e.progress.Close()
		e.workers.close()
		subConn.Close()
		return nil, fmt.Errorf("egress: router: %w", h.runErr)
	case <-ctx.Done():
		_ = h.Stop(context.Background())
		return nil, ctx.Err()
	}

	if err := h.startArchive(ctx); err != nil {
		_ = h.Stop(context.Background())
		return nil, err
	}
	e.log.Info("egress running", "durable", o.Durable, "concurrency", o.Concurrency, "platforms", senderNames(e.senders))
	return h, nil
}

// startArchive opens the transcript archive, starts the archiver that fills it from IM_IN and
// IM_SENT (pkg/store/transcript) and serves transcripts.search from it.
func (h *Handle) startArchive(ctx context.Context) error {
	o := h.e.o
	db := o.Transcripts
	node := o.ArchiverNode
	if db == nil && o.DataDir != "" {
		var err error
		if node == "" {
			if node, err = archiveNode(o.DataDir); err != nil {
				return fmt.Errorf("egress: %w", err)
			}
		}
		db, err = transcript.Open(filepath.Join(o.DataDir, transcriptsFile), nil)
		if err != nil {
			return fmt.Errorf("egress: %w", err)
		}
		h.ownDB = true
	}
	if db == nil {
		h.e.log.Info("egress: no transcript archive (no data dir); transcripts.search is not served here")
		return nil
	}
	h.db = db
	if err := runArchiver(ctx, h, node); err != nil {
		return err
	}
	svc, err := ServeSearch(o.NC, db, h.e.log)
	if err != nil {
		return err
	}
	h.svc = svc
	return nil
}

// runArchiver starts the transcript archiver (IM_IN + IM_SENT -> the archive). It lives as
// long as the Handle (ctx only bounds the start).
func runArchiver(ctx context.Context, h *Handle, node string) error {
	if h.e.o.NoArchiver {
		return nil
	}
	a, err := transcript.RunArchiver(ctx, h.e.js, h.db, transcript.ArchiverOptions{
		Node:   node,
		Logger: h.e.log,
		// Its dead letters count with egress's own (agentbus_dead_letters_total{role="archiver"}).
		OnDeadLetter: h.e.o.DeadLetters.Add,
	})
	if err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	h.archiver = a
	return nil
}

// routerLogger is the watermill router's logger. The router traces every message twice with a
// fresh field map; this drops those calls before the fields are converted unless the trace
// level is enabled.
type routerLogger struct {
	watermill.LoggerAdapter
	log *slog.Logger
}

func (l routerLogger) Trace(msg string, fields watermill.LogFields) {
	if l.log.Enabled(context.Background(), watermill.LevelTrace) {
		l.LoggerAdapter.Trace(msg, fields)
	}
}

func (l routerLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return routerLogger{LoggerAdapter: l.LoggerAdapter.With(fields), log: l.log}
}

func deliverSubject(durable string) string {
	return "_AGENTBUS.egress." + events.EncodeToken(durable)
}

func buildSenders(o Options) map[string]im.Sender {
	m := make(map[string]im.Sender, len(o.Senders))
	for name, s := range o.Senders {
		if s != nil {
			m[name] = s
		}
	}
	return m
}

func senderNames(m map[string]im.Sender) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// record is what egress knows of a delivered part: from its receipt on IM_SENT, or from a KV
// delivered entry an older version wrote (same JSON fields).
type record struct {
	OutID     string `json:"outId"`
	MessageID string `json:"messageId"`
	Time      int64  `json:"time"`
}

// handle delivers one IM_OUT message. Returning nil acks it (after the middleware).
func (e *egress) handle(msg *message.Message) error {
	ctx := msg.Context()
	d := deliveryFrom(ctx)
	ev := new(events.Event[events.Outbound])
	if err := events.UnmarshalMsg(&nats.Msg{Data: msg.Payload, Header: d.header}, ev); err != nil {
		return permanent(ReasonInvalid, err)
	}
	out := ev.Data
	d.platform = out.Platform
	key := events.EncodeToken(out.OutID)
	subj := events.IMSentSubject(out.SessionKey())
	release, err := e.inflight.acquire(ctx, key)
	if err != nil {
		return err
	}
	defer release()

	d.attempts++
	// Every part this process has not sent itself is looked up, whatever its delivery count:
	// a first delivery proves nothing (a recreated consumer, a new durable or a promoted
	// standby stream delivers every stored part for the first time again), and Fresh only
	// says the part was never published twice, not that it was never sent.
	// The one exception: a part its publisher marks fresh, on its first delivery and attempt,
	// published after this process bound to the consumer (newSinceBind) cannot have been sent.
	var prev record
	found, legacy := false, false
	if r, ok := e.sentHere.get(out.OutID); ok {
		prev, found = r, true
	} else if out.Fresh && d.deliveries == 1 && d.attempts == 1 && e.newSinceBind(d.seq) {
		// nothing to look up
	} else if prev, found, legacy, err = e.lookupWithin(ctx, out, d.msg, key); err != nil {
		return err
	}
	switch {
	case found:
		// Sent before (a redelivery, or the same out id published again): never twice.
		e.skipped.Add(1)
		e.o.Metrics.Send(out.Platform, metrics.SendDuplicate)
		if e.log.Enabled(ctx, slog.LevelDebug) {
			d.logger().Debug("egress: already delivered, skipping", "out", out.OutID, "platformMsg", prev.MessageID)
		}
		if legacy {
			// Recorded by an older version in KV delivered, which wrote the receipt itself
			// after the KV entry and may have died in between: write it (once) here.
			return e.recordReceipt(ctx, ev, subj, prev)
		}
		return nil
	}

	if out.Platform == events.PlatformFork {
		// A console fork's reply: there is no platform to post it to, and it is no error.
		return nil
	}
	sender, ok := e.senders[out.Platform]
	if !ok {
		return permanent(ReasonNoSender, fmt.Errorf("%w %q", ErrNoSender, out.Platform))
	}
	if !e.sendingHook(ctx, ev) {
		return nil
	}
	if err := e.limiter.Wait(ctx, out.Platform); err != nil {
		return fmt.Errorf("throttle %s: %w", out.Platform, err)
	}
	// Once started, a send runs to its end even if egress is stopping, so that its outcome is
	// recorded: an abandoned request the platform did accept would be sent again.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.o.SendTimeout)
	pmid, err := send(im.WithAttempt(sctx, d.attempts), sender, ev)
	cancel()
	if err != nil {
		e.failures.Add(1)
		e.o.Metrics.Send(out.Platform, metrics.SendRetry)
		if ra := im.RetryAfterOf(err); ra > 0 {
			e.limiter.Pause(out.Platform, ra)
		}
		return fmt.Errorf("send %s via %s: %w", out.OutID, out.Platform, err)
	}
	if pmid == "" {
		pmid = out.OutID
	}
	rec := record{OutID: out.OutID, MessageID: pmid, Time: time.Now().UnixMilli()}
	if e.o.beforeRecord != nil && e.o.beforeRecord(out) {
		return errKilled
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), e.o.SendTimeout)
	defer rcancel()
	if err := e.recordReceipt(rctx, ev, subj, rec); err != nil {
		// The one window for a second send: delivered, but not recorded. The redelivery will
		// send again; the body's id (the out id) lets the receiver drop it.
		d.logger().Error("egress: delivered but not recorded; a redelivery may send it again", "out", out.OutID, "err", err)
		return err
	}
	e.sentHere.add(out.OutID, rec)
	e.delivered.Add(1)
	e.o.Metrics.Send(out.Platform, metrics.SendSent)
	e.sentHook(ev, pmid)
	if e.log.Enabled(ctx, slog.LevelDebug) {
		d.logger().Debug("egress: delivered", "out", out.OutID, "platform", out.Platform, "platformMsg", pmid)
	}
	if e.o.afterRecord != nil {
		e.o.afterRecord(out)
	}
	return nil
}

func send(ctx context.Context, s im.Sender, ev *events.Event[events.Outbound]) (string, error) {
	if es, ok := s.(im.EventSender); ok {
		return es.SendEvent(ctx, ev)
	}
	return s.Send(ctx, ev.Data)
}

// errKilled is what a handler returns where the beforeRecord test hook "killed" it.
var errKilled = errors.New("egress: killed by a test before the receipt write")

// busTimeout bounds one bus request of a delivery (the receipt lookup, one receipt publish).
// The delivery's own context allows HandlerTimeout (minutes): a request no server answers (a
// stream without a leader during a NATS node's failover drops it) would hold the part, and
// every part queued behind it in its lane, that long while in-progress acks keep it from
// another replica. A timed-out request is an ordinary transient failure, retried.
const busTimeout = 5 * time.Second

// newSinceBind says whether IM_OUT sequence seq was published after this process bound to its
// consumer. Such a part, on its first delivery by the durable, was never delivered by it, nor by
// an earlier consumer of the same name or a standby's (they were gone or other streams before
// the bind): nothing can have sent it, and the receipt lookup is skipped. Everything stored
// before the bind is looked up, whatever its delivery count (a recreated consumer, a new
// durable, a promoted standby copy deliver it "for the first time" again). A consumer deleted
// under a running egress (markConsumerLost) ends the exception for the process's lifetime.
func (e *egress) newSinceBind(seq uint64) bool {
	from := e.freshFrom.Load()
	return from > 0 && seq >= from
}

// markConsumerLost turns newSinceBind off: the consumer was deleted under this process, so a
// recreated one may deliver again what this process saw published after its bind.
func (e *egress) markConsumerLost(err error) {
	if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
		if e.freshFrom.Swap(0) != 0 {
			e.log.Warn("egress: consumer deleted under this process; every part is looked up from now on", "err", err)
		}
	}
}

// lookupWithin is lookup bounded by busTimeout, from the storage time of msg (the part's
// IM_OUT message; nil: from the first receipt) less the skew of two leaders' clocks.
func (e *egress) lookupWithin(ctx context.Context, out events.Outbound, msg jetstream.Msg, key string) (rec record, found, legacy bool, err error) {
	var since time.Time
	if msg != nil {
		if md, err := msg.Metadata(); err == nil {
			since = md.Timestamp.Add(-store.ReceiptSkew)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, busTimeout)
	defer cancel()
	return e.lookup(ctx, out, since, key)
}

// lookup finds the delivery record of a part: its receipt on IM_SENT among the chat's receipts
// stored since the part was (store.FindReceipt, which also reads the per-part subjects of the
// layout before issue 41). The answer decides whether to send, so a "not found" is the stream
// leader's, never a lagging replica's. A part an older version delivered may have no receipt
// but an entry in KV delivered (key; kept DeliveredTTL, 7 days): found, legacy.
func (e *egress) lookup(ctx context.Context, out events.Outbound, since time.Time, key string) (rec record, found, legacy bool, err error) {
	f, err := store.FindReceipt(ctx, e.js, e.sent, out.SessionKey(), out.OutID, since)
	switch {
	case err == nil:
		if !f.OK {
			// Still a delivery record: the stored message is what counts.
			return record{MessageID: key, Time: f.Msg.Time.UnixMilli()}, true, false, nil
		}
		return record{OutID: f.Receipt.OutID, MessageID: f.Receipt.MessageID, Time: f.Receipt.Time}, true, false, nil
	case !errors.Is(err, jetstream.ErrMsgNotFound):
		return record{}, false, false, fmt.Errorf("read %s: %w", events.StreamIMSent, err)
	}
	ent, err := e.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return record{}, false, false, nil
	}
	if err != nil {
		return record{}, false, false, fmt.Errorf("read %s/%s: %w", events.BucketDelivered, key, err)
	}
	if err := json.Unmarshal(ent.Value(), &rec); err != nil || rec.MessageID == "" {
		rec = record{MessageID: key, Time: ent.Created().UnixMilli()}
	}
	return rec, true, true, nil
}

// recordReceipt stores the part's delivery record, its im.sent receipt, through the group
// commit (receiptWriter): alone on the chat's subject subj, or in a batch with other parts of
// its receipt bucket.
func (e *egress) recordReceipt(ctx context.Context, ev *events.Event[events.Outbound], subj string, rec record) error {
	return e.receipts.record(ctx, ev, subj, rec)
}

// inflight serializes the handling of one out id inside this process, so that two copies
// (a redelivery next to the original, or the same part published twice) never race past the
// KV check together.
type inflight struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

func (f *inflight) acquire(ctx context.Context, key string) (func(), error) {
	for {
		f.mu.Lock()
		if f.m == nil {
			f.m = map[string]chan struct{}{}
		}
		ch, busy := f.m[key]
		if !busy {
			ch = make(chan struct{})
			f.m[key] = ch
			f.mu.Unlock()
			return func() {
				f.mu.Lock()
				delete(f.m, key)
				f.mu.Unlock()
				close(ch)
			}, nil
		}
		f.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// sentCacheSize bounds sentCache: enough for the redeliveries of the parts in flight many
// times over (MaxAckPending is 1024 by default).
const sentCacheSize = 1 << 14

// sentCache remembers the last sentCacheSize out ids this process sent and recorded, so their
// redelivery here is skipped without a bus lookup. It only ever saves a lookup: a miss is looked
// up on IM_SENT.
type sentCache struct {
	mu   sync.Mutex
	m    map[string]record
	ring []string
	next int
}

func (c *sentCache) add(outID string, r record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]record)
		c.ring = make([]string, sentCacheSize)
	}
	if _, ok := c.m[outID]; ok {
		return
	}
	if old := c.ring[c.next]; old != "" {
		delete(c.m, old)
	}
	c.ring[c.next] = outID
	c.next = (c.next + 1) % len(c.ring)
	c.m[outID] = r
}

func (c *sentCache) get(outID string) (record, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.m[outID]
	return r, ok
}

// redeliveryDelay is the NAK delay: base doubling per delivery, capped at max.
type redeliveryDelay struct{ base, max time.Duration }

func (r redeliveryDelay) WaitTime(n uint64) time.Duration {
	d := r.base
	for i := uint64(1); i < n && d < r.max; i++ {
		d *= 2
	}
	if d > r.max {
		d = r.max
	}
	return d
}
