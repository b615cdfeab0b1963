package toolworker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil"
)

// maxCachedProfiles bounds ProfileCache: past it the cache gives up and every Summary reads
// the bucket, so a huge user base costs round trips rather than memory.
const maxCachedProfiles = 100_000

// ProfileCache serves the profile summaries that go into every system prompt from memory. A
// watch on the bucket keeps it current: profiles change rarely and prompts are built every turn,
// so a KV read per turn would mostly return what the last one did. A change is in the cache as
// soon as the watch delivers it, normally within milliseconds of the write and so before the
// user's next message. Until the watch has caught up, while it is down, and once the bucket
// holds more than maxCachedProfiles profiles, Summary reads the bucket instead.
type ProfileCache struct {
	store *ProfileStore
	log   *slog.Logger

	mu        sync.RWMutex
	ready     bool
	summaries map[string]string // KV key -> FormatSummary of the stored profile
	// unreadable holds keys whose stored value does not decode: Summary reads them, so the
	// caller gets the store's error rather than an empty profile.
	unreadable map[string]bool
}

// NewProfileCache opens the profiles bucket; Run follows it.
func NewProfileCache(ctx context.Context, js jetstream.JetStream, log *slog.Logger) (*ProfileCache, error) {
	store, err := NewProfileStore(ctx, js)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	return &ProfileCache{store: store, log: log}, nil
}

// Run follows the bucket until ctx ends, rewatching a second after a watch fails; it returns
// when ctx ends. The caller runs it on a goroutine it owns and waits for it.
func (c *ProfileCache) Run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := c.follow(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("profile cache: watch ended; reading profiles from the bucket meanwhile", "err", err)
		}
		c.reset()
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (c *ProfileCache) reset() {
	c.mu.Lock()
	c.ready, c.summaries, c.unreadable = false, nil, nil
	c.mu.Unlock()
}

// follow applies the bucket's current values, then every change, until the watch ends.
func (c *ProfileCache) follow(ctx context.Context) error {
	w, err := c.store.kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch %s: %w", events.BucketProfiles, err)
	}
	defer func() { _ = w.Stop() }()
	loaded, bad := map[string]string{}, map[string]bool{}
	for {
		e, ok := natsutil.NextUpdate(ctx, w)
		if !ok {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("watch %s: updates closed", events.BucketProfiles)
		}
		if e == nil { // the current values are in: serve from memory from now on
			c.mu.Lock()
			c.summaries, c.unreadable, c.ready = loaded, bad, len(loaded) <= maxCachedProfiles
			c.mu.Unlock()
			loaded, bad = nil, nil
			continue
		}
		s, ok := "", true
		if e.Operation() == jetstream.KeyValuePut {
			var p map[string]string
			if err := json.Unmarshal(e.Value(), &p); err != nil {
				c.log.Warn("profile cache: malformed profile; reading it from the bucket", "key", e.Key(), "err", err)
				ok = false
			}
			s = FormatSummary(p)
		}
		if loaded != nil {
			loaded[e.Key()], bad[e.Key()] = s, !ok
			continue
		}
		c.mu.Lock()
		if c.ready {
			c.summaries[e.Key()], c.unreadable[e.Key()] = s, !ok
			c.ready = len(c.summaries) <= maxCachedProfiles
		}
		c.mu.Unlock()
	}
}

// Summary is ProfileStore.Summary, from memory when the cache is current.
func (c *ProfileCache) Summary(ctx context.Context, platform, userID string) (string, error) {
	if err := checkUser(platform, userID); err != nil {
		return "", err
	}
	key := ProfileKey(platform, userID)
	c.mu.RLock()
	s, ready := c.summaries[key], c.ready && !c.unreadable[key]
	c.mu.RUnlock()
	if ready {
		return s, nil
	}
	return c.store.Summary(ctx, platform, userID)
}
