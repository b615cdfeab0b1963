package store

import (
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil"
)

// EpochArchive is the archive of ended session epochs in the object store epochs
// (events.ObjectEpochs): one object per epoch holding the epoch's inbox events (SESSION_IN,
// agent.in.<sk>), its context log (AGENT_CTX, agent.ctx.<sk>.<epoch>) and its turn events
// (AGENT_EVENTS records whose session id is the epoch's), each as the stream stored it
// (sequence, subject, time, headers, data). Once an epoch is archived, Settle trims its
// context subject and the part of the inbox it covers, and readers (replay, History) read the
// archive where the streams no longer hold the epoch: the same records, decoded by the same
// code, so what they print does not change.
//
// # The work and its crash safety
//
// Sessions.Archive (and GetOrCreate after ArchiveIdle) lists the ended epoch in the new
// record's Ended, in the same compare-and-set that starts the next epoch: the durable to-do
// list. Settle works it off, oldest first, each step idempotent:
//
//  1. write the object "<sk token>.<epoch>" unless it exists (an object is visible only once
//     its meta record is stored, after every chunk: a crash mid-write leaves no object, and
//     the retry writes it whole; the bounds it covers are in its metadata, fixed before the
//     write);
//  2. purge agent.ctx.<sk>.<epoch> up to the last record the object holds (a record a late
//     writer added after it stays in the stream, and readers take it from there);
//  3. purge agent.in.<sk> up to the last inbox event the object holds, never past an event
//     that is not durably done (the record's cursor, or the ended epoch's last commit), never
//     an event an open turn names, never past the epoch's end (the new epoch's events stay);
//  4. remove the entry from Ended and move InboxArchived (a revision CAS).
//
// A crash between any two steps leaves the entry listed; the next Settle finds the object
// (1 is skipped, nothing is written twice), purges again (a no-op if done) and records.
// Nothing is purged that the object does not hold, so nothing is lost.
//
// Turn events are not purged: AGENT_EVENTS is bounded by age, and replay takes an archived
// epoch's events from the archive only once the stream has aged them out.
type EpochArchive struct {
	js       jetstream.JetStream
	obs      jetstream.ObjectStore
	inbox    jetstream.Stream
	ctxSt    jetstream.Stream
	evts     jetstream.Stream
	sessions *Sessions
	// CursorConsumer names the durable consumer on SESSION_IN whose progress the session
	// records' cursors track (the turn workers'). Settle purges no inbox event that another
	// durable consumer has not acknowledged yet: the transcript archiver's inbox consumers read
	// the inbound messages that only inbox events carry.
	CursorConsumer string
}

// OpenEpochArchive binds the object store epochs and the streams it archives. sessions may
// be nil for a reader (replay); Settle needs it (pass the session owner's own repository, so
// its cached records stay current).
func OpenEpochArchive(ctx context.Context, js jetstream.JetStream, sessions *Sessions) (*EpochArchive, error) {
	obs, err := js.ObjectStore(ctx, events.ObjectEpochs)
	if err != nil {
		return nil, fmt.Errorf("open object store %s: %w", events.ObjectEpochs, err)
	}
	a := &EpochArchive{js: js, obs: obs, sessions: sessions}
	for _, b := range []struct {
		name string
		st   *jetstream.Stream
	}{{events.StreamSessionIn, &a.inbox}, {streamAgentCtx, &a.ctxSt}, {streamAgentEvents, &a.evts}} {
		if *b.st, err = natsutil.Stream(ctx, js, b.name); err != nil {
			return nil, fmt.Errorf("open stream %s: %w", b.name, err)
		}
	}
	return a, nil
}

// EpochObjectName is the name of id's object in the object store epochs.
func EpochObjectName(id events.SessionID) string {
	return id.Key.Token() + "." + strconv.FormatUint(id.Epoch, 10)
}

// EpochBounds are what one epoch's object holds (its metadata): the inbox events in
// [InboxFrom, InboxTo] (none when InboxTo < InboxFrom), the context records up to CtxLast,
// the epoch's turn events up to EventsTo read from EventsSince on, and the last inbox
// sequence a commit of the epoch consumed (CommitInbox).
type EpochBounds struct {
	InboxFrom, InboxTo uint64
	CtxLast            uint64
	CommitInbox        uint64
	EventsTo           uint64
	EventsSince        time.Time
}

func (b EpochBounds) metadata() map[string]string {
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	return map[string]string{"inbox-from": u(b.InboxFrom), "inbox-to": u(b.InboxTo), "ctx-last": u(b.CtxLast),
		"commit-inbox": u(b.CommitInbox), "events-to": u(b.EventsTo), "events-since": strconv.FormatInt(b.EventsSince.UnixMilli(), 10)}
}

func boundsOf(md map[string]string) EpochBounds {
	u := func(k string) uint64 { v, _ := strconv.ParseUint(md[k], 10, 64); return v }
	ms, _ := strconv.ParseInt(md["events-since"], 10, 64)
	b := EpochBounds{InboxFrom: u("inbox-from"), InboxTo: u("inbox-to"), CtxLast: u("ctx-last"), CommitInbox: u("commit-inbox"), EventsTo: u("events-to")}
	if ms > 0 {
		b.EventsSince = time.UnixMilli(ms)
	}
	return b
}

// archiveFormat names the object's content: gzip of a stream of JSON values, archRec each.
const archiveFormat = "agentbus-epoch/1+json+gzip"

// Kinds of archRec.
const (
	archInbox  = "in"
	archCtx    = "ctx"
	archEvents = "evt"
)

// archRec is one stored message as the archive holds it.
type archRec struct {
	K       string              `json:"k"`
	Seq     uint64              `json:"seq"`
	Subject string              `json:"subj"`
	Time    time.Time           `json:"time"`
	Header  map[string][]string `json:"hdr,omitempty"`
	// Data is the payload when it is JSON (every agentbus event), else Raw.
	Data json.RawMessage `json:"data,omitempty"`
	Raw  []byte          `json:"raw,omitempty"`
}

func toArch(kind string, m *jetstream.RawStreamMsg) archRec {
	r := archRec{K: kind, Seq: m.Sequence, Subject: m.Subject, Time: m.Time, Header: m.Header}
	if json.Valid(m.Data) {
		r.Data = m.Data
	} else {
		r.Raw = m.Data
	}
	return r
}

func (r *archRec) msg() *jetstream.RawStreamMsg {
	data := []byte(r.Data)
	if len(r.Raw) > 0 {
		data = r.Raw
	}
	return &jetstream.RawStreamMsg{Subject: r.Subject, Sequence: r.Seq, Header: nats.Header(r.Header), Data: data, Time: r.Time}
}

// eventsSkew is how much earlier than the epoch's creation its turn events are looked for
// (clocks of the worker that wrote the record and of the stream leader).
const eventsSkew = 10 * time.Minute

// Info returns the bounds of id's archived object; jetstream.ErrObjectNotFound when the epoch
// is not archived (yet, or any more).
func (a *EpochArchive) Info(ctx context.Context, id events.SessionID) (EpochBounds, error) {
	info, err := a.obs.GetInfo(ctx, EpochObjectName(id))
	if err != nil {
		return EpochBounds{}, err
	}
	if info.Deleted {
		return EpochBounds{}, jetstream.ErrObjectNotFound
	}
	return boundsOf(info.Metadata), nil
}

// Write archives ended epoch e of sk unless its object exists, reading the inbox from
// inboxFrom on; it returns the object's bounds (those of the existing object when there is
// one). It never purges anything.
func (a *EpochArchive) Write(ctx context.Context, sk events.SessionKey, e EndedEpoch, inboxFrom uint64) (EpochBounds, error) {
	id := events.SessionID{Key: sk, Epoch: e.Epoch}
	if err := checkID(id); err != nil {
		return EpochBounds{}, err
	}
	if b, err := a.Info(ctx, id); err == nil {
		return b, nil
	} else if !errors.Is(err, jetstream.ErrObjectNotFound) {
		return EpochBounds{}, fmt.Errorf("archive %s: %w", id, err)
	}
	b := EpochBounds{InboxFrom: max(inboxFrom, 1), InboxTo: e.InboxTo}
	if e.CreatedAt > 0 {
		b.EventsSince = time.UnixMilli(e.CreatedAt).Add(-eventsSkew)
	}
	// The bounds are fixed before the write, so the object's metadata can say what it holds.
	// A record stored past them is left to the stream (and to the readers' merge).
	last, err := a.ctxSt.GetLastMsgForSubject(ctx, events.AgentCtxSubject(id))
	switch {
	case err == nil:
		b.CtxLast = last.Sequence
	case !errors.Is(err, jetstream.ErrMsgNotFound):
		return EpochBounds{}, fmt.Errorf("archive %s: last context record: %w", id, err)
	}
	info, err := a.evts.Info(ctx)
	if err != nil {
		return EpochBounds{}, fmt.Errorf("archive %s: %s info: %w", id, streamAgentEvents, err)
	}
	b.EventsTo = info.State.LastSeq

	if b.CommitInbox, err = a.commitInbox(ctx, id, b.CtxLast); err != nil {
		return EpochBounds{}, err
	}
	meta := jetstream.ObjectMeta{Name: EpochObjectName(id), Description: "agentbus epoch " + id.String(),
		Headers:  nats.Header{events.HeaderSession: []string{id.String()}, "Content-Type": []string{archiveFormat}},
		Metadata: b.metadata()}
	// The records are read and compressed while Put sends the chunks: an epoch of any length
	// is archived in bounded memory.
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		zw := gzip.NewWriter(pw)
		err := a.writeRecords(ctx, zw, id, &b)
		if cerr := zw.Close(); err == nil {
			err = cerr
		}
		pw.CloseWithError(err)
		done <- err
	}()
	if _, err := a.obs.Put(ctx, meta, fullReader{pr}); err != nil {
		pr.CloseWithError(err)
		<-done
		return EpochBounds{}, fmt.Errorf("archive %s: %w", id, err)
	}
	if err := <-done; err != nil {
		return EpochBounds{}, fmt.Errorf("archive %s: %w", id, err)
	}
	return b, nil
}

// fullReader fills every Read it can: the object store makes a chunk of what one Read
// returns, and a pipe returns each write of the compressor alone (tiny chunks, a stream
// message each).
type fullReader struct{ r io.Reader }

func (f fullReader) Read(p []byte) (int, error) {
	n, err := io.ReadFull(f.r, p)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = io.EOF
	}
	return n, err
}

// commitInbox is the largest HeaderCtxInboxSeq among id's context records up to last: how far
// the epoch's commits say its inbox was done.
func (a *EpochArchive) commitInbox(ctx context.Context, id events.SessionID, last uint64) (uint64, error) {
	if last == 0 {
		return 0, nil
	}
	var n uint64
	err := Scan(ctx, a.js, streamAgentCtx, events.AgentCtxSubject(id), 1, time.Time{}, func(m *jetstream.RawStreamMsg) bool {
		if m.Sequence > last {
			return false
		}
		n = max(n, hdrUint(m.Header, HeaderCtxInboxSeq))
		return m.Sequence < last
	})
	if err != nil {
		return 0, fmt.Errorf("archive %s: read context: %w", id, err)
	}
	return n, nil
}

// writeRecords writes the epoch's records within b: inbox, context log, turn events.
func (a *EpochArchive) writeRecords(ctx context.Context, w io.Writer, id events.SessionID, b *EpochBounds) error {
	enc := json.NewEncoder(w)
	var werr error
	put := func(kind string, m *jetstream.RawStreamMsg) bool {
		if werr = enc.Encode(toArch(kind, m)); werr != nil {
			return false
		}
		return true
	}
	if b.InboxTo >= b.InboxFrom {
		err := Scan(ctx, a.js, events.StreamSessionIn, events.AgentInSubject(id.Key), b.InboxFrom, time.Time{}, func(m *jetstream.RawStreamMsg) bool {
			if m.Sequence > b.InboxTo {
				return false
			}
			return put(archInbox, m) && m.Sequence < b.InboxTo
		})
		if err = cmp.Or(werr, err); err != nil {
			return fmt.Errorf("inbox: %w", err)
		}
	}
	if b.CtxLast > 0 {
		err := Scan(ctx, a.js, streamAgentCtx, events.AgentCtxSubject(id), 1, time.Time{}, func(m *jetstream.RawStreamMsg) bool {
			if m.Sequence > b.CtxLast {
				return false
			}
			return put(archCtx, m) && m.Sequence < b.CtxLast
		})
		if err = cmp.Or(werr, err); err != nil {
			return fmt.Errorf("context log: %w", err)
		}
	}
	if b.EventsTo > 0 {
		sid := id.String()
		err := Scan(ctx, a.js, streamAgentEvents, events.AgentEvtSessionFilter(id.Key), 0, b.EventsSince, func(m *jetstream.RawStreamMsg) bool {
			if m.Sequence > b.EventsTo {
				return false
			}
			if sessionOf(m) == sid && !put(archEvents, m) {
				return false
			}
			return m.Sequence < b.EventsTo
		})
		if err = cmp.Or(werr, err); err != nil {
			return fmt.Errorf("turn events: %w", err)
		}
	}
	return nil
}

// sessionOf is the session id a stored event names (its header, else its envelope).
func sessionOf(m *jetstream.RawStreamMsg) string {
	if s := m.Header.Get(events.HeaderSession); s != "" {
		return s
	}
	if ev, err := events.Decode(m.Data); err == nil {
		return ev.EventMeta().Session
	}
	return ""
}

// records yields the archived records of id of the given kind, in sequence order;
// found=false (and nothing yielded) when id has no object.
func (a *EpochArchive) records(ctx context.Context, id events.SessionID, kind string) iter.Seq2[*jetstream.RawStreamMsg, error] {
	return func(yield func(*jetstream.RawStreamMsg, error) bool) {
		res, err := a.obs.Get(ctx, EpochObjectName(id))
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return
		}
		if err != nil {
			yield(nil, fmt.Errorf("read archive of %s: %w", id, err))
			return
		}
		defer res.Close()
		zr, err := gzip.NewReader(res)
		if err != nil {
			yield(nil, fmt.Errorf("read archive of %s: %w", id, err))
			return
		}
		dec := json.NewDecoder(zr)
		for {
			var r archRec
			err := dec.Decode(&r)
			if errors.Is(err, io.EOF) {
				// The object's digest is checked once its last chunk is read: a damaged
				// archive is an error, never a short history.
				if _, err := io.Copy(io.Discard, res); err != nil {
					yield(nil, fmt.Errorf("read archive of %s: %w", id, err))
				}
				return
			}
			if err != nil {
				yield(nil, fmt.Errorf("read archive of %s: %w", id, err))
				return
			}
			if r.K == kind && !yield(r.msg(), nil) {
				return
			}
		}
	}
}

// Inbox yields the archived inbox events of epoch id (SESSION_IN messages as stored), in
// sequence order; nothing when the epoch is not archived.
func (a *EpochArchive) Inbox(ctx context.Context, id events.SessionID) iter.Seq2[*jetstream.RawStreamMsg, error] {
	return a.records(ctx, id, archInbox)
}

// ContextHistory is ContextLog.History of id reading the archive where the stream no longer
// holds the epoch: the archived records, then those the stream holds after them. a may be nil
// (the stream alone).
func (a *EpochArchive) ContextHistory(ctx context.Context, cl *ContextLog, id events.SessionID) iter.Seq2[CtxRecord, error] {
	if a == nil {
		return cl.History(ctx, id)
	}
	return func(yield func(CtxRecord, error) bool) {
		_, err := a.Info(ctx, id)
		switch {
		case errors.Is(err, jetstream.ErrObjectNotFound):
			// Not archived, as far as this read knows. The epoch may be archived and trimmed
			// while the stream is read: then the stream's records come after the archive's.
			var recs []CtxRecord
			for r, err := range cl.History(ctx, id) {
				if err != nil {
					yield(CtxRecord{}, err)
					return
				}
				recs = append(recs, r)
			}
			if _, err := a.Info(ctx, id); err == nil {
				if !a.archivedCtx(ctx, id, func(r CtxRecord) bool { return len(recs) > 0 && r.Seq >= recs[0].Seq }, yield) {
					return
				}
			}
			for _, r := range recs {
				if !yield(r, nil) {
					return
				}
			}
			return
		case err != nil:
			yield(CtxRecord{}, fmt.Errorf("context history %s: %w", id, err))
			return
		}
		var last uint64
		if !a.archivedCtx(ctx, id, func(r CtxRecord) bool { last = r.Seq; return false }, yield) {
			return
		}
		for r, err := range cl.History(ctx, id) {
			if err == nil && r.Seq <= last {
				continue // archived, not purged yet
			}
			if !yield(r, err) || err != nil {
				return
			}
		}
	}
}

// archivedCtx yields id's archived context records up to the first one stop reports (which
// is not yielded); false when the caller must stop (yield said so, or an error was yielded).
func (a *EpochArchive) archivedCtx(ctx context.Context, id events.SessionID, stop func(CtxRecord) bool, yield func(CtxRecord, error) bool) bool {
	for m, err := range a.records(ctx, id, archCtx) {
		if err != nil {
			yield(CtxRecord{}, err)
			return false
		}
		r, err := ctxRecordOf(m)
		if err != nil {
			yield(CtxRecord{}, fmt.Errorf("context history %s (archived): %w", id, err))
			return false
		}
		if stop(r) {
			return true
		}
		if !yield(r, nil) {
			return false
		}
	}
	return true
}

// Replay is TurnLog.Replay of sk with the turn events of its archived epochs (1..lastEpoch)
// that AGENT_EVENTS no longer holds (aged out) before those it holds, all in sequence order,
// from the same starting point. a may be nil (the stream alone).
func (a *EpochArchive) Replay(ctx context.Context, tl *TurnLog, sk events.SessionKey, lastEpoch uint64, from ReplayFrom) iter.Seq2[TurnRecord, error] {
	if a == nil {
		return tl.Replay(ctx, sk, from)
	}
	return func(yield func(TurnRecord, error) bool) {
		// The first event the stream holds for the session: archived events before it are gone
		// from the stream (AGENT_EVENTS only ages out, oldest first, and is never purged).
		first, firstAt := uint64(0), time.Time{}
		err := Scan(ctx, a.js, streamAgentEvents, events.AgentEvtSessionFilter(sk), 1, time.Time{}, func(m *jetstream.RawStreamMsg) bool {
			first, firstAt = m.Sequence, m.Time
			return false
		})
		if err != nil {
			yield(TurnRecord{}, fmt.Errorf("replay %s: %w", sk, err))
			return
		}
		var old []*jetstream.RawStreamMsg
		for e := uint64(1); e <= lastEpoch; e++ {
			id := events.SessionID{Key: sk, Epoch: e}
			b, err := a.Info(ctx, id)
			if errors.Is(err, jetstream.ErrObjectNotFound) {
				continue
			}
			if err != nil {
				yield(TurnRecord{}, fmt.Errorf("replay %s: %w", sk, err))
				return
			}
			if first > 0 && !b.EventsSince.IsZero() && !firstAt.After(b.EventsSince) {
				continue // the stream still holds events from before the epoch began: all of its
			}
			for m, err := range a.records(ctx, id, archEvents) {
				if err != nil {
					yield(TurnRecord{}, err)
					return
				}
				if first > 0 && m.Sequence >= first {
					break // the stream has it, and everything after it
				}
				if from.Seq > 0 && m.Sequence < from.Seq || from.Seq == 0 && m.Time.Before(from.Time) {
					continue
				}
				old = append(old, m)
			}
		}
		slices.SortFunc(old, func(x, y *jetstream.RawStreamMsg) int { return cmp.Compare(x.Sequence, y.Sequence) })
		for _, m := range old {
			rs, err := decodeTurnRecords(m)
			if err != nil {
				yield(TurnRecord{}, err)
				return
			}
			for _, r := range rs {
				if !yield(r, nil) {
					return
				}
			}
		}
		for r, err := range tl.Replay(ctx, sk, from) {
			if !yield(r, err) || err != nil {
				return
			}
		}
	}
}

// Settle archives and trims every ended epoch of sk that its record lists (Session.Ended),
// oldest first, and returns how many it finished. It is idempotent and safe to run from any
// process at any time, concurrently with the session's owner (each step is described on
// EpochArchive); two Settles of one session at once do the same work twice, harmlessly.
// ctx bounds the work; an error leaves the rest listed for the next Settle.
func (a *EpochArchive) Settle(ctx context.Context, sk events.SessionKey) (int, error) {
	if a.sessions == nil {
		return 0, fmt.Errorf("%w: EpochArchive opened without sessions cannot settle", ErrInvalid)
	}
	sess, err := a.sessions.get(ctx, sk, true)
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for len(sess.Ended) > 0 {
		e := slices.MinFunc(sess.Ended, func(x, y EndedEpoch) int { return cmp.Compare(x.Epoch, y.Epoch) })
		id := events.SessionID{Key: sk, Epoch: e.Epoch}
		if e.Epoch >= sess.Epoch && sess.Status == StatusActive || e.Epoch == 0 {
			// Not ended after all (a record written by hand?): drop the entry, trim nothing.
			sess, err = a.done(ctx, sk, e.Epoch, 0)
			if err != nil {
				return n, err
			}
			continue
		}
		b, err := a.Write(ctx, sk, e, sess.InboxArchived+1)
		if err != nil {
			return n, err
		}
		if b.CtxLast > 0 {
			if err := a.ctxSt.Purge(ctx, jetstream.WithPurgeSubject(events.AgentCtxSubject(id)), jetstream.WithPurgeSequence(b.CtxLast+1)); err != nil {
				return n, fmt.Errorf("trim context of %s: %w", id, err)
			}
		}
		upTo := inboxTrim(sess, b)
		if upTo > 0 {
			floor, err := a.consumersDone(ctx)
			if err != nil {
				return n, err
			}
			if floor < upTo {
				// A reader has not had the epoch's events yet: purge nothing now and keep
				// the epoch listed for a later Settle. The archive written above stays.
				return n, fmt.Errorf("trim inbox of %s up to %d: %w (acknowledged up to %d)", id, upTo, ErrReaderBehind, floor)
			}
			if err := a.inbox.Purge(ctx, jetstream.WithPurgeSubject(events.AgentInSubject(sk)), jetstream.WithPurgeSequence(upTo+1)); err != nil {
				return n, fmt.Errorf("trim inbox of %s: %w", id, err)
			}
		}
		if sess, err = a.done(ctx, sk, e.Epoch, b.InboxTo); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// ErrReaderBehind is returned by Settle when a durable reader of SESSION_IN has not yet
// acknowledged an ended epoch's inbox events: the epoch is archived but stays listed, and a
// later Settle trims it.
var ErrReaderBehind = errors.New("a durable reader of the inbox is behind")

// consumersDone is the last SESSION_IN sequence every durable consumer but CursorConsumer has
// acknowledged (math.MaxUint64 when each has nothing pending). Ephemeral consumers (readers
// such as replay's) do not count.
func (a *EpochArchive) consumersDone(ctx context.Context) (uint64, error) {
	floor := uint64(math.MaxUint64)
	infos := a.inbox.ListConsumers(ctx)
	for info := range infos.Info() {
		if info.Config.Durable == "" || info.Name == a.CursorConsumer || info.NumPending == 0 && info.NumAckPending == 0 {
			continue
		}
		floor = min(floor, info.AckFloor.Stream)
	}
	if err := infos.Err(); err != nil {
		return 0, fmt.Errorf("list the consumers of %s: %w", events.StreamSessionIn, err)
	}
	return floor, nil
}

// done removes epoch from the record's Ended and notes that the inbox is archived up to
// inboxTo.
func (a *EpochArchive) done(ctx context.Context, sk events.SessionKey, epoch, inboxTo uint64) (*Session, error) {
	s, err := a.sessions.Update(ctx, sk, func(s *Session) error {
		s.Ended = slices.DeleteFunc(s.Ended, func(e EndedEpoch) bool { return e.Epoch == epoch })
		s.InboxArchived = max(s.InboxArchived, inboxTo)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("record archive of %s#%d: %w", sk, epoch, err)
	}
	return s, nil
}

// inboxTrim is the last inbox sequence that may be purged after epoch archive b, with the
// session's record s (read before the purge): no further than the archive holds (b.InboxTo),
// no further than the inbox is durably done (the record's cursor, or the ended epoch's last
// commit, whichever is later: a new owner re-reads only events after the cursor, and the
// ended epoch's events are never run again), and before every event an open turn of s names
// (its input is re-read from the inbox on resume). Events of the new epoch are after b.InboxTo
// and stay. 0: nothing.
func inboxTrim(s *Session, b EpochBounds) uint64 {
	upTo := min(b.InboxTo, max(s.InboxCursor, b.CommitInbox))
	for _, t := range s.OpenTurns {
		for _, seq := range append(append([]uint64{t.InboxSeq}, t.Merged...), t.Steers...) {
			if seq > 0 && seq <= upTo {
				upTo = seq - 1
			}
		}
	}
	return upTo
}
