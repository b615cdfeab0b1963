package store

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil"
)

// The writing half of the turn log. A turn worker records a turn as it runs: its start
// (turn_started, carrying the first steps), one message_end per finished message, and at its
// end turn_failed or the turn_committed that the context commit points at. Every record's id,
// and so its Nats-Msg-Id, is <turn>-<name>: a record published again after a lost ack, or by
// the worker that resumes the turn, is stored once.

// TurnMeta is whose turn a record belongs to.
type TurnMeta struct {
	Key     events.SessionKey
	Session string // the session id (events.SessionID.String)
	Turn    string
	Trace   string
}

// TurnEventMsg is p as a turn record on agent.evt.<sk>.<kind> (the turn id in its
// Agentbus-Turn header), its id (and so its Nats-Msg-Id) <turn>-<name>. The caller may add
// headers (a span context) before it publishes.
func TurnEventMsg[P events.Payload](tm TurnMeta, kind string, p P, name string) (*nats.Msg, error) {
	ev := events.New(p, events.WithSession(tm.Session), events.WithTurn(tm.Turn), events.WithTrace(tm.Trace),
		events.WithID(tm.Turn+"-"+name))
	return events.NewMsg(events.AgentEvtSubject(tm.Key, kind), ev)
}

// Record publishes one turn record built by TurnEventMsg and waits for its ack.
func (t *TurnLog) Record(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error) {
	ack, err := t.js.PublishMsg(ctx, m)
	if err != nil {
		return nil, fmt.Errorf("record %s: %w", m.Subject, err)
	}
	return ack, nil
}

// TurnWriter publishes one turn's records without waiting for their acks; Flush waits for
// all of them. The loop's next step does not need an ack, but a tool call and the commit do: a
// tool must not run for an assistant message that might not be in the log (a resume would ask
// the model again and get other call ids). Safe for concurrent use.
type TurnWriter struct {
	js jetstream.JetStream

	mu      sync.Mutex
	unacked []pendingRecord
}

// pendingRecord is an asynchronously published turn record and its ack.
type pendingRecord struct {
	msg *nats.Msg
	f   jetstream.PubAckFuture
}

// Writer returns a writer for one turn's records.
func (t *TurnLog) Writer() *TurnWriter { return &TurnWriter{js: t.js} }

// Publish publishes m asynchronously; Flush waits for its ack.
func (w *TurnWriter) Publish(m *nats.Msg) error {
	f, err := w.js.PublishMsgAsync(m)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.unacked = append(w.unacked, pendingRecord{msg: m, f: f})
	w.mu.Unlock()
	return nil
}

// RecordAckWait is how long Flush waits for the acks of the asynchronous publishes before it
// publishes the unacknowledged ones again (same Nats-Msg-Id, dropped by the stream if stored):
// an ack is lost when the stream's leader dies or is being elected, and a healthy leader
// answers well within it.
const RecordAckWait = 2 * time.Second

// recordTimeout bounds one synchronous publish of a record Flush publishes again.
const recordTimeout = 5 * time.Second

// Flush waits until every record published so far is stored; a record whose asynchronous
// publish failed or got no ack within RecordAckWait is published again (same Nats-Msg-Id) and
// waited for. onRetry (may be nil) hears each such retry. On error the records not known to
// be stored stay for the next Flush.
func (w *TurnWriter) Flush(ctx context.Context, onRetry func(error)) error {
	w.mu.Lock()
	pending := w.unacked
	w.unacked = nil
	w.mu.Unlock()
	until := time.Now().Add(RecordAckWait)
	for i, p := range pending {
		err := natsutil.AwaitAck(ctx, p.f, until)
		if err == nil {
			continue
		}
		if ctx.Err() == nil {
			if onRetry != nil {
				onRetry(err)
			}
			pctx, cancel := context.WithTimeout(ctx, recordTimeout)
			_, err = w.js.PublishMsg(pctx, p.msg)
			cancel()
		}
		if err != nil {
			w.mu.Lock()
			w.unacked = append(slices.Clone(pending[i:]), w.unacked...)
			w.mu.Unlock()
			return err
		}
	}
	return nil
}
