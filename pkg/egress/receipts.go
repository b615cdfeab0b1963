package egress

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentbus/agentbus/internal/jsconflict"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/tracing"
	"github.com/nats-io/nats.go"
)

// maxBatchBytes bounds one receipt batch's body. A batch that would be larger (long replies
// with inline media) is written as plain receipts, one per part, well below any server's
// max_payload.
const maxBatchBytes = 256 << 10

// receiptWriter group-commits receipts (issue 40). A handler that sent a part hands its
// receipt over and waits for the write that stores it. While no write is in flight, the handler
// writes its receipt itself, at once; receipts handed over while a write is in flight are
// written together as soon as it ends, by the first of their handlers (the leader, so no
// goroutine hop is added): one message per receipt bucket they fall in (events.ReceiptBucket),
// an events.ReceiptBatch on events.IMSentBatchSubject. A bucket with one receipt in the write,
// and a part without a bucket, gets a plain receipt on its chat's subject, as before: a chat
// alone still pays one append per part, and its receipts stay where the console and lookups
// read first. Only after its write is stored does a handler return (and its part get acked), so
// the receipt of every acked part is stored, as before; a crash between the platform's 2xx and
// the write leaves the part unacked and without a receipt (the documented window, now up to two
// receipt writes long instead of one: the redelivery sends it again).
type receiptWriter struct {
	e *egress

	mu    sync.Mutex
	queue []*pendingReceipt
	busy  bool // a leader is writing

	// Counted for tests: writes stored (a message, or the plain receipts of a batch too large
	// for one), receipts in them.
	writes, receipts uint64
}

// pendingReceipt is one part's receipt waiting for its write.
type pendingReceipt struct {
	ctx  context.Context // the delivery's (logger, trace)
	ev   *events.Event[events.Outbound]
	subj string // its chat's subject
	rec  record
	done chan error // cap 1: errLead once, then the write's outcome
}

// errLead, sent on a waiting receipt's done channel, makes its handler the next leader.
var errLead = errors.New("egress: lead the next receipt write")

func newReceiptWriter(e *egress) *receiptWriter { return &receiptWriter{e: e} }

// record stores the receipt of ev (platform message id and time from rec) and returns once it
// is stored, or with the write's error.
func (w *receiptWriter) record(ctx context.Context, ev *events.Event[events.Outbound], subj string, rec record) error {
	p := &pendingReceipt{ctx: ctx, ev: ev, subj: subj, rec: rec, done: make(chan error, 1)}
	w.mu.Lock()
	w.queue = append(w.queue, p)
	if w.busy {
		w.mu.Unlock()
		if err := <-p.done; err != errLead {
			return err // written by a leader
		}
		w.mu.Lock() // this handler leads now (busy stayed true)
	}
	w.busy = true
	batch := w.queue
	w.queue = nil
	w.mu.Unlock()
	if h := w.e.o.beforeWrite; h != nil {
		h(len(batch))
	}
	w.writeSafe(batch) // answers every receipt of batch, p's too
	// Hand over to the first receipt that came in meanwhile, or stand down.
	w.mu.Lock()
	if len(w.queue) > 0 {
		next := w.queue[0]
		w.mu.Unlock()
		next.done <- errLead
	} else {
		w.busy = false
		w.mu.Unlock()
	}
	return <-p.done
}

// writeSafe is write, turning a panic into an error for every receipt of ps not yet answered,
// so that no handler waits forever and the next leader is still named.
func (w *receiptWriter) writeSafe(ps []*pendingReceipt) {
	defer func() {
		if r := recover(); r != nil {
			err := fmt.Errorf("egress: receipt write panicked: %v", r)
			for _, p := range ps {
				select {
				case p.done <- err:
				default: // answered already
				}
			}
		}
	}()
	w.write(ps)
}

// write stores the receipts of ps: one message per bucket with two or more of them, a plain
// receipt for each other one (and for each receipt of a batch that cannot be one message), all
// written concurrently; each waiting handler gets its own message's outcome.
func (w *receiptWriter) write(ps []*pendingReceipt) {
	var groups [][]*pendingReceipt
	byBucket := map[uint64]int{}
	for _, p := range ps {
		b, ok := events.ReceiptBucket(p.ev.Data.OutID)
		if !ok {
			groups = append(groups, []*pendingReceipt{p})
			continue
		}
		if i, ok := byBucket[b]; ok {
			groups[i] = append(groups[i], p)
			continue
		}
		byBucket[b] = len(groups)
		groups = append(groups, []*pendingReceipt{p})
	}
	type write struct {
		g   []*pendingReceipt
		m   *nats.Msg
		err error
	}
	writes := make([]write, 0, len(groups))
	for _, g := range groups {
		if len(g) > 1 {
			if m, err := batchMsg(g); err == nil {
				writes = append(writes, write{g: g, m: m})
				continue
			}
			// Invalid as a batch (a receipt that is fails alone below), or too large: one by one.
		}
		for _, p := range g {
			m, err := plainMsg(p)
			writes = append(writes, write{g: []*pendingReceipt{p}, m: m, err: err})
		}
	}
	publish := func(wr write) {
		err := wr.err
		if err == nil {
			err = w.e.publishReceipt(wr.g[0].ctx, wr.m, wr.m.Header.Get(events.HeaderMsgID))
		}
		w.finish(wr.g, err)
	}
	if len(writes) == 1 {
		publish(writes[0])
		return
	}
	var wg sync.WaitGroup
	for _, wr := range writes {
		wg.Go(func() { publish(wr) })
	}
	wg.Wait()
}

func (w *receiptWriter) finish(g []*pendingReceipt, err error) {
	if err == nil {
		w.mu.Lock()
		w.writes++
		w.receipts += uint64(len(g))
		w.mu.Unlock()
	}
	for _, p := range g {
		p.done <- err
	}
}

// pending is how many receipts wait for the next write.
func (w *receiptWriter) pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue)
}

// stats returns how many writes the writer stored and how many receipts they held.
func (w *receiptWriter) stats() (writes, receipts uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes, w.receipts
}

// receiptOf is the receipt of a sent part.
func receiptOf(out events.Outbound, rec record) events.Receipt {
	return events.Receipt{
		OutID:     out.OutID,
		Turn:      out.Turn,
		Platform:  out.Platform,
		Bot:       out.Bot,
		Scene:     out.Scene,
		MessageID: rec.MessageID,
		Time:      rec.Time,
		Content:   out.Content,
		Sender:    events.Sender{ID: out.Bot},
	}
}

// plainMsg is the plain receipt of p on its chat's subject (Nats-Msg-Id "sent/<out id>",
// HeaderOutID the out id, the part's correlation and trace context).
func plainMsg(p *pendingReceipt) (*nats.Msg, error) {
	r := events.New(receiptOf(p.ev.Data, p.rec), events.WithCorrelation(&p.ev.Meta))
	m, err := events.NewMsg(p.subj, r)
	if err != nil {
		return nil, permanent(ReasonInvalid, fmt.Errorf("receipt: %w", err))
	}
	tracing.InjectNATS(p.ctx, m.Header)
	m.Header.Set(events.HeaderOutID, p.ev.Data.OutID)
	return m, nil
}

// batchMsg is one events.ReceiptBatch of g's receipts (all of one receipt bucket) on the
// bucket's subject, HeaderOutID once per receipt in order; an error when the batch is invalid
// or its body would exceed maxBatchBytes.
func batchMsg(g []*pendingReceipt) (*nats.Msg, error) {
	b := events.ReceiptBatch{Receipts: make([]events.Receipt, len(g))}
	for i, p := range g {
		b.Receipts[i] = receiptOf(p.ev.Data, p.rec)
	}
	bucket, _ := events.ReceiptBucket(g[0].ev.Data.OutID)
	m, err := events.NewMsg(events.IMSentBatchSubject(bucket), events.New(b))
	if err != nil {
		return nil, err
	}
	if len(m.Data) > maxBatchBytes {
		return nil, fmt.Errorf("receipt batch of %d bytes", len(m.Data))
	}
	for _, p := range g {
		m.Header.Add(events.HeaderOutID, p.ev.Data.OutID)
	}
	return m, nil
}

// publishReceipt publishes one receipt message, retrying briefly: losing it is the one way a
// part could be sent twice. A retry of a write that did land is dropped by the duplicate window
// (the message's Nats-Msg-Id), and so is a second plain receipt of the same part (two replicas
// that both sent it).
func (e *egress) publishReceipt(ctx context.Context, m *nats.Msg, what string) error {
	wait := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), busTimeout)
		_, err := e.js.PublishMsg(actx, m)
		cancel()
		switch {
		case err == nil:
			return nil
		case jsconflict.Is(err):
			// Another delivery of the same out id got there first (e.g. a replica that took
			// over after AckWait while this one was still sending).
			loggerFrom(ctx).Warn("egress: out id recorded concurrently; it may have been sent twice", "out", what)
			return nil
		case attempt >= 5:
			return fmt.Errorf("record receipt %s: %w", what, err)
		}
		time.Sleep(wait)
		wait *= 2
	}
}
