package turn

import (
	"context"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
)

// Ended epochs are archived and trimmed by the session's owner (store.EpochArchive.Settle):
// right after /reset or an idle session's new epoch, and when an actor starts on a session
// whose record still lists ended epochs (the process that ended them died first). The work
// runs beside the actor, never on its goroutine: an epoch's archive is read and written in
// the background while the conversation goes on.

// settleParallel bounds the settles that run at once in one worker; more wait their turn.
const settleParallel = 2

// settleWaitCursor bounds how long a settle waits for the actor to record that the inbox is
// done up to the epoch's end (its write follows the /reset's answer): the inbox is trimmed no
// further than the record's cursor, so a settle that starts earlier leaves the /reset event
// to the next epoch's trim.
const settleWaitCursor = 5 * time.Second

// settleEpochs archives and trims sk's ended epochs in the background. after is the last
// inbox sequence of the epoch that just ended (0: none to wait for). A settle of sk already
// running runs once more when it is done, so nothing a later reset lists is left waiting.
func (w *Worker) settleEpochs(sk events.SessionKey, after uint64) {
	if w.epochs == nil {
		return
	}
	w.settleMu.Lock()
	if _, running := w.settling[sk]; running {
		w.settling[sk] = true
		w.settleMu.Unlock()
		return
	}
	w.settling[sk] = false
	w.settleMu.Unlock()
	w.settleWG.Add(1)
	go func() {
		defer w.settleWG.Done()
		w.waitCursor(sk, after)
		select {
		case w.settleSem <- struct{}{}:
		case <-w.ctx.Done():
			w.settleMu.Lock()
			delete(w.settling, sk)
			w.settleMu.Unlock()
			return
		}
		defer func() { <-w.settleSem }()
		for {
			ctx, cancel := context.WithTimeout(w.ctx, 5*time.Minute)
			n, err := w.epochs.Settle(ctx, sk)
			cancel()
			switch {
			case err != nil && w.ctx.Err() == nil:
				w.log.Warn("archive ended epochs; the next reset or takeover of the session tries again", "session", sk.String(), "err", err)
			case n > 0:
				w.log.Info("ended epochs archived, inbox and context log trimmed", "session", sk.String(), "epochs", n)
			}
			w.settleMu.Lock()
			again := w.settling[sk] && w.ctx.Err() == nil
			if !again {
				delete(w.settling, sk)
			} else {
				w.settling[sk] = false
			}
			w.settleMu.Unlock()
			if !again {
				return
			}
		}
	}()
}

// waitCursor waits (at most settleWaitCursor) until this process's copy of sk's record has
// its inbox cursor at after: the owner's own write, seen without a read of the bucket.
func (w *Worker) waitCursor(sk events.SessionKey, after uint64) {
	if after == 0 {
		return
	}
	deadline := time.Now().Add(settleWaitCursor)
	for time.Now().Before(deadline) {
		s, err := w.sessions.Current(w.ctx, sk)
		if err != nil || s.InboxCursor >= after {
			return
		}
		select {
		case <-w.ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}
