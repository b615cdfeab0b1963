package turn

import (
	"context"
	"fmt"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/store"
)

// appendContext commits messages to the session's context (listen, cancelled inputs).
func (co contextOps) appendContext(seq uint64, msgs []llm.Message) error {
	a := co.a
	sess, err := a.w.sessions.Current(a.ctx, a.sk)
	if err != nil {
		return err
	}
	sid, err := sess.ID()
	if err != nil {
		return err
	}
	_, err = a.cx.commitMessages(sid, msgs, fmt.Sprintf("in-%d", seq), "")
	return err
}

// loadContext loads the context a turn starts from. The actor's own last commit is where the
// log ends (commits are fenced), so the store can serve it from its cache.
func (co contextOps) loadContext(ctx context.Context, sid events.SessionID) (store.Loaded, error) {
	a := co.a
	a.commit.Lock()
	last, ok := a.ctxLast[sid.String()]
	a.commit.Unlock()
	switch {
	case ok && last == 0:
		// The log was empty when this actor read it, and only this actor writes it (fenced):
		// it still is. LoadContext answers an empty log with the zero Loaded too.
		return store.Loaded{}, nil
	case ok:
		return a.w.ctxlog.LoadContextAt(ctx, sid, last)
	}
	return a.w.ctxlog.LoadContext(ctx, sid)
}

// commitMessages appends msgs to the session id's context log, fenced on the last sequence
// this actor knows. Commits of one actor are serialized; another writer (a worker that took
// the session over) makes the append fail with store.ErrStaleWriter.
func (co contextOps) commitMessages(sid events.SessionID, msgs []llm.Message, msgID, turn string, opts ...store.AppendOption) (uint64, error) {
	a := co.a
	if err := a.own.AwaitFence(a.ctx, a); err != nil { // while the worker lease is recovered (pkg/turn/ownership)
		return 0, fmt.Errorf("commit context %s: %w", sid, err)
	}
	a.commit.Lock()
	defer a.commit.Unlock()
	key := sid.String()
	last, ok := a.ctxLast[key]
	if !ok {
		l, err := a.w.ctxlog.LoadContext(a.ctx, sid)
		if err != nil {
			return 0, err
		}
		last = l.LastSeq
	}
	seq, err := a.w.ctxlog.AppendMessages(a.ctx, sid, last, msgs, append([]store.AppendOption{store.WithMsgID(msgID), store.WithTurn(turn)}, opts...)...)
	if err != nil {
		return 0, fmt.Errorf("commit context %s: %w", key, err)
	}
	if !ok {
		a.w.ctxlog.Keep(sid) // this actor's turns read it back: keep it cached while it lives
		a.kept = append(a.kept, sid)
	}
	a.ctxLast[key] = seq
	return seq, nil
}

// contextOps writes a session's context (AGENT_CTX) for its actor: appends, fenced commits,
// compactions and their summaries, the memory flush before one, the idle archive. Commits are
// serialized by actor.commit, compactions by actor.compactMu (LOCKS.md).
type contextOps struct{ a *actor }
