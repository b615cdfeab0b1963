package turn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/store"
)

// takeOver decides what to do with a turn event that an earlier owner may have started
// (its sequence was in the inbox when this actor started, past the durable cursor): resume
// the turn from its log (also a turn whose commit landed without its turn_committed record),
// skip it when it failed, or report false: nothing of it was recorded, start it again.
func (rs resumer) takeOver(sess *store.Session, pt *pendingTurn) (bool, error) {
	a := rs.a
	if a.rd.isListed(pt.id) { // resumed from the session record (resumeAll)
		a.rd.passed(pt.lastSeq())
		return true, nil
	}
	tl, err := a.w.readTurn(a.ctx, a.sk, pt.id)
	if err != nil {
		return false, fmt.Errorf("take over turn %s: %w", pt.id, err)
	}
	mark := a.lastCommit
	if !tl.committed && mark.Turn == pt.id && mark.MsgID == pt.id+":commit" {
		// The context commit landed, its turn_committed record and reply may not have: finish
		// it from the commit, without asking the model again.
		tl.messages, tl.committed, tl.commitSeq, tl.closes = mark.Messages, true, mark.Seq, mark.Closes
	}
	switch {
	case tl.failed && !tl.committed:
		a.log.Info("skipping a turn that failed under the previous owner", "turn", pt.id)
		a.rd.passed(pt.lastSeq())
		return true, nil
	case tl.started == nil && !tl.committed:
		return false, nil
	}
	sid, err := sess.ID()
	if err != nil {
		return false, err
	}
	ot := store.OpenTurn{ID: pt.id, State: "running", InboxSeq: pt.seq, Merged: pt.merged}
	if tl.started != nil {
		for _, m := range tl.started.Merged {
			ot.Merged = append(ot.Merged, m.Seq)
		}
	}
	a.rd.passed(pt.lastSeq())
	a.res.resumeWith(sid, sess.SystemPrompt, ot, tl, false)
	return true, nil
}

// turnLog is what the logs hold about one turn: its records in AGENT_EVENTS and, for a turn
// closed by its commit, that commit in AGENT_CTX.
type turnLog struct {
	started  *events.TurnStarted
	messages []llm.Message
	// carriedStart and carried are what was found only on the turn's tool call requests and
	// results (store.ReadCarried), not in AGENT_EVENTS: its start (started) and messages.
	carriedStart bool
	carried      []events.MessageEnd
	committed    bool
	failed       bool
	commitSeq    uint64 // set when the commit is known only from AGENT_CTX (no turn_committed record)
	closes       bool   // the commit is the turn's closing record: no turn_committed is written for it
}

// readTurn loads what the logs hold about a turn (resume). A turn that started, did not fail
// and has no turn_committed record may have been closed by its context commit: that is looked
// for in AGENT_CTX after the context the turn started from, and when found the turn counts as
// committed with the commit's messages.
func (w *Worker) readTurn(ctx context.Context, sk events.SessionKey, turn string) (*turnLog, error) {
	return w.readTurnSince(ctx, sk, turn, time.Time{})
}

// readTurnSince is readTurn reading the session's events stored at or after since only (zero:
// all of them); see store.TurnLog.ReadTurnSince.
func (w *Worker) readTurnSince(ctx context.Context, sk events.SessionKey, turn string, since time.Time) (*turnLog, error) {
	recs, err := w.turnlog.ReadTurnSince(ctx, sk, turn, since)
	if err != nil {
		return nil, err
	}
	tl := &turnLog{}
	byIndex := map[int]llm.Message{}
	var session string
	for _, r := range recs {
		switch e := r.Event.(type) {
		case *events.Event[events.TurnStarted]:
			tl.started = &e.Data
			session = e.Session
		case *events.Event[events.MessageEnd]:
			byIndex[e.Data.Index] = e.Data.Message
		case *events.Event[events.TurnCommitted]:
			tl.committed = true
		case *events.Event[events.TurnFailed]:
			tl.failed = true
		}
	}
	if !tl.committed && !tl.failed && w.calls != nil && w.results != nil {
		// Steps that asked for tools may ride on their tool call requests instead
		// (events.ToolCall.Step): queued in TOOL_CALLS, or copied into their results.
		carried, err := w.turnlog.ReadCarried(ctx, w.calls, w.results, sk, turn, since)
		if err != nil {
			return nil, err
		}
		for _, r := range carried {
			switch e := r.Event.(type) {
			case *events.Event[events.TurnStarted]:
				if tl.started == nil {
					d := e.Data
					d.Steps = nil
					tl.started, tl.carriedStart, session = &d, true, e.Session
				}
			case *events.Event[events.MessageEnd]:
				if _, ok := byIndex[e.Data.Index]; !ok {
					byIndex[e.Data.Index] = e.Data.Message
					tl.carried = append(tl.carried, e.Data)
				}
			}
		}
		slices.SortFunc(tl.carried, func(a, b events.MessageEnd) int { return a.Index - b.Index })
	}
	// Indexes count the prompts, which turn_started holds; message_end records follow them.
	first := 0
	if tl.started != nil {
		tl.messages = append(tl.messages, tl.started.Input...)
		first = len(tl.started.Input)
	}
	for i := first; ; i++ {
		m, ok := byIndex[i]
		if !ok {
			break
		}
		tl.messages = append(tl.messages, m)
	}
	if tl.started == nil || tl.committed || tl.failed {
		return tl, nil
	}
	sid, err := events.ParseSessionID(session)
	if err != nil {
		return tl, nil // a record without its session id (not written by agentbus): no commit to look for
	}
	mark, found, err := w.ctxlog.FindTurnCommit(ctx, sid, turn, tl.started.ContextSeq)
	if err != nil {
		return nil, err
	}
	if found {
		tl.messages, tl.committed, tl.commitSeq, tl.closes = mark.Messages, true, mark.Seq, mark.Closes
	}
	return tl, nil
}

// storeFound writes what a resumed turn's log held only on its tool call requests and results
// (turnLog.carried) to AGENT_EVENTS before the turn goes on: the resumed turn then stands on
// AGENT_EVENTS as a turn of the layout before issue 40 does, and its commit needs to name
// only what it carries itself from here on.
func storeFound(ctx context.Context, t *turnRun, tl *turnLog) error {
	if !tl.carriedStart && len(tl.carried) == 0 {
		return nil
	}
	if tl.carriedStart {
		s := *tl.started
		t.mu.Lock()
		t.started = &s
		t.mu.Unlock()
	}
	t.recordMessages(tl.carried...)
	return store.RetryTransient(ctx, func() error { return t.flush(ctx) })
}

// resumeAll restarts what the previous owner left open: running turns continue from their
// events, queued and collecting turns start from their inbox events. A turn whose trigger was
// merged into another open turn (interrupt) was superseded and is closed.
func (rs resumer) resumeAll(sess *store.Session) {
	a := rs.a
	merged := map[uint64]bool{}
	for _, ot := range sess.OpenTurns {
		for _, s := range ot.Merged {
			merged[s] = true
		}
	}
	for _, ot := range sess.OpenTurns {
		if merged[ot.InboxSeq] {
			_, _ = a.w.sessions.Update(a.ctx, a.sk, func(s *store.Session) error { s.CloseTurn(ot.ID); return nil })
			continue
		}
		a.res.resume(sess, ot)
	}
}

// inboxEvent reads one SESSION_IN event of this session.
func (rs resumer) inboxEvent(seq uint64) (events.Any, error) {
	a := rs.a
	raw, err := natsutil.GetMsg(a.ctx, a.w.js, a.w.inbox, natsutil.MsgQuery{Seq: seq})
	if err != nil {
		return nil, fmt.Errorf("read inbox %d: %w", seq, err)
	}
	return events.Decode(raw.Data)
}

// inboxMessage rebuilds the user message an inbox event contributed to a turn, and the chat
// message to reply to when it has one.
func (rs resumer) inboxMessage(ev events.Any) (llm.Message, *events.IMMessage, bool) {
	a := rs.a
	switch e := ev.(type) {
	case *events.Event[events.UserMessage]:
		text, hooked := a.hk.receivedHook(e) // hooks.go
		if hooked.Blocked {
			return llm.Message{}, nil, false
		}
		return a.out.userInput(&e.Data.Message, text), &e.Data.Message, true
	case *events.Event[events.Steer]:
		return llm.UserText(e.Data.Text, e.Time), e.Data.Message, true
	case *events.Event[events.FollowUp]:
		return llm.UserText(e.Data.Text, e.Time), e.Data.Message, true
	}
	return llm.Message{}, nil, false
}

// resume restarts one open turn.
func (rs resumer) resume(sess *store.Session, ot store.OpenTurn) {
	a := rs.a
	sid, err := sess.ID()
	if err != nil {
		return
	}
	var tl *turnLog
	err = store.RetryTransient(a.ctx, func() error {
		var err error
		tl, err = a.w.readTurnSince(a.ctx, a.sk, ot.ID, openTurnSince(ot))
		return err
	})
	if err != nil {
		// The turn stays open and its trigger unacked: whoever takes the session next resumes
		// it. Going on without it would ack the trigger and lose the turn.
		if a.ctx.Err() == nil {
			a.handOver("read open turn "+ot.ID, err)
		}
		return
	}
	if tl.started == nil { // queued or collecting, or started without a record yet: rebuild its input
		pt := &pendingTurn{id: ot.ID, seq: ot.InboxSeq, merged: ot.Merged, msg: a.out.syntheticTarget(events.Sender{ID: "unknown"}, ""),
			restarted: true}
		seqs := append([]uint64{ot.InboxSeq}, ot.Merged...)
		slices.Sort(seqs)
		for _, seq := range seqs {
			var ev events.Any
			err := store.RetryTransient(a.ctx, func() error {
				var err error
				ev, err = a.res.inboxEvent(seq)
				return err
			})
			if errors.Is(err, jetstream.ErrMsgNotFound) || errors.Is(err, events.ErrInvalid) {
				a.log.Error("rebuild open turn: inbox event gone or unreadable", "turn", ot.ID, "seq", seq, "err", err)
				continue
			}
			if err != nil {
				if a.ctx.Err() == nil {
					a.handOver("rebuild open turn "+ot.ID, err)
				}
				return
			}
			if m, target, ok := a.res.inboxMessage(ev); ok {
				pt.input = append(pt.input, m)
				if target != nil {
					pt.msg = *target
				}
				pt.trace = ev.EventMeta().Trace
			}
		}
		if len(pt.input) == 0 {
			_, _ = a.w.sessions.Update(a.ctx, a.sk, func(s *store.Session) error { s.CloseTurn(ot.ID); return nil })
			return
		}
		a.mu.Lock()
		a.ready = append(a.ready, pt)
		a.mu.Unlock()
		return
	}
	a.res.resumeWith(sid, sess.SystemPrompt, ot, tl, true)
}

// resumeWith launches a turn again from what its log holds; inRecord says whether the session
// record lists it.
func (rs resumer) resumeWith(sid events.SessionID, persona string, ot store.OpenTurn, tl *turnLog, inRecord bool) {
	a := rs.a
	var model *llm.Model
	var err error
	if tl.started != nil {
		model, err = a.w.opts.Models.GetModel(tl.started.Model.Provider, tl.started.Model.ID)
	}
	if tl.started == nil || err != nil {
		if model, err = a.w.defaultModel(); err != nil {
			a.log.Error("resume: no model", "turn", ot.ID, "err", err)
			return
		}
	}
	target := a.out.syntheticTarget(events.Sender{ID: "unknown"}, "")
	if ev, err := a.res.inboxEvent(ot.InboxSeq); err == nil {
		if _, m, ok := a.res.inboxMessage(ev); ok && m != nil {
			target = *m
		}
	}
	pt := pendingTurn{id: ot.ID, seq: ot.InboxSeq, msg: target}
	if tl.started != nil {
		pt.input = tl.started.Input
		for _, m := range tl.started.Merged {
			pt.merged = append(pt.merged, m.Seq)
		}
	} else {
		pt.merged = ot.Merged
	}
	t := &turnRun{pendingTurn: pt, a: a, sid: sid, sidStr: sid.String(), model: model, persona: persona, done: make(chan struct{}), records: a.w.turnlog.Writer(), steerSeqs: ot.Steers, resumed: true,
		commitRecord: tl.commitSeq > 0 && !tl.closes, writeCursor: tl.committed && !inRecord}
	if inRecord {
		t.inRecord.Store(recordYes)
	}
	// Queue again the steers and follow-ups the turn had not consumed (its persisted messages
	// carry them with the inbox event's time).
	for _, seq := range ot.Steers {
		ev, err := a.res.inboxEvent(seq)
		if err != nil {
			continue
		}
		m, _, ok := a.res.inboxMessage(ev)
		if !ok || slices.ContainsFunc(tl.messages, func(p llm.Message) bool {
			return p.Role == m.Role && p.Timestamp == m.Timestamp && p.TextContent() == m.TextContent()
		}) {
			continue
		}
		if _, follow := ev.(*events.Event[events.FollowUp]); follow {
			t.followUp(seq, m)
		} else {
			t.steer(seq, m)
		}
	}
	a.log.Info("resuming turn", "turn", ot.ID, "persisted", len(tl.messages), "committed", tl.committed)
	a.launch(t, tl)
}

// openTurnSince is where to read an open turn's events from: its start less ten minutes for
// the difference between the starting worker's clock and the server's (zero when unknown:
// the session's whole log is read).
func openTurnSince(ot store.OpenTurn) time.Time {
	if ot.StartedAt <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ot.StartedAt).Add(-10 * time.Minute)
}

// resumer resumes the turns a session's previous owner left open (its session record and the
// turn log say which, and how far they got). The actor's goroutine uses it as the actor starts.
type resumer struct{ a *actor }
