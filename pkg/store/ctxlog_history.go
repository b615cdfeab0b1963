package store

import (
	"context"
	"fmt"
	"iter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
)

// CtxRecord is one record of a session id's context log as History lists it.
type CtxRecord struct {
	Seq  uint64
	Time time.Time
	Turn string // the committing turn, when the record names one
	// Messages counts the messages of a messages record; Summary is set for a summary record.
	Messages int
	Summary  *Summary
	Leaf     *Leaf
	// First is the first message's text, Last the last assistant text of a messages record
	// (for listings such as /tree).
	First, Last string
	// Msgs are the record's messages (shared with nothing; the caller may keep them).
	Msgs []llm.Message
}

// History yields every record of the session id's context log from the first, in order: what
// replay and audits show (each compaction where it happened). It reads the whole log, which
// LoadContext never does; it is for tools, not for turns.
func (l *ContextLog) History(ctx context.Context, id events.SessionID) iter.Seq2[CtxRecord, error] {
	return func(yield func(CtxRecord, error) bool) {
		if err := checkID(id); err != nil {
			yield(CtxRecord{}, err)
			return
		}
		var derr error
		stopped := false
		err := scan(ctx, l.js, streamAgentCtx, events.AgentCtxSubject(id), 1, time.Time{}, func(m *jetstream.RawStreamMsg) bool {
			r, err := decodeRec(m)
			if err != nil {
				derr = err
				return false
			}
			rec := CtxRecord{Seq: m.Sequence, Time: m.Time, Turn: m.Header.Get(events.HeaderTurn), Messages: len(r.msgs), Summary: r.summary, Leaf: r.leaf}
			rec.Msgs = r.msgs
			if len(r.msgs) > 0 {
				rec.First = r.msgs[0].TextContent()
				for i := len(r.msgs) - 1; i >= 0; i-- {
					if r.msgs[i].Role == llm.RoleAssistant {
						rec.Last = r.msgs[i].TextContent()
						break
					}
				}
			}
			if !yield(rec, nil) {
				stopped = true
				return false
			}
			return true
		})
		if stopped {
			return
		}
		if err == nil {
			err = derr
		}
		if err != nil {
			yield(CtxRecord{}, fmt.Errorf("context history %s: %w", id, err))
		}
	}
}
