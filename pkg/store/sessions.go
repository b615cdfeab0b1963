package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/internal/jsconflict"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil"
)

// SessionStatus is active or archived (seed agent_sessions.status).
type SessionStatus string

const (
	StatusActive   SessionStatus = "active"
	StatusArchived SessionStatus = "archived"
)

// OpenTurn is a turn that started and has not been committed or failed yet. A worker that takes
// over the session resumes these (DESIGN.md §5).
type OpenTurn struct {
	ID string `json:"id"`
	// State is the caller's word for how far the turn got (e.g. "started", "tools", "committing").
	State string `json:"state"`
	// InboxSeq is the SESSION_IN sequence of the event that triggered the turn.
	InboxSeq uint64 `json:"inboxSeq,omitempty"`
	// ContextSeq is the AGENT_CTX sequence of the snapshot the turn runs on.
	ContextSeq uint64 `json:"contextSeq,omitempty"`
	StartedAt  int64  `json:"startedAt"`
	// Merged are further SESSION_IN sequences whose messages are part of this turn's input
	// (collect windows, interrupts), so a takeover rebuilds the same input.
	Merged []uint64 `json:"merged,omitempty"`
	// Steers are SESSION_IN sequences of steer / follow-up messages queued into the running
	// turn; a takeover queues again those the turn had not consumed yet.
	Steers []uint64 `json:"steers,omitempty"`
}

// Session is the record in KV sessions under the session key's token: which epoch is active and
// where its actor is. It is the seed's agent_sessions row plus the actor's durable cursor.
type Session struct {
	SessionKey string        `json:"sessionKey"` // platform:botId:scope:sceneId
	SessionID  string        `json:"sessionId"`  // sessionKey#epoch
	Epoch      uint64        `json:"epoch"`      // starts at 1, +1 on every archive
	Status     SessionStatus `json:"status"`
	// Model is the model last used (provider/id).
	Model string `json:"model,omitempty"`
	// ModelOverride is the model chosen in chat with /model: an ai.agents binding name or
	// provider/model. Empty = the usual routing. Kept across epochs (a chat setting).
	ModelOverride string `json:"modelOverride,omitempty"`
	// SystemPrompt, when set, replaces the opening of the system prompt (who the assistant is;
	// the chat, tool and memory sections follow as usual). The console sets it on a fork run
	// against another system prompt. Kept across epochs.
	SystemPrompt string `json:"systemPrompt,omitempty"`
	// Concurrency is the chat's /queue policy (parallel|queue|steer|interrupt|collect). Empty =
	// ai.agent.concurrency. Kept across epochs.
	Concurrency string `json:"concurrency,omitempty"`
	// InboxCursor is a SESSION_IN stream sequence up to which every event's effect is durable
	// or listed in OpenTurns. It is per session key, so it carries over to the next epoch. It
	// may lag: a turn started from its inbox event moves the cursor only through its context
	// commit (HeaderCtxInboxSeq on AGENT_CTX); the durable cursor is the later of the two.
	InboxCursor uint64     `json:"inboxCursor"`
	OpenTurns   []OpenTurn `json:"openTurns,omitempty"`
	// ActiveLeaf is the id of the current leaf of the session's message tree (pi's session tree).
	ActiveLeaf   string `json:"activeLeaf,omitempty"`
	CreatedAt    int64  `json:"createdAt"`    // Unix ms, of this epoch
	UpdatedAt    int64  `json:"updatedAt"`    // Unix ms, of the last write
	LastActivity int64  `json:"lastActivity"` // Unix ms, set by Touch and by the caller
	ArchivedAt   int64  `json:"archivedAt,omitempty"`
	// Ended lists the epochs that ended (Archive, or GetOrCreate after ArchiveIdle) and are not
	// archived yet: the durable to-do list of EpochArchive.Settle, which archives each into the
	// object store epochs, trims SESSION_IN and AGENT_CTX, and removes the entry. A crash in
	// between leaves the entry, so the work is done again (idempotently) by the next Settle.
	Ended []EndedEpoch `json:"ended,omitempty"`
	// InboxArchived is the last SESSION_IN sequence of agent.in.<sk> that an epoch archive
	// holds: the next epoch's archive starts after it.
	InboxArchived uint64 `json:"inboxArchived,omitempty"`

	// Revision is the KV revision this copy was read at (not stored).
	Revision uint64 `json:"-"`
	// Created: GetOrCreate created this record, the first the session key ever had (not
	// stored). No actor can have run a turn of the session before: every actor loads or
	// creates the record before its first turn.
	Created bool `json:"-"`
}

// EndedEpoch is an epoch that ended and waits to be archived (Session.Ended).
type EndedEpoch struct {
	Epoch uint64 `json:"epoch"`
	// InboxTo is the last SESSION_IN sequence of agent.in.<sk> that belongs to the epoch (the
	// /reset command, or the event before the one that started the next epoch); 0: unknown.
	InboxTo uint64 `json:"inboxTo,omitempty"`
	// CreatedAt and EndedAt bound the epoch (Unix ms): its turn events are read from CreatedAt on.
	CreatedAt int64 `json:"createdAt,omitempty"`
	EndedAt   int64 `json:"endedAt,omitempty"`
}

// maxEnded bounds Session.Ended: an epoch pushed out is never archived by Settle (its data
// stays in the streams, under their per-subject caps), but the record stays small.
const maxEnded = 32

// ID returns the session id as a typed value.
func (s *Session) ID() (events.SessionID, error) {
	return events.ParseSessionID(s.SessionID)
}

// Key returns the session key as a typed value.
func (s *Session) Key() (events.SessionKey, error) {
	return events.ParseSessionKey(s.SessionKey)
}

// OpenTurn returns the open turn with the id, or nil.
func (s *Session) OpenTurn(id string) *OpenTurn {
	for i := range s.OpenTurns {
		if s.OpenTurns[i].ID == id {
			return &s.OpenTurns[i]
		}
	}
	return nil
}

// SetOpenTurn adds or replaces the open turn with t.ID.
func (s *Session) SetOpenTurn(t OpenTurn) {
	if o := s.OpenTurn(t.ID); o != nil {
		*o = t
		return
	}
	s.OpenTurns = append(s.OpenTurns, t)
}

// CloseTurn removes the open turn with the id; it reports whether there was one.
func (s *Session) CloseTurn(id string) bool {
	for i := range s.OpenTurns {
		if s.OpenTurns[i].ID == id {
			s.OpenTurns = append(s.OpenTurns[:i], s.OpenTurns[i+1:]...)
			return true
		}
	}
	return false
}

func (s *Session) clone() *Session {
	c := *s
	c.OpenTurns = append([]OpenTurn(nil), s.OpenTurns...)
	c.Ended = slices.Clone(s.Ended)
	return &c
}

// Sessions is the repository of session records on KV sessions. Every write is a revision CAS,
// so concurrent writers never lose each other's updates.
type Sessions struct {
	kv jetstream.KeyValue
	// js, when set (OpenSessions), sends the reads a writer acts on (GetOrCreate, Current,
	// Update after a lost compare-and-set, Archive) to the bucket's stream leader: a KV get may
	// be answered by a lagging replica, and a session's new owner that started from an old
	// record (an old cursor, missing open turns) would redo or skip work. Get stays a direct
	// get (any replica; it may be a little behind).
	js jetstream.JetStream
	// stream is the bucket's stream (OpenSessions), for natsutil.ConsistentGetMsg: on one
	// replica a direct get is the leader's answer, without a JetStream API request.
	stream     jetstream.Stream
	now        func() time.Time
	maxRetries int

	// last holds the newest copy this process read or wrote per key. Update tries its CAS on
	// it first and reads the bucket only when that fails: the owner of a session is normally
	// its only writer, so the read is usually wasted.
	mu   sync.Mutex
	last map[string]*Session
}

// maxCachedSessions bounds last; past it the cache starts over.
const maxCachedSessions = 20000

func (r *Sessions) remember(token string, s *Session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil || len(r.last) >= maxCachedSessions {
		r.last = map[string]*Session{}
	}
	r.last[token] = s.clone()
}

func (r *Sessions) cached(token string) *Session {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.last[token]; s != nil {
		return s.clone()
	}
	return nil
}

func (r *Sessions) forget(token string) {
	r.mu.Lock()
	delete(r.last, token)
	r.mu.Unlock()
}

// SessionsOption configures Sessions.
type SessionsOption func(*Sessions)

// WithClock replaces time.Now (tests).
func WithClock(now func() time.Time) SessionsOption { return func(s *Sessions) { s.now = now } }

// WithMaxRetries bounds Update's CAS retries (default 16).
func WithMaxRetries(n int) SessionsOption { return func(s *Sessions) { s.maxRetries = n } }

// NewSessions returns the repository over an existing KV bucket (normally events' "sessions").
func NewSessions(kv jetstream.KeyValue, opts ...SessionsOption) *Sessions {
	s := &Sessions{kv: kv, now: time.Now, maxRetries: 16}
	for _, o := range opts {
		o(s)
	}
	return s
}

// OpenSessions binds the provisioned bucket.
func OpenSessions(ctx context.Context, js jetstream.JetStream, opts ...SessionsOption) (*Sessions, error) {
	kv, err := natsutil.KeyValue(ctx, js, bucketSessions)
	if err != nil {
		return nil, fmt.Errorf("open KV %s: %w", bucketSessions, err)
	}
	st, err := natsutil.Stream(ctx, js, "KV_"+bucketSessions)
	if err != nil {
		return nil, fmt.Errorf("open KV %s: %w", bucketSessions, err)
	}
	s := NewSessions(kv, opts...)
	s.js, s.stream = js, st
	return s, nil
}

func (r *Sessions) nowMs() int64 { return r.now().UnixMilli() }

// Get returns the session record, ErrNotFound if none was ever created. It is a direct get,
// which any replica may answer, so it may miss the newest writes: a writer reads with
// GetOrCreate or Current.
func (r *Sessions) Get(ctx context.Context, sk events.SessionKey) (*Session, error) {
	if err := sk.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return r.get(ctx, sk, false)
}

// Current returns the newest copy of the record this process read or wrote, reading the
// bucket only when it has none. It is for a session's owner, the record's only writer: an owner
// that (re)reads the record when it takes the session sees its own writes without a round trip.
func (r *Sessions) Current(ctx context.Context, sk events.SessionKey) (*Session, error) {
	if err := sk.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if s := r.cached(sk.Token()); s != nil {
		return s, nil
	}
	return r.get(ctx, sk, true)
}

// get reads the record; leader sends the read to the bucket's stream leader (when the
// repository has a JetStream context), for the reads a writer acts on.
func (r *Sessions) get(ctx context.Context, sk events.SessionKey, leader bool) (*Session, error) {
	var (
		value []byte
		rev   uint64
	)
	if leader && r.js != nil {
		raw, err := natsutil.ConsistentGetMsg(ctx, r.js, r.stream, natsutil.MsgQuery{LastFor: "$KV." + r.kv.Bucket() + "." + sk.Token()})
		if errors.Is(err, jetstream.ErrMsgNotFound) || err == nil && kvDeleted(raw.Header) {
			return nil, fmt.Errorf("session %s: %w", sk, ErrNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("get session %s: %w", sk, err)
		}
		value, rev = raw.Data, raw.Sequence
	} else {
		e, err := r.kv.Get(ctx, sk.Token())
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, fmt.Errorf("session %s: %w", sk, ErrNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("get session %s: %w", sk, err)
		}
		value, rev = e.Value(), e.Revision()
	}
	var s Session
	if err := json.Unmarshal(value, &s); err != nil {
		return nil, fmt.Errorf("decode session %s (revision %d): %w", sk, rev, err)
	}
	s.Revision = rev
	r.remember(sk.Token(), &s)
	return &s, nil
}

// kvDeleted reports a KV delete or purge marker (or a server TTL marker) read as a raw message.
func kvDeleted(h nats.Header) bool {
	switch h.Get("KV-Operation") {
	case "DEL", "PURGE":
		return true
	}
	return h.Get("Nats-Marker-Reason") != ""
}

func (r *Sessions) newEpoch(sk events.SessionKey, epoch uint64, prev *Session, inboxTo uint64) *Session {
	now := r.nowMs()
	s := &Session{
		SessionKey:   sk.String(),
		SessionID:    events.NewSessionID(sk, epoch).String(),
		Epoch:        epoch,
		Status:       StatusActive,
		CreatedAt:    now,
		UpdatedAt:    now,
		LastActivity: now,
	}
	if prev != nil {
		// The inbox is per session key: the new epoch continues where the old one stopped.
		s.InboxCursor = prev.InboxCursor
		s.Model = prev.Model
		s.ModelOverride, s.Concurrency = prev.ModelOverride, prev.Concurrency
		s.SystemPrompt = prev.SystemPrompt
		s.InboxArchived = prev.InboxArchived
		s.Ended = append(slices.Clone(prev.Ended), EndedEpoch{Epoch: prev.Epoch, InboxTo: inboxTo, CreatedAt: prev.CreatedAt, EndedAt: now})
		if len(s.Ended) > maxEnded {
			s.Ended = s.Ended[len(s.Ended)-maxEnded:]
		}
	}
	return s
}

// put writes s with a CAS on rev (0 = create) and returns the stored copy.
func (r *Sessions) put(ctx context.Context, sk events.SessionKey, s *Session, rev uint64) (*Session, error) {
	data, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	var nrev uint64
	if rev == 0 {
		nrev, err = r.kv.Create(ctx, sk.Token(), data)
	} else {
		nrev, err = r.kv.Update(ctx, sk.Token(), data, rev)
	}
	if err != nil {
		return nil, err
	}
	out := s.clone()
	out.Revision = nrev
	r.remember(sk.Token(), out)
	return out, nil
}

func isCASConflict(err error) bool { return jsconflict.Is(err) }

// backoff sleeps a little before CAS attempt n (jittered, so colliding writers spread out).
func backoff(ctx context.Context, attempt int) error {
	if attempt == 0 {
		return ctx.Err()
	}
	d := time.Duration(rand.Int64N(int64(attempt)*int64(500*time.Microsecond) + 1))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// GetOrCreate returns the active session for sk: the existing active record, or a new epoch 1,
// or (when the current epoch was archived, e.g. by ArchiveIdle) a new active epoch+1.
func (r *Sessions) GetOrCreate(ctx context.Context, sk events.SessionKey) (*Session, error) {
	if err := sk.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	for attempt := 0; attempt < r.maxRetries; attempt++ {
		if err := backoff(ctx, attempt); err != nil {
			return nil, err
		}
		cur, err := r.get(ctx, sk, true)
		switch {
		case errors.Is(err, ErrNotFound):
			s, err := r.put(ctx, sk, r.newEpoch(sk, 1, nil, 0), 0)
			if isCASConflict(err) {
				continue // someone else created it: read theirs
			}
			if err != nil {
				return nil, fmt.Errorf("create session %s: %w", sk, err)
			}
			s.Created = true
			return s, nil
		case err != nil:
			return nil, err
		case cur.Status == StatusActive:
			return cur, nil
		default:
			// Archived by ArchiveIdle (or an Archive cut short): the epoch's inbox is done up to
			// the record's cursor, as far as the record knows.
			s, err := r.put(ctx, sk, r.newEpoch(sk, cur.Epoch+1, cur, cur.InboxCursor), cur.Revision)
			if isCASConflict(err) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("start epoch %d of session %s: %w", cur.Epoch+1, sk, err)
			}
			return s, nil
		}
	}
	return nil, fmt.Errorf("get or create session %s: %w", sk, ErrConflict)
}

// ArchiveOption adjusts one Archive.
type ArchiveOption func(*archiveOpts)

type archiveOpts struct{ inboxTo uint64 }

// EndInboxAt names the last SESSION_IN sequence of the ending epoch (the /reset command's, or
// the one before the event that starts the next epoch): EpochArchive archives the epoch's
// inbox up to it and never trims past it. Without it the record's cursor is used.
func EndInboxAt(seq uint64) ArchiveOption { return func(o *archiveOpts) { o.inboxTo = seq } }

// Archive ends the current epoch (the /reset and /new commands) and returns the new active
// record with epoch+1. The archived state is written first (one revision in the bucket's
// history says "epoch n archived at t"), then the new epoch, which lists the ended one in
// Ended for EpochArchive.Settle; if the process dies in between, the next GetOrCreate starts
// the new epoch. Archiving a session that does not exist creates epoch 1.
func (r *Sessions) Archive(ctx context.Context, sk events.SessionKey, opts ...ArchiveOption) (*Session, error) {
	var o archiveOpts
	for _, f := range opts {
		f(&o)
	}
	if err := sk.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	for attempt := 0; attempt < r.maxRetries; attempt++ {
		if err := backoff(ctx, attempt); err != nil {
			return nil, err
		}
		cur, err := r.get(ctx, sk, true)
		if errors.Is(err, ErrNotFound) {
			return r.GetOrCreate(ctx, sk)
		}
		if err != nil {
			return nil, err
		}
		rev := cur.Revision
		if cur.Status == StatusActive {
			arch := cur.clone()
			arch.Status = StatusArchived
			arch.ArchivedAt = r.nowMs()
			arch.UpdatedAt = arch.ArchivedAt
			arch.OpenTurns = nil // a reset abandons them; their events stay in AGENT_EVENTS
			stored, err := r.put(ctx, sk, arch, rev)
			if isCASConflict(err) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("archive session %s: %w", cur.SessionID, err)
			}
			cur, rev = stored, stored.Revision
		}
		inboxTo := o.inboxTo
		if inboxTo == 0 {
			inboxTo = cur.InboxCursor
		}
		s, err := r.put(ctx, sk, r.newEpoch(sk, cur.Epoch+1, cur, inboxTo), rev)
		if isCASConflict(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("start epoch %d of session %s: %w", cur.Epoch+1, sk, err)
		}
		return s, nil
	}
	return nil, fmt.Errorf("archive session %s: %w", sk, ErrConflict)
}

// Update applies fn to the current record and writes it with a revision CAS, re-reading and
// re-applying fn on conflict (at most the retry bound, then ErrConflict). fn must be a pure
// function of the record it gets (it may run several times); an error from fn aborts the update
// and is returned as is. UpdatedAt is set; the key fields (SessionKey, SessionID, Epoch) cannot
// be changed by fn. Update of a missing session returns ErrNotFound.
func (r *Sessions) Update(ctx context.Context, sk events.SessionKey, fn func(*Session) error) (*Session, error) {
	if err := sk.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	for attempt := 0; attempt < r.maxRetries; attempt++ {
		if err := backoff(ctx, attempt); err != nil {
			return nil, err
		}
		cur := r.cached(sk.Token())
		if attempt > 0 || cur == nil {
			var err error
			if cur, err = r.get(ctx, sk, true); err != nil {
				return nil, err
			}
		}
		next := cur.clone()
		if err := fn(next); err != nil {
			return nil, err
		}
		next.SessionKey, next.SessionID, next.Epoch = cur.SessionKey, cur.SessionID, cur.Epoch
		next.UpdatedAt = r.nowMs()
		s, err := r.put(ctx, sk, next, cur.Revision)
		if isCASConflict(err) {
			r.forget(sk.Token())
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("update session %s: %w", cur.SessionID, err)
		}
		return s, nil
	}
	return nil, fmt.Errorf("update session %s: %w", sk, ErrConflict)
}

// Touch records activity now (what ArchiveIdle measures idleness from).
func (r *Sessions) Touch(ctx context.Context, sk events.SessionKey) (*Session, error) {
	now := r.nowMs()
	return r.Update(ctx, sk, func(s *Session) error {
		if now > s.LastActivity {
			s.LastActivity = now
		}
		return nil
	})
}

// ArchiveIdle archives every active session whose LastActivity is older than idle
// (ai.sessions.sessionIdleArchiveMs) and returns how many it archived. The next GetOrCreate of
// such a session starts a new epoch. A session touched concurrently is left alone (the CAS
// re-check sees the fresh activity). idle <= 0 does nothing (the seed's "0 = off").
func (r *Sessions) ArchiveIdle(ctx context.Context, idle time.Duration) (int, error) {
	if idle <= 0 {
		return 0, nil
	}
	w, err := r.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return 0, fmt.Errorf("archive idle sessions: %w", err)
	}
	var stale []events.SessionKey
	cutoff := r.now().Add(-idle).UnixMilli()
scan:
	for {
		select {
		case <-ctx.Done():
			w.Stop()
			return 0, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok || e == nil {
				break scan // nil marks the end of the initial values
			}
			var s Session
			if json.Unmarshal(e.Value(), &s) != nil || s.Status != StatusActive || s.LastActivity >= cutoff {
				continue
			}
			sk, err := events.ParseSessionKeyToken(e.Key())
			if err != nil {
				continue
			}
			stale = append(stale, sk)
		}
	}
	w.Stop()
	errSkip := errors.New("not idle")
	n := 0
	for _, sk := range stale {
		now := r.nowMs()
		_, err := r.Update(ctx, sk, func(s *Session) error {
			if s.Status != StatusActive || s.LastActivity >= cutoff {
				return errSkip
			}
			s.Status, s.ArchivedAt, s.OpenTurns = StatusArchived, now, nil
			return nil
		})
		switch {
		case errors.Is(err, errSkip):
		case err != nil:
			return n, fmt.Errorf("archive idle sessions: %w", err)
		default:
			n++
		}
	}
	return n, nil
}
