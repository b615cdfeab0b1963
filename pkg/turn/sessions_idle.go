package turn

import (
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/store"
)

// idleLimit is how long a session may stay quiet before its next conversation event starts a
// new epoch: the smaller positive of ai.sessions.sessionIdleArchiveMs and ai.sessions.expireMs
// (0 = never): Options.History.IdleArchive and Expire.
func (w *Worker) idleLimit() time.Duration {
	h := w.opts.History
	var d time.Duration
	for _, v := range []time.Duration{h.IdleArchive, h.Expire} {
		if v > 0 && (d == 0 || v < d) {
			d = v
		}
	}
	return d
}

// archiveIfIdle archives the session's epoch before a conversation event that arrives after the
// session was idle longer than idleLimit, so the event starts a new epoch: a fresh context,
// while AGENT_CTX, AGENT_EVENTS and the transcripts keep the old one. Idleness is measured from
// the session's last activity to the event's own time, so a backlog read after an outage is
// judged by when it was written. A session with running or open turns is never idle.
//
// Archiving is lazy: a session nobody writes to stays listed as active until its next event.
func (co contextOps) archiveIfIdle(ev events.Any, seq uint64) error {
	a := co.a
	limit := a.w.idleLimit()
	if limit <= 0 {
		return nil
	}
	switch ev.(type) {
	case *events.Event[events.UserMessage], *events.Event[events.Listen], *events.Event[events.Scheduled],
		*events.Event[events.Steer], *events.Event[events.FollowUp]:
	default:
		return nil // commands, aborts and background results belong to the conversation they name
	}
	a.mu.Lock()
	busy := len(a.turns) > 0 || len(a.queued) > 0 || a.collect != nil
	a.mu.Unlock()
	if busy {
		return nil
	}
	sess, err := a.w.sessions.Current(a.ctx, a.sk)
	if err != nil {
		return err
	}
	at := ev.EventMeta().Time
	if sess.LastActivity <= 0 || len(sess.OpenTurns) > 0 || at-sess.LastActivity <= limit.Milliseconds() {
		return nil
	}
	next, err := a.w.sessions.Archive(a.ctx, a.sk, store.EndInboxAt(seq-1))
	if err != nil {
		return err
	}
	a.w.settler.settle(a.sk, seq-1) // epochs.go
	a.log.Info("idle session archived; a new epoch starts", "idle", time.Duration(at-sess.LastActivity)*time.Millisecond,
		"archived", sess.SessionID, "session_id", next.SessionID)
	return nil
}
