package transcript

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
)

// ArchiverOptions configure RunArchiver.
type ArchiverOptions struct {
	// Node names this archiver's durable consumers ("transcripts-<node>-in" / "-sent"). Each
	// node with its own transcripts.db needs its own name, so each gets every message; two
	// processes with the same name share the work (and must then share nothing else). Default
	// "default". Letters, digits, '-' and '_' only.
	Node string
	// Batch is the most messages written in one transaction (default 256).
	Batch int
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Retention, when set, is applied by DB.Prune every PruneEvery (default 1 hour) while the
	// archiver runs, and once at start.
	Retention  Retention
	PruneEvery time.Duration
}

// Archiver is a running archiver. Stop ends it.
type Archiver struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	err    error
}

var nodeName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// RunArchiver writes every IM_IN message (inbound) and IM_SENT receipt (outbound) into db. Each
// JetStream message is acknowledged only after the transaction holding its row has committed,
// and rows are idempotent on (message_id, direction), so a redelivery (crash before the ack, a
// consumer reset) never stores a row twice: exactly once in the archive.
//
// Per the seed's write rule an inbound message with neither text nor media is not stored. A
// message that does not decode is dead-lettered (dlq.archiver.invalid, with the reason) and
// terminated, never silently dropped. A failed write NAKs the batch for redelivery.
func RunArchiver(ctx context.Context, js jetstream.JetStream, db *DB, opts ArchiverOptions) (*Archiver, error) {
	if opts.Node == "" {
		opts.Node = "default"
	}
	if !nodeName.MatchString(opts.Node) {
		return nil, fmt.Errorf("archiver node %q: want letters, digits, '-' or '_'", opts.Node)
	}
	if opts.Batch <= 0 {
		opts.Batch = 256
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	type source struct {
		stream, durable string
		dir             Direction
	}
	sources := []source{
		{events.StreamIMIn, "transcripts-" + opts.Node + "-in", Inbound},
		{events.StreamIMSent, "transcripts-" + opts.Node + "-sent", Outbound},
	}
	var iters []jetstream.MessagesContext
	stopAll := func() {
		for _, it := range iters {
			it.Stop()
		}
	}
	for _, s := range sources {
		cons, err := js.CreateOrUpdateConsumer(ctx, s.stream, jetstream.ConsumerConfig{
			Durable:       s.durable,
			Description:   "agentbus transcript archiver (" + string(s.dir) + ")",
			AckPolicy:     jetstream.AckExplicitPolicy,
			DeliverPolicy: jetstream.DeliverAllPolicy,
			AckWait:       30 * time.Second,
			MaxAckPending: 4 * opts.Batch,
		})
		if err != nil {
			stopAll()
			return nil, fmt.Errorf("archiver consumer %s on %s: %w", s.durable, s.stream, err)
		}
		it, err := cons.Messages(jetstream.PullMaxMessages(2 * opts.Batch))
		if err != nil {
			stopAll()
			return nil, fmt.Errorf("archiver consume %s: %w", s.stream, err)
		}
		iters = append(iters, it)
	}
	ctx, cancel := context.WithCancel(ctx)
	a := &Archiver{cancel: cancel}
	for i, s := range sources {
		w := &archWorker{js: js, db: db, it: iters[i], dir: s.dir, stream: s.stream, batch: opts.Batch,
			log: opts.Logger.With("component", "archiver", "stream", s.stream)}
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			if err := w.run(ctx); err != nil {
				a.mu.Lock()
				a.err = errors.Join(a.err, err)
				a.mu.Unlock()
			}
		}()
	}
	go func() {
		<-ctx.Done()
		stopAll()
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

// Stop stops consuming, waits for the batch in hand to be written and acked, and returns the
// error that ended a worker, if any.
func (a *Archiver) Stop() error {
	a.cancel()
	a.wg.Wait()
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

type archWorker struct {
	js     jetstream.JetStream
	db     *DB
	it     jetstream.MessagesContext
	dir    Direction
	stream string
	batch  int
	log    *slog.Logger
}

func (w *archWorker) run(ctx context.Context) error {
	for {
		m, err := w.it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			w.log.Warn("archiver fetch", "err", err)
			continue
		}
		msgs := []jetstream.Msg{m}
		// Take whatever else is already here, so one transaction (one fsync) covers a burst.
		for len(msgs) < w.batch {
			m, err := w.it.Next(jetstream.NextMaxWait(2 * time.Millisecond))
			if err != nil {
				break
			}
			msgs = append(msgs, m)
		}
		w.process(context.WithoutCancel(ctx), msgs)
	}
}

func (w *archWorker) process(ctx context.Context, msgs []jetstream.Msg) {
	rows := make([]Row, 0, len(msgs))
	var keep []jetstream.Msg
	for _, m := range msgs {
		row, ok, err := w.toRow(m)
		switch {
		case err != nil:
			w.deadLetter(ctx, m, err)
		case !ok:
			_ = m.Ack() // nothing to archive (no text, no media)
		default:
			rows = append(rows, row)
			keep = append(keep, m)
		}
	}
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

// toRow maps an IM_IN message or an IM_SENT receipt to a row; ok=false means "skip".
func (w *archWorker) toRow(m jetstream.Msg) (Row, bool, error) {
	raw := &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}
	ev, err := events.DecodeMsg(raw)
	if err != nil {
		return Row{}, false, err
	}
	evTime := ev.EventMeta().Time
	switch e := ev.(type) {
	case *events.Event[events.IMMessage]:
		if w.dir != Inbound {
			return Row{}, false, fmt.Errorf("unexpected %s on %s", e.Type, w.stream)
		}
		d := e.Data
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
	case *events.Event[events.Receipt]:
		if w.dir != Outbound {
			return Row{}, false, fmt.Errorf("unexpected %s on %s", e.Type, w.stream)
		}
		d := e.Data
		return Row{MessageID: d.MessageID, Platform: d.Platform, BotID: d.Bot, SceneID: d.Scene.ID, SceneType: d.Scene.Type,
			SenderID: d.Sender.ID, SenderName: d.Sender.Name, SenderRole: strings.Join(d.Sender.Roles, ","),
			Direction: Outbound, Body: d.Content.PlainText(), MediaJSON: mediaJSON(d.Content), Time: d.Time}, true, nil
	default:
		return Row{}, false, fmt.Errorf("unexpected event type %s on %s", ev.EventMeta().Type, w.stream)
	}
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

func (w *archWorker) deadLetter(ctx context.Context, m jetstream.Msg, cause error) {
	dl := events.DeadLetter{Role: "archiver", Reason: "invalid", Error: cause.Error(), Subject: m.Subject(), Stream: w.stream,
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
	_ = m.Term()
}
