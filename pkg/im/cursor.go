package im

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/internal/jsconflict"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil"
)

// Backfill cursors. A platform connection that moves between ingest replicas (pkg/im.Hold)
// drops what the platform sent while nobody held it, unless the platform replays it (a
// Telegram long poll does, a Discord gateway or a OneBot WebSocket does not). Such an adapter
// notes, per scene, the last message it handled (Cursors.Note, memory only) and flushes the
// notes to KV every second or so (Cursors.Run: one write per bot per flush, however many
// messages came in). The next holder loads them (Cursors.Load) and asks the platform's
// history API for what came after each one, ingesting it with the platform message id as the
// dedupe id, so a message that also arrives live is published once.

// DefaultCursorFlush is how often Cursors.Run writes the notes of a busy connection.
const DefaultCursorFlush = time.Second

// CursorMaxAge is how long a scene without messages keeps its cursor: IM_IN's default
// retention. A scene silent for longer is not backfilled after a takeover.
const CursorMaxAge = 30 * 24 * time.Hour

// CursorMaxScenes caps the scenes one bot's cursor record keeps (the most recently active).
const CursorMaxScenes = 2000

// Cursor is the last handled message of one scene.
type Cursor struct {
	// Scope is the scene's session scope (private, group, channel).
	Scope string `json:"scope,omitempty"`
	// ID is the platform message id.
	ID string `json:"id"`
	// Time is the message's time (Unix ms, 0 = unknown); cursors are ordered by Time, then ID.
	Time int64 `json:"t,omitempty"`
	// Seen is when the cursor was noted (Unix ms); it ages the cursor out.
	Seen int64 `json:"seen"`
}

// After reports whether c is a later message than o (by Time, then by ID as a number when
// both are decimal strings of different length, else lexically).
func (c Cursor) After(o Cursor) bool {
	if c.Time != o.Time {
		return c.Time > o.Time
	}
	return IDAfter(c.ID, o.ID)
}

// IDAfter orders two message ids: decimal ids (Discord snowflakes, OneBot integers) by value,
// others lexically.
func IDAfter(a, b string) bool {
	if isDigits(a) && isDigits(b) && len(a) != len(b) {
		return len(a) > len(b)
	}
	return a > b
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// CursorKey is the leases-bucket key of the cursors of bot on platform:
// "im-cursor.<platform>.<bot>" (no TTL: only ever overwritten by the holder).
func CursorKey(platform, bot string) string {
	return "im-cursor." + events.EncodeToken(platform) + "." + events.EncodeToken(bot)
}

// Cursors is one bot's backfill cursors: notes in memory, flushed to one KV entry. Safe for
// concurrent use. A nil *Cursors notes nothing and loads nothing.
type Cursors struct {
	kv  jetstream.KeyValue
	key string
	log *slog.Logger

	mu    sync.Mutex
	notes map[string]Cursor // scene -> cursor, all known
	dirty bool
}

// OpenCursors binds the cursors of bot on platform in KV leases.
func OpenCursors(ctx context.Context, js jetstream.JetStream, platform, bot string, log *slog.Logger) (*Cursors, error) {
	if js == nil {
		return nil, errors.New("im: OpenCursors needs JetStream")
	}
	kv, err := natsutil.KeyValue(ctx, js, events.BucketLeases)
	if err != nil {
		return nil, fmt.Errorf("im: open KV %s: %w", events.BucketLeases, err)
	}
	if log == nil {
		log = slog.Default()
	}
	return &Cursors{kv: kv, key: CursorKey(platform, bot), log: log, notes: map[string]Cursor{}}, nil
}

// Note records that c is the last handled message of scene, unless a later one is noted
// already. It writes nothing; Run or Flush does.
func (c *Cursors) Note(scene string, cur Cursor) {
	if c == nil || scene == "" || cur.ID == "" {
		return
	}
	cur.Seen = time.Now().UnixMilli()
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.notes[scene]; ok && !cur.After(old) && old.Scope == cur.Scope {
		return
	}
	c.notes[scene] = cur
	c.dirty = true
}

// Load returns every scene's cursor: the stored ones merged with this replica's notes (the
// later of the two per scene). A missing record is an empty map, not an error.
func (c *Cursors) Load(ctx context.Context) (map[string]Cursor, error) {
	if c == nil {
		return map[string]Cursor{}, nil
	}
	stored, _, err := c.read(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for scene, cur := range stored {
		if old, ok := c.notes[scene]; !ok || cur.After(old) {
			c.notes[scene] = cur
		}
	}
	return maps.Clone(c.notes), nil
}

func (c *Cursors) read(ctx context.Context) (map[string]Cursor, uint64, error) {
	e, err := c.kv.Get(ctx, c.key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return map[string]Cursor{}, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("im: read cursors %s: %w", c.key, err)
	}
	m := map[string]Cursor{}
	if len(e.Value()) > 0 {
		if err := json.Unmarshal(e.Value(), &m); err != nil {
			// A record that does not parse is replaced by the next flush.
			c.log.Warn("im: cursor record does not parse; starting afresh", "key", c.key, "err", err)
			m = map[string]Cursor{}
		}
	}
	return m, e.Revision(), nil
}

// Flush writes the notes, merged (later wins per scene) with what is stored, by
// compare-and-set, so a replica that lost the connection a moment ago cannot move a scene's
// cursor back. Scenes silent for CursorMaxAge are dropped; at most CursorMaxScenes are kept.
func (c *Cursors) Flush(ctx context.Context) error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	if !c.dirty {
		c.mu.Unlock()
		return nil
	}
	c.dirty = false
	notes := maps.Clone(c.notes)
	c.mu.Unlock()
	var err error
	for range 5 {
		var stored map[string]Cursor
		var rev uint64
		if stored, rev, err = c.read(ctx); err != nil {
			break
		}
		for scene, cur := range notes {
			if old, ok := stored[scene]; !ok || cur.After(old) {
				stored[scene] = cur
			}
		}
		b, _ := json.Marshal(prune(stored, time.Now()))
		if rev == 0 {
			_, err = c.kv.Create(ctx, c.key, b)
		} else {
			_, err = c.kv.Update(ctx, c.key, b, rev)
		}
		if err == nil || !jsconflict.Is(err) {
			break
		}
	}
	if err != nil {
		c.mu.Lock()
		c.dirty = true // try again on the next flush
		c.mu.Unlock()
		return fmt.Errorf("im: write cursors %s: %w", c.key, err)
	}
	return nil
}

func prune(m map[string]Cursor, now time.Time) map[string]Cursor {
	oldest := now.Add(-CursorMaxAge).UnixMilli()
	for scene, cur := range m {
		if cur.Seen < oldest {
			delete(m, scene)
		}
	}
	if len(m) <= CursorMaxScenes {
		return m
	}
	scenes := slices.Collect(maps.Keys(m))
	slices.SortFunc(scenes, func(a, b string) int { return cmp.Compare(m[b].Seen, m[a].Seen) })
	for _, s := range scenes[CursorMaxScenes:] {
		delete(m, s)
	}
	return m
}

// Run flushes the notes every interval (<= 0: DefaultCursorFlush) until ctx ends, then once
// more (with a short timeout of its own), so a clean stop leaves every note stored.
func (c *Cursors) Run(ctx context.Context, interval time.Duration) {
	if c == nil {
		<-ctx.Done()
		return
	}
	if interval <= 0 {
		interval = DefaultCursorFlush
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
			if err := c.Flush(fctx); err != nil {
				c.log.Debug("im: final cursor flush", "err", err)
			}
			cancel()
			return
		case <-t.C:
			if err := c.Flush(ctx); err != nil && ctx.Err() == nil {
				c.log.Warn("im: flush cursors", "err", err)
			}
		}
	}
}

// ScenesByRecency returns the scenes of m, most recently seen first.
func ScenesByRecency(m map[string]Cursor) []string {
	scenes := slices.Collect(maps.Keys(m))
	slices.SortFunc(scenes, func(a, b string) int { return cmp.Compare(m[b].Seen, m[a].Seen) })
	return scenes
}
