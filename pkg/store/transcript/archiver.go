package transcript

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil"
)

// ArchiverOptions configure RunArchiver.
type ArchiverOptions struct {
	// Node names this archiver's durable consumers ("transcripts-<node>-in" / "-sent"). Each
	// node with its own transcripts.db needs its own name, so each gets every message; two
	// processes with the same name share the work (and must then share nothing else). Default
	// "default". 1-64 letters, digits, '-' and '_' (CheckNode).
	Node string
	// Batch is the most messages written in one transaction (default DefaultArchiverBatch).
	Batch int
	// MaxWait is how long the archiver keeps gathering messages after the first one of a batch
	// before it writes them (default DefaultArchiverMaxWait). Every transaction costs two
	// fsyncs whatever it holds, so a longer wait means fewer, larger transactions. It is added
	// to the time until a message is archived (and acked), never to a delivery; a crash loses
	// nothing, since nothing is acked before its transaction commits.
	MaxWait time.Duration
	// ThinWait is how long, from its first message, a thin batch keeps gathering (default
	// DefaultArchiverThinWait; a negative one, or one below MaxWait, is MaxWait): one that
	// after MaxWait spans at least ThinScenes chats with fewer than ThinRows rows per chat, so
	// its transaction would rewrite the pages of each of many chats for a row or two. Many quiet chats then share a
	// transaction the way a few busy ones already do, and the archive's cost per message stops
	// growing with the number of chats. A batch of fewer chats is written after MaxWait.
	ThinWait time.Duration
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Retention, when set, is applied by DB.Prune every PruneEvery (default 1 hour) while the
	// archiver runs, and once at start.
	Retention  Retention
	PruneEvery time.Duration
	// OnDeadLetter, when set, is called once for every dead letter the archiver published
	// (role "archiver", the reason of its dlq.archiver.<reason> subject), after the publish
	// succeeded: the composition root counts it in agentbus_dead_letters_total.
	OnDeadLetter func(role, reason string)
}

// DefaultArchiverMaxWait and DefaultArchiverBatch are ArchiverOptions' defaults. chat_history
// sees a message at most MaxWait later; nobody waits on it otherwise.
//
// Why a whole second: a transaction costs little per row but a lot per scene it touches (each
// scene's buckets rewrite their pages, and the commit writes and syncs them), and a chat sends
// about a message a second. With 200 ms, 200 busy chats still gave each scene a transaction
// touched about five rows, 2,000 chats gave it one, and the archive's CPU per message grew
// with the number of chats (agentbus bench --tool --sessions 2000 --messages 20: 2.16 s of
// CPU per 40,000 turns, against 0.9 s at 200 sessions). Gathering for a second folds several
// messages of a chat into one touch again (1.62 s). Batch is sized so that a second of a few
// thousand messages fits in one transaction.
//
// A second is not enough for thousands of chats: 2,000 chats at a message a second or two
// give each scene about one row per transaction, and the archive took 5.2-7.0 % of the CPU of
// agentbus bench --tool --sessions 2000 --messages 20, against about 2.5 % with 200 busy
// chats. A thin batch therefore keeps gathering up to DefaultArchiverThinWait (2.8-3.6 %),
// and Batch is sized for five seconds of such traffic.
const (
	DefaultArchiverMaxWait  = time.Second
	DefaultArchiverThinWait = 5 * time.Second
	DefaultArchiverBatch    = 16384
)

// ThinScenes and ThinRows say when a batch is thin (ArchiverOptions.ThinWait): it spans at
// least ThinScenes chats and holds fewer than ThinRows messages per chat.
const (
	ThinScenes = 256
	ThinRows   = 4
)

// ArchiverInactiveThreshold is how long an archiver's consumers outlive the last archiver
// that pulled from them.
const ArchiverInactiveThreshold = 14 * 24 * time.Hour

// Archiver is a running archiver. Stop ends it.
type Archiver struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var nodeName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// CheckNode reports whether name can name an archiver node (ArchiverOptions.Node).
func CheckNode(name string) error {
	if !nodeName.MatchString(name) {
		return fmt.Errorf("archiver node %q: want 1-64 letters, digits, '-' or '_'", name)
	}
	return nil
}

// archSource is one stream the archiver reads (its subjects filter, if any), with the
// direction of its rows.
type archSource struct {
	stream, durable, filter string
	dir                     Direction
	// inbox: the session inboxes (SESSION_IN), where only the events that carry an inbound
	// message make rows (events.InboundMessage); the rest are acked unarchived.
	inbox bool
}

// archMsg is a message in hand with the source it came from.
type archMsg struct {
	m   jetstream.Msg
	src *archSource
}

// RunArchiver writes every inbound message and every IM_SENT receipt (outbound) into db.
// Inbound messages are read where ingest stores them (issue 40): IM_IN for the messages that
// reach no session, and the session inboxes (SESSION_IN, agent.in.>) for the rest, inside
// their user_message, listen, command, steer and follow_up events (events.InboundMessage;
// a message with two inbox events makes one row). Each
// JetStream message is acknowledged only after the transaction holding its row has committed,
// and rows are idempotent on (message_id, direction), so a redelivery (crash before the ack, a
// consumer reset) never stores a row twice: exactly once in the archive.
//
// All three consumers feed one writer: messages that arrive within MaxWait of a batch's first one (up
// to Batch) go into one write transaction, whichever stream they came from.
//
// Per the seed's write rule an inbound message with neither text nor media is not stored. A
// message that does not decode, or decodes to a row the archive rejects (no message id, say),
// is dead-lettered (dlq.archiver.invalid, with the reason) and terminated, never silently
// dropped. A failed write NAKs the batch for redelivery.
//
// ctx bounds the start: creating the two consumers, each request retried as natsutil.Retry
// does (a role that starts during a leader election must not fail on one unanswered request).
// The archiver then runs until Stop.
func RunArchiver(ctx context.Context, js jetstream.JetStream, db *DB, opts ArchiverOptions) (*Archiver, error) {
	if opts.Node == "" {
		opts.Node = "default"
	}
	if err := CheckNode(opts.Node); err != nil {
		return nil, err
	}
	if opts.Batch <= 0 {
		opts.Batch = DefaultArchiverBatch
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = DefaultArchiverMaxWait
	}
	if opts.ThinWait == 0 {
		opts.ThinWait = DefaultArchiverThinWait
	}
	opts.ThinWait = max(opts.ThinWait, opts.MaxWait)
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	sources := []*archSource{
		{stream: events.StreamIMIn, durable: "transcripts-" + opts.Node + "-in", dir: Inbound},
		{stream: events.StreamSessionIn, durable: "transcripts-" + opts.Node + "-inbox", filter: events.PrefixAgentIn + ".>", dir: Inbound, inbox: true},
		{stream: events.StreamIMSent, durable: "transcripts-" + opts.Node + "-sent", dir: Outbound},
	}
	startCtx := ctx
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	// The consumers' callbacks hand messages to the writer; they give up (leaving the message
	// to redelivery) only once the archiver is stopping.
	in := make(chan archMsg, opts.Batch)
	var ccs []jetstream.ConsumeContext
	stopAll := func() {
		for _, cc := range ccs {
			cc.Stop()
		}
	}
	for _, s := range sources {
		cons, err := natsutil.Consumer(startCtx, js, s.stream, jetstream.ConsumerConfig{
			Durable:       s.durable,
			Description:   "agentbus transcript archiver (" + string(s.dir) + ")",
			FilterSubject: s.filter,
			AckPolicy:     jetstream.AckExplicitPolicy,
			DeliverPolicy: jetstream.DeliverAllPolicy,
			AckWait:       30 * time.Second,
			MaxAckPending: 2 * opts.Batch, // a full batch in hand and the next one gathering
			// An archive that is gone for good leaves its consumers behind; the server drops
			// them after this long without a pull. An archive that comes back later gets new
			// ones that read the streams from the start (inserts are idempotent).
			InactiveThreshold: ArchiverInactiveThreshold,
		})
		if err != nil {
			stopAll()
			cancel()
			return nil, fmt.Errorf("archiver consumer %s on %s: %w", s.durable, s.stream, err)
		}
		log := opts.Logger.With("component", "archiver", "stream", s.stream)
		cc, err := cons.Consume(func(m jetstream.Msg) {
			select {
			case in <- archMsg{m, s}:
			case <-ctx.Done():
			}
		}, jetstream.PullMaxMessages(min(opts.Batch, 4096)), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if ctx.Err() == nil {
				log.Warn("archiver fetch", "err", err)
			}
		}))
		if err != nil {
			stopAll()
			cancel()
			return nil, fmt.Errorf("archiver consume %s: %w", s.stream, err)
		}
		ccs = append(ccs, cc)
	}
	a := &Archiver{cancel: cancel}
	w := &archWriter{js: js, db: db, in: in, batch: opts.Batch, maxWait: opts.MaxWait, thinWait: opts.ThinWait,
		log: opts.Logger.With("component", "archiver"), scenes: map[events.SessionKey]struct{}{}, onDeadLetter: opts.OnDeadLetter}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		w.run(ctx)
		// No callback sends once its consumer is closed; what they handed over before is
		// still written and acked.
		stopAll()
		for _, cc := range ccs {
			select {
			case <-cc.Closed():
			case <-time.After(5 * time.Second):
				w.log.Warn("archiver: consumer did not close in time")
			}
		}
		w.drain(context.WithoutCancel(ctx))
	}()
	if opts.Retention != (Retention{}) {
		every := opts.PruneEvery
		if every <= 0 {
			every = time.Hour
		}
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				if n, err := db.Prune(ctx, opts.Retention, time.Now()); err != nil && ctx.Err() == nil {
					opts.Logger.Warn("transcript retention", "err", err)
				} else if n > 0 {
					opts.Logger.Info("transcript retention", "deleted", n)
				}
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	return a, nil
}

// Stop stops consuming and waits for the messages in hand to be written and acked. A failed
// write is logged and its messages NAKed (they are redelivered to the next run), so the error
// is always nil; it is kept for callers that treat Stop as a closer.
func (a *Archiver) Stop() error {
	a.cancel()
	a.wg.Wait()
	return nil
}

// archWriter turns the messages of both streams into rows, one transaction per batch.
type archWriter struct {
	js       jetstream.JetStream
	db       *DB
	in       chan archMsg
	batch    int
	maxWait  time.Duration
	thinWait time.Duration
	log      *slog.Logger
	// onDeadLetter is ArchiverOptions.OnDeadLetter.
	onDeadLetter func(role, reason string)

	// Reused from batch to batch: the writer is one goroutine.
	msgs   []archMsg
	rows   []Row
	keep   []jetstream.Msg
	scenes map[events.SessionKey]struct{} // the chats of the batch being gathered
}

// run gathers batches until ctx ends: it waits for a first message, then takes what arrives
// within maxWait of it (thinWait when the batch is thin), up to batch messages, and writes
// them in one transaction.
func (w *archWriter) run(ctx context.Context) {
	t := time.NewTimer(w.maxWait)
	t.Stop()
	for {
		clear(w.scenes)
		select {
		case m := <-w.in:
			w.msgs = append(w.msgs[:0], m)
			w.note(m)
		case <-ctx.Done():
			return
		}
		t.Reset(w.maxWait)
		stretched := false
	gather:
		for len(w.msgs) < w.batch {
			select {
			case m := <-w.in:
				w.msgs = append(w.msgs, m)
				w.note(m)
				if stretched && !w.thin() {
					// The rows it waited for came: a batch no longer thin is written now, not
					// at the end of the stretch (a slow delivery made the batch look thin at
					// MaxWait, and it then held every row for ThinWait).
					break gather
				}
			case <-t.C:
				if !stretched && w.thinWait > w.maxWait && w.thin() {
					stretched = true
					t.Reset(w.thinWait - w.maxWait)
					continue
				}
				break gather
			case <-ctx.Done():
				break gather
			}
		}
		t.Stop()
		// A batch in hand is written even when stopping: its messages were delivered.
		w.process(context.WithoutCancel(ctx), w.msgs)
	}
}

// thin reports whether the batch in hand is thin (ArchiverOptions.ThinWait).
func (w *archWriter) thin() bool {
	return len(w.scenes) >= ThinScenes && len(w.msgs) < ThinRows*len(w.scenes)
}

// note counts the chat of m for the thin-batch rule. A subject that does not parse counts as
// a chat of its own (its message is dead-lettered when written).
func (w *archWriter) note(m archMsg) {
	subj := m.m.Subject()
	parse := events.ParseIMInSubject
	switch {
	case m.src.dir == Outbound:
		parse = events.ParseIMSentSubject
	case m.src.inbox:
		parse = events.ParseAgentInSubject
	}
	k, err := parse(subj)
	if err != nil {
		k = events.SessionKey{Scene: subj}
	}
	w.scenes[k] = struct{}{}
}

// drain writes whatever was handed over but not yet written (after the consumers stopped).
func (w *archWriter) drain(ctx context.Context) {
	for {
		w.msgs = w.msgs[:0]
	take:
		for len(w.msgs) < w.batch {
			select {
			case m := <-w.in:
				w.msgs = append(w.msgs, m)
			default:
				break take
			}
		}
		if len(w.msgs) == 0 {
			return
		}
		w.process(ctx, w.msgs)
	}
}

func (w *archWriter) process(ctx context.Context, msgs []archMsg) {
	rows, keep := w.rows[:0], w.keep[:0]
	for _, am := range msgs {
		// A message is one row, or several (a batch of receipts, issue 40), or none; it is
		// acked once all of its rows are stored.
		n := len(rows)
		var err error
		rows, err = appendRows(rows, am.m, am.src)
		for i := n; err == nil && i < len(rows); i++ {
			// Checked here, so that one bad message is dead-lettered alone instead of failing
			// (and redelivering) the whole batch in Insert.
			err = validateRow(&rows[i])
		}
		if err != nil {
			clear(rows[n:])
			rows = rows[:n]
		}
		switch {
		case err != nil && am.src.inbox:
			// An inbox event is the session actor's to judge (and dead-letter): the archive
			// takes what ingest stores there and leaves anything else alone.
			w.log.Debug("archiver: inbox event not archived", "subject", am.m.Subject(), "err", err)
			_ = am.m.Ack()
		case err != nil:
			w.deadLetter(ctx, am, err)
		case len(rows) == n:
			_ = am.m.Ack() // nothing to archive (no text, no media)
		default:
			keep = append(keep, am.m)
		}
	}
	// Keep the backing arrays, drop the references (bodies, messages) until the next batch.
	defer func() {
		clear(rows)
		clear(keep)
		clear(msgs)
		w.rows, w.keep = rows[:0], keep[:0]
	}()
	if len(rows) == 0 {
		return
	}
	n, err := w.db.Insert(ctx, rows...)
	if err != nil {
		w.log.Error("archiver write failed; messages will be redelivered", "rows", len(rows), "err", err)
		for _, m := range keep {
			_ = m.NakWithDelay(time.Second)
		}
		return
	}
	for _, m := range keep {
		if err := m.Ack(); err != nil {
			w.log.Warn("archiver ack (the row is stored; a redelivery is skipped)", "err", err)
		}
	}
	w.log.Debug("archived", "rows", len(rows), "new", n)
}

// appendRows appends the rows of an IM_IN message, an inbox event carrying an inbound message,
// an IM_SENT receipt, or an IM_SENT batch of receipts (one row per receipt) to rows; none for a
// message with nothing to archive (also an inbox event that carries no message).
func appendRows(rows []Row, m jetstream.Msg, src *archSource) ([]Row, error) {
	raw := &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}
	ev, err := events.DecodeMsg(raw)
	if err != nil {
		return rows, err
	}
	if b, ok := ev.(*events.Event[events.ReceiptBatch]); ok {
		if src.dir != Outbound {
			return rows, fmt.Errorf("unexpected %s on %s", b.Type, src.stream)
		}
		for i := range b.Data.Receipts {
			rows = append(rows, receiptRow(&b.Data.Receipts[i]))
		}
		return rows, nil
	}
	row, ok, err := eventRow(ev, src)
	if err != nil || !ok {
		return rows, err
	}
	return append(rows, row), nil
}

// receiptRow is the outbound row of a receipt.
func receiptRow(d *events.Receipt) Row {
	return Row{MessageID: d.MessageID, Platform: d.Platform, BotID: d.Bot, SceneID: d.Scene.ID, SceneType: d.Scene.Type,
		SenderID: d.Sender.ID, SenderName: d.Sender.Name, SenderRole: strings.Join(d.Sender.Roles, ","),
		Direction: Outbound, Body: d.Content.PlainText(), MediaJSON: mediaJSON(d.Content), Time: d.Time}
}

// eventRow maps one decoded event to a row; ok=false means "skip".
func eventRow(ev events.Any, src *archSource) (Row, bool, error) {
	evTime := ev.EventMeta().Time
	if src.inbox {
		d, ok := events.InboundMessage(ev)
		if !ok {
			return Row{}, false, nil // a subagent result, a schedule firing, ...: no chat message
		}
		return inboundRow(d, evTime)
	}
	switch e := ev.(type) {
	case *events.Event[events.IMMessage]:
		if src.dir != Inbound {
			return Row{}, false, fmt.Errorf("unexpected %s on %s", e.Type, src.stream)
		}
		return inboundRow(&e.Data, evTime)
	case *events.Event[events.Receipt]:
		if src.dir != Outbound {
			return Row{}, false, fmt.Errorf("unexpected %s on %s", e.Type, src.stream)
		}
		return receiptRow(&e.Data), true, nil
	default:
		return Row{}, false, fmt.Errorf("unexpected event type %s on %s", ev.EventMeta().Type, src.stream)
	}
}

// inboundRow maps an inbound message to its row; ok=false (no text, no media) means "skip", per
// the seed's write rule.
func inboundRow(d *events.IMMessage, evTime int64) (Row, bool, error) {
	body := d.Content.PlainText()
	if strings.TrimSpace(body) == "" && !d.Content.HasMedia() {
		return Row{}, false, nil
	}
	t := d.Time
	if t == 0 {
		t = evTime
	}
	return Row{MessageID: d.MessageID, Platform: d.Platform, BotID: d.Bot, SceneID: d.Scene.ID, SceneType: d.Scene.Type,
		SenderID: d.Sender.ID, SenderName: d.Sender.Name, SenderRole: strings.Join(d.Sender.Roles, ","),
		Direction: Inbound, Body: body, MediaJSON: mediaJSON(d.Content), Time: t}, true, nil
}

// mediaJSON is the seed's media_json: the whole segment array when the message has anything
// but plain text (media, mentions, replies), for audit and replay; "" for plain text.
func mediaJSON(c events.Segments) string {
	for _, s := range c {
		if s.Type != events.SegText {
			b, err := json.Marshal(c)
			if err != nil {
				return ""
			}
			return string(b)
		}
	}
	return ""
}

func (w *archWriter) deadLetter(ctx context.Context, am archMsg, cause error) {
	m := am.m
	dl := events.DeadLetter{Role: events.RoleArchiver, Reason: "invalid", Error: cause.Error(), Subject: m.Subject(), Stream: am.src.stream,
		Headers: m.Headers()}
	if md, err := m.Metadata(); err == nil {
		dl.Seq, dl.Deliveries = md.Sequence.Stream, md.NumDelivered
	}
	dl.SetBody(m.Data())
	w.log.Warn("archiver: dead-lettering an undecodable message", "subject", m.Subject(), "err", cause)
	msg, err := events.NewMsg(events.DeadLetterSubject(dl.Role, dl.Reason), events.New(dl))
	if err == nil {
		_, err = w.js.PublishMsg(ctx, msg)
	}
	if err != nil {
		// Leave it for redelivery rather than lose it.
		w.log.Error("archiver: dead letter failed", "err", err)
		_ = m.NakWithDelay(5 * time.Second)
		return
	}
	if w.onDeadLetter != nil {
		w.onDeadLetter(dl.Role, dl.Reason)
	}
	_ = m.Term()
}
