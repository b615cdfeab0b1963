package transcript

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/agentbus/agentbus/pkg/events"
)

// Direction of a transcript row (the wire type of pkg/events).
type Direction = events.TranscriptDirection

// The two directions.
const (
	Inbound  = events.TranscriptInbound
	Outbound = events.TranscriptOutbound
)

// Row is one im_transcripts row (seed ADR D4): the wire type events.TranscriptRow, which the
// transcript search returns as it is stored.
type Row = events.TranscriptRow

// Scene identifies the rows a search looks at.
type Scene struct {
	Platform string
	BotID    string
	SceneID  string
}

func (s Scene) key() []byte {
	// \x1f cannot appear in ids we accept (validated), so the key is unambiguous.
	return []byte(s.Platform + "\x1f" + s.BotID + "\x1f" + s.SceneID)
}

func (s Scene) validate() error {
	for _, f := range [...]struct{ name, v string }{{"platform", s.Platform}, {"bot_id", s.BotID}, {"scene_id", s.SceneID}} {
		if f.v == "" {
			return fmt.Errorf("%s is empty", f.name)
		}
		if strings.ContainsRune(f.v, 0x1f) {
			return fmt.Errorf("%s contains a unit separator", f.name)
		}
	}
	return nil
}

// Query is a keyword search within one scene.
type Query struct {
	Scene
	// Keyword is matched as a case-insensitive substring of the body; "" returns the latest rows.
	Keyword string
	// Limit caps the rows returned (newest first). Zero means DefaultLimit; at most MaxLimit.
	Limit int
}

const (
	DefaultLimit = 20
	MaxLimit     = 1000
)

// Retention says which rows Prune deletes. Zero fields are not applied.
type Retention struct {
	// MaxRowsPerScene keeps only the newest rows of each scene.
	MaxRowsPerScene int
	// MaxAge deletes rows whose Time is older than now - MaxAge.
	MaxAge time.Duration
}

// Options for Open.
type Options struct {
	// Timeout waits this long for another process's file lock (default 1s).
	Timeout time.Duration
	// NoSync skips fsync after each write transaction (tests and benchmarks only).
	NoSync bool
}

// DB is an open transcript archive. It is safe for concurrent use.
type DB struct {
	bolt   *bolt.DB
	closed atomic.Bool
}

var (
	bucketScenes = []byte("scenes")
	bucketRows   = []byte("r")
	bucketIDs    = []byte("i")
	bucketSegs   = []byte("s")
	keyCount     = []byte("n")
)

// Open opens (creating if needed) the archive at path.
func Open(path string, opts *Options) (*DB, error) {
	o := Options{Timeout: time.Second}
	if opts != nil {
		o = *opts
		if o.Timeout == 0 {
			o.Timeout = time.Second
		}
	}
	b, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: o.Timeout, NoSync: o.NoSync, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return nil, fmt.Errorf("open transcripts %s: %w", path, err)
	}
	if err := b.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucketScenes)
		return err
	}); err != nil {
		b.Close()
		return nil, fmt.Errorf("init transcripts %s: %w", path, err)
	}
	return &DB{bolt: b}, nil
}

// Close closes the file. Further calls return ErrClosed.
func (db *DB) Close() error {
	if db.closed.Swap(true) {
		return nil
	}
	return db.bolt.Close()
}

// Path is the file's path.
func (db *DB) Path() string { return db.bolt.Path() }

func validateRow(r *Row) error {
	if err := (Scene{r.Platform, r.BotID, r.SceneID}).validate(); err != nil {
		return err
	}
	if r.MessageID == "" {
		return errors.New("message_id is empty")
	}
	if r.Direction != Inbound && r.Direction != Outbound {
		return fmt.Errorf("direction %q: want inbound or outbound", r.Direction)
	}
	if r.MediaJSON != "" && !json.Valid([]byte(r.MediaJSON)) {
		return errors.New("media_json is not valid JSON")
	}
	return nil
}

func idKey(d Direction, messageID string) []byte {
	b := make([]byte, 1+len(messageID))
	b[0] = 'i'
	if d == Outbound {
		b[0] = 'o'
	}
	copy(b[1:], messageID)
	return b
}

func rowKey(t int64, id uint64) []byte {
	if t < 0 {
		t = 0
	}
	k := make([]byte, keyLen)
	binary.BigEndian.PutUint64(k[0:8], uint64(t))
	binary.BigEndian.PutUint64(k[8:16], id)
	return k
}

// searchText is what a row's body is matched against.
func searchText(body string) []byte {
	return []byte(strings.ReplaceAll(strings.ToLower(body), "\x00", " "))
}

// Insert stores rows in one durable write transaction and returns how many were new. A row whose
// (message_id, direction) is already stored is skipped, so redelivered messages are stored once.
// An invalid row fails the whole call with ErrInvalidRow and nothing is written.
func (db *DB) Insert(ctx context.Context, rows ...Row) (int, error) {
	if db.closed.Load() {
		return 0, ErrClosed
	}
	for i := range rows {
		if err := validateRow(&rows[i]); err != nil {
			return 0, fmt.Errorf("%w: row %d (message %q): %v", ErrInvalidRow, i, rows[i].MessageID, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	inserted := 0
	err := db.bolt.Update(func(tx *bolt.Tx) error {
		inserted = 0
		scenes := tx.Bucket(bucketScenes)
		// Group by scene preserving order, so each scene's newest segment is rebuilt once.
		type group struct {
			scene *bolt.Bucket
			rows  []*Row
		}
		var order []string
		groups := map[string]*group{}
		for i := range rows {
			sk := string(Scene{rows[i].Platform, rows[i].BotID, rows[i].SceneID}.key())
			g := groups[sk]
			if g == nil {
				g = &group{}
				groups[sk] = g
				order = append(order, sk)
			}
			g.rows = append(g.rows, &rows[i])
		}
		for _, sk := range order {
			n, err := insertScene(scenes, []byte(sk), groups[sk].rows)
			if err != nil {
				return err
			}
			inserted += n
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("insert transcripts: %w", err)
	}
	return inserted, nil
}

func insertScene(scenes *bolt.Bucket, sceneKey []byte, rows []*Row) (int, error) {
	sb, err := scenes.CreateBucketIfNotExists(sceneKey)
	if err != nil {
		return 0, err
	}
	rb, err := sb.CreateBucketIfNotExists(bucketRows)
	if err != nil {
		return 0, err
	}
	ib, err := sb.CreateBucketIfNotExists(bucketIDs)
	if err != nil {
		return 0, err
	}
	gb, err := sb.CreateBucketIfNotExists(bucketSegs)
	if err != nil {
		return 0, err
	}
	// The newest segment, if it has room, is extended; otherwise new segments are started.
	var seg segment
	var segNo uint64
	if k, v := gb.Cursor().Last(); k != nil && segView(v).valid() && segView(v).n() < segmentMaxRows && segView(v).textBytes() < segmentMaxBytes {
		seg = segView(v).decode()
		segNo = binary.BigEndian.Uint64(k)
	} else {
		segNo, _ = gb.NextSequence()
	}
	flush := func() error {
		if len(seg.keys) == 0 {
			return nil
		}
		var k [8]byte
		binary.BigEndian.PutUint64(k[:], segNo)
		return gb.Put(k[:], seg.encode())
	}
	n := 0
	for _, in := range rows {
		r := *in // do not write the assigned id into the caller's slice
		ik := idKey(r.Direction, r.MessageID)
		if ib.Get(ik) != nil {
			continue
		}
		id, err := sb.NextSequence()
		if err != nil {
			return 0, err
		}
		r.ID = id
		val, err := json.Marshal(&r)
		if err != nil {
			return 0, err
		}
		rk := rowKey(r.Time, id)
		if err := rb.Put(rk, val); err != nil {
			return 0, err
		}
		if err := ib.Put(ik, rk); err != nil {
			return 0, err
		}
		if len(seg.keys) >= segmentMaxRows || seg.size() >= segmentMaxBytes {
			if err := flush(); err != nil {
				return 0, err
			}
			seg = segment{}
			segNo, _ = gb.NextSequence()
		}
		seg.keys = append(seg.keys, rk)
		seg.text = append(seg.text, searchText(r.Body))
		n++
	}
	if n == 0 {
		return 0, nil
	}
	if err := flush(); err != nil {
		return 0, err
	}
	return n, addCount(sb, int64(n))
}

func addCount(sb *bolt.Bucket, d int64) error {
	var c int64
	if v := sb.Get(keyCount); len(v) == 8 {
		c = int64(binary.BigEndian.Uint64(v))
	}
	c += d
	if c < 0 {
		c = 0
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(c))
	return sb.Put(keyCount, b[:])
}

// Count returns the number of rows stored for a scene.
func (db *DB) Count(ctx context.Context, s Scene) (int, error) {
	if db.closed.Load() {
		return 0, ErrClosed
	}
	if err := s.validate(); err != nil {
		return 0, fmt.Errorf("%w: %v", ErrInvalidQuery, err)
	}
	n := 0
	err := db.bolt.View(func(tx *bolt.Tx) error {
		if sb := tx.Bucket(bucketScenes).Bucket(s.key()); sb != nil {
			if v := sb.Get(keyCount); len(v) == 8 {
				n = int(binary.BigEndian.Uint64(v))
			}
		}
		return nil
	})
	return n, err
}

// Search returns the scene's rows whose body contains q.Keyword (case-insensitive), newest first
// (by Time, then insert order), at most q.Limit. An empty keyword returns the latest rows.
func (db *DB) Search(ctx context.Context, q Query) ([]Row, error) {
	if db.closed.Load() {
		return nil, ErrClosed
	}
	if err := q.Scene.validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidQuery, err)
	}
	limit := q.Limit
	switch {
	case limit < 0:
		return nil, fmt.Errorf("%w: negative limit %d", ErrInvalidQuery, limit)
	case limit == 0:
		limit = DefaultLimit
	case limit > MaxLimit:
		limit = MaxLimit
	}
	kw := strings.TrimSpace(q.Keyword)
	if strings.ContainsRune(kw, 0) {
		return nil, fmt.Errorf("%w: keyword contains NUL", ErrInvalidQuery)
	}
	var out []Row
	err := db.bolt.View(func(tx *bolt.Tx) error {
		sb := tx.Bucket(bucketScenes).Bucket(q.Scene.key())
		if sb == nil {
			return nil
		}
		rb := sb.Bucket(bucketRows)
		if rb == nil {
			return nil
		}
		var keys [][]byte
		if kw == "" {
			c := rb.Cursor()
			for k, v := c.Last(); k != nil && len(out) < limit; k, v = c.Prev() {
				var r Row
				if err := json.Unmarshal(v, &r); err != nil {
					return fmt.Errorf("decode row %x: %w", k, err)
				}
				out = append(out, r)
			}
			return nil
		}
		keys = matchKeys(sb.Bucket(bucketSegs), searchText(kw), limit, ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		for _, k := range keys {
			v := rb.Get(k)
			if v == nil {
				continue // pruned after the segment was written
			}
			var r Row
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("decode row %x: %w", k, err)
			}
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("search transcripts: %w", err)
	}
	return out, nil
}

// matchKeys returns the newest (largest) row keys, at most limit, whose text contains kw.
func matchKeys(gb *bolt.Bucket, kw []byte, limit int, ctx context.Context) [][]byte {
	if gb == nil {
		return nil
	}
	f := newFinder(kw)
	var cand [][]byte
	sortTrim := func() {
		sort.Slice(cand, func(i, j int) bool { return bytes.Compare(cand[i], cand[j]) > 0 })
		if len(cand) > limit {
			cand = cand[:limit]
		}
	}
	c := gb.Cursor()
	visited := 0
	for k, v := c.Last(); k != nil; k, v = c.Prev() {
		s := segView(v)
		if !s.valid() {
			continue
		}
		// Segments are in insert order, not strictly time order: skip (rather than stop at) a
		// segment that cannot beat the current limit-th candidate.
		if len(cand) >= limit && bytes.Compare(s.maxKey(), cand[len(cand)-1]) < 0 {
			continue
		}
		before := len(cand)
		cand = s.match(f, cand)
		if len(cand) > before {
			sortTrim()
		}
		if visited++; visited&63 == 0 && ctx.Err() != nil {
			return nil
		}
	}
	sortTrim()
	// Keys point into the read-only mmap; copy them before the transaction ends.
	out := make([][]byte, len(cand))
	for i, k := range cand {
		out[i] = append([]byte(nil), k...)
	}
	return out
}

// Prune deletes rows per the retention and returns how many it deleted. now is the reference
// time for MaxAge (time.Now() in production; tests pass a fixed time). A pruned message's
// (message_id, direction) is forgotten too, so a later redelivery would store it again.
func (db *DB) Prune(ctx context.Context, ret Retention, now time.Time) (int, error) {
	if db.closed.Load() {
		return 0, ErrClosed
	}
	if ret.MaxRowsPerScene < 0 || ret.MaxAge < 0 {
		return 0, fmt.Errorf("prune transcripts: negative retention %+v", ret)
	}
	if ret.MaxRowsPerScene == 0 && ret.MaxAge == 0 {
		return 0, nil
	}
	var cutoff int64 = -1
	if ret.MaxAge > 0 {
		cutoff = now.Add(-ret.MaxAge).UnixMilli()
	}
	deleted := 0
	err := db.bolt.Update(func(tx *bolt.Tx) error {
		deleted = 0
		scenes := tx.Bucket(bucketScenes)
		var names [][]byte
		if err := scenes.ForEachBucket(func(k []byte) error {
			names = append(names, append([]byte(nil), k...))
			return nil
		}); err != nil {
			return err
		}
		for _, name := range names {
			if err := ctx.Err(); err != nil {
				return err
			}
			n, err := pruneScene(scenes.Bucket(name), ret.MaxRowsPerScene, cutoff)
			if err != nil {
				return fmt.Errorf("scene %q: %w", name, err)
			}
			deleted += n
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("prune transcripts: %w", err)
	}
	return deleted, nil
}

func pruneScene(sb *bolt.Bucket, maxRows int, cutoff int64) (int, error) {
	rb, ib, gb := sb.Bucket(bucketRows), sb.Bucket(bucketIDs), sb.Bucket(bucketSegs)
	if rb == nil || ib == nil || gb == nil {
		return 0, nil
	}
	count := 0
	if v := sb.Get(keyCount); len(v) == 8 {
		count = int(binary.BigEndian.Uint64(v))
	}
	// Both rules delete a prefix of the time-ordered row keys; collect it first (deleting under
	// a cursor skips keys in bbolt).
	var del [][]byte
	var ids [][]byte
	c := rb.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		old := cutoff >= 0 && int64(binary.BigEndian.Uint64(k[:8])) < cutoff
		over := maxRows > 0 && count-len(del) > maxRows
		if !old && !over {
			break
		}
		var r Row
		if err := json.Unmarshal(v, &r); err == nil {
			ids = append(ids, idKey(r.Direction, r.MessageID))
		}
		del = append(del, append([]byte(nil), k...))
	}
	if len(del) == 0 {
		return 0, nil
	}
	for _, k := range del {
		if err := rb.Delete(k); err != nil {
			return 0, err
		}
	}
	for _, k := range ids {
		if err := ib.Delete(k); err != nil {
			return 0, err
		}
	}
	last := del[len(del)-1]
	// Rewrite every segment holding a deleted key (key <= last).
	type upd struct {
		k []byte
		v []byte
	}
	var updates []upd
	gc := gb.Cursor()
	for k, v := gc.First(); k != nil; k, v = gc.Next() {
		s := segView(v)
		if !s.valid() || bytes.Compare(s.minKey(), last) > 0 {
			continue
		}
		old := s.decode()
		var kept segment
		for i, rk := range old.keys {
			if bytes.Compare(rk, last) > 0 {
				kept.keys = append(kept.keys, rk)
				kept.text = append(kept.text, old.text[i])
			}
		}
		var nv []byte
		if len(kept.keys) > 0 {
			nv = kept.encode()
		}
		updates = append(updates, upd{append([]byte(nil), k...), nv})
	}
	for _, u := range updates {
		var err error
		if u.v == nil {
			err = gb.Delete(u.k)
		} else {
			err = gb.Put(u.k, u.v)
		}
		if err != nil {
			return 0, err
		}
	}
	return len(del), addCount(sb, -int64(len(del)))
}
