package turn

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/store"
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

// Retries of a settle held back by a durable reader of the inbox (store.ErrReaderBehind, the
// transcript archiver's inbox consumer, which gathers for up to its ThinWait): the first after
// settleRetryFirst, doubling up to settleRetryMax, until settleRetryFor has passed; after that
// the next epoch end or actor start of the session tries again.
const (
	settleRetryFirst = time.Second
	settleRetryMax   = 30 * time.Second
	settleRetryFor   = 10 * time.Minute
)

// epochSettler runs the settles of one worker: at most one at a time per session (a settle
// asked for while one runs makes that one run once more) and settleParallel in all.
type epochSettler struct {
	ctx      context.Context // the worker's: cancelled by Stop
	archive  *store.EpochArchive
	sessions *store.Sessions
	log      *slog.Logger

	mu       sync.Mutex
	settling map[events.SessionKey]bool // sessions being settled -> settle once more
	sem      chan struct{}
	wg       sync.WaitGroup
}

func newEpochSettler(archive *store.EpochArchive, sessions *store.Sessions, log *slog.Logger) *epochSettler {
	return &epochSettler{archive: archive, sessions: sessions, log: log,
		settling: map[events.SessionKey]bool{}, sem: make(chan struct{}, settleParallel)}
}

// settle archives and trims sk's ended epochs in the background. after is the last inbox
// sequence of the epoch that just ended (0: none to wait for). Safe on a nil settler (no
// archive: nothing is trimmed).
func (s *epochSettler) settle(sk events.SessionKey, after uint64) {
	if s == nil || s.ctx == nil {
		return
	}
	s.mu.Lock()
	if _, running := s.settling[sk]; running {
		s.settling[sk] = true
		s.mu.Unlock()
		return
	}
	s.settling[sk] = false
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.settling, sk)
			s.mu.Unlock()
		}()
		s.waitCursor(sk, after)
		retry, giveUp := settleRetryFirst, time.Now().Add(settleRetryFor)
		for {
			err := s.once(sk)
			var wait time.Duration
			switch {
			case errors.Is(err, store.ErrReaderBehind) && time.Now().Before(giveUp):
				wait, retry = retry, min(2*retry, settleRetryMax)
			case errors.Is(err, store.ErrReaderBehind):
				s.log.Info("ended epoch archived, its inbox not trimmed: a reader of the inbox is still behind; the next reset or takeover of the session tries again", "session", sk.String(), "err", err)
			case err != nil && s.ctx.Err() == nil:
				s.log.Warn("archive ended epochs; the next reset or takeover of the session tries again", "session", sk.String(), "err", err)
			}
			s.mu.Lock()
			again := s.settling[sk]
			s.settling[sk] = false
			s.mu.Unlock()
			if wait == 0 && !again || s.ctx.Err() != nil {
				return
			}
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(wait):
			}
		}
	}()
}

// once runs one Settle of sk in one of the sem's slots.
func (s *epochSettler) once(sk events.SessionKey) error {
	select {
	case s.sem <- struct{}{}:
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
	defer func() { <-s.sem }()
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Minute)
	defer cancel()
	n, err := s.archive.Settle(ctx, sk)
	if n > 0 {
		s.log.Info("ended epochs archived, inbox and context log trimmed", "session", sk.String(), "epochs", n)
	}
	return err
}

// waitCursor waits (at most settleWaitCursor) until this process's copy of sk's record has
// its inbox cursor at after: the owner's own write, seen without a read of the bucket.
func (s *epochSettler) waitCursor(sk events.SessionKey, after uint64) {
	if after == 0 {
		return
	}
	deadline := time.Now().Add(settleWaitCursor)
	for time.Now().Before(deadline) {
		rec, err := s.sessions.Current(s.ctx, sk)
		if err != nil || rec.InboxCursor >= after {
			return
		}
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// wait returns once every settle started has ended (after the worker's ctx is cancelled).
func (s *epochSettler) wait() {
	if s != nil {
		s.wg.Wait()
	}
}
