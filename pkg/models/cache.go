package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/natsutil"
)

// CacheFileName is the file cache's name inside the data directory (the seed's
// data/model-registry-cache.json).
const CacheFileName = "model-registry-cache.json"

// CacheEntry is what discovery found for one provider alias, and when.
type CacheEntry struct {
	Alias     string      `json:"alias"`
	Models    []llm.Model `json:"models"`
	FetchedAt time.Time   `json:"fetchedAt"`
}

// Cache keeps discovery results across restarts (and, on the bus, across workers).
type Cache interface {
	// Load returns the entry of an alias, or an error wrapping ErrCacheMiss.
	Load(ctx context.Context, alias string) (CacheEntry, error)
	// Store replaces the entry of e.Alias.
	Store(ctx context.Context, e CacheEntry) error
}

// FileCache is a Cache in one JSON file ({"<alias>": CacheEntry, ...}), written atomically
// (temporary file + rename). It is safe for concurrent use within a process; two processes
// sharing a file may lose each other's last update, which only costs a re-discovery.
type FileCache struct {
	path string
	mu   sync.Mutex
}

// NewFileCache returns a cache at <dataDir>/model-registry-cache.json.
func NewFileCache(dataDir string) *FileCache {
	return &FileCache{path: filepath.Join(dataDir, CacheFileName)}
}

// Path is the cache file.
func (c *FileCache) Path() string { return c.path }

func (c *FileCache) read() (map[string]CacheEntry, error) {
	raw, err := os.ReadFile(c.path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]CacheEntry{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read model cache: %w", err)
	}
	all := map[string]CacheEntry{}
	if err := json.Unmarshal(raw, &all); err != nil {
		return nil, fmt.Errorf("model cache %s is corrupt: %w", c.path, err)
	}
	return all, nil
}

// Load implements Cache.
func (c *FileCache) Load(_ context.Context, alias string) (CacheEntry, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	all, err := c.read()
	if err != nil {
		return CacheEntry{}, err
	}
	e, ok := all[alias]
	if !ok {
		return CacheEntry{}, fmt.Errorf("%w: %s", ErrCacheMiss, alias)
	}
	return e, nil
}

// Store implements Cache. A corrupt file is replaced rather than failing forever.
func (c *FileCache) Store(_ context.Context, e CacheEntry) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	all, err := c.read()
	if err != nil {
		all = map[string]CacheEntry{}
	}
	all[e.Alias] = e
	raw, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(c.path), 0o755); err != nil {
		return fmt.Errorf("write model cache: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(c.path), ".model-cache-*")
	if err != nil {
		return fmt.Errorf("write model cache: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(raw); err != nil {
		tmp.Close()
		return fmt.Errorf("write model cache: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write model cache: %w", err)
	}
	if err := os.Rename(tmp.Name(), c.path); err != nil {
		return fmt.Errorf("write model cache: %w", err)
	}
	return nil
}

// KVCache is a Cache in KV models (key = events.EncodeToken(alias)), shared by every worker on
// the bus. Entries expire with the bucket's TTL (events.Spec.ModelsTTL), so a stale listing
// is rediscovered eventually even when no worker refreshes it.
type KVCache struct {
	kv jetstream.KeyValue
}

// NewKVCache wraps a KV bucket (normally KV models).
func NewKVCache(kv jetstream.KeyValue) *KVCache { return &KVCache{kv: kv} }

// OpenKVCache opens the provisioned KV models bucket.
func OpenKVCache(ctx context.Context, js jetstream.JetStream) (*KVCache, error) {
	kv, err := natsutil.KeyValue(ctx, js, events.BucketModels)
	if err != nil {
		return nil, fmt.Errorf("open KV %s: %w", events.BucketModels, err)
	}
	return NewKVCache(kv), nil
}

// Load implements Cache.
func (c *KVCache) Load(ctx context.Context, alias string) (CacheEntry, error) {
	ent, err := c.kv.Get(ctx, events.EncodeToken(alias))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return CacheEntry{}, fmt.Errorf("%w: %s", ErrCacheMiss, alias)
	}
	if err != nil {
		return CacheEntry{}, fmt.Errorf("load model cache %s: %w", alias, err)
	}
	var e CacheEntry
	if err := json.Unmarshal(ent.Value(), &e); err != nil {
		return CacheEntry{}, fmt.Errorf("model cache %s is corrupt: %w", alias, err)
	}
	return e, nil
}

// Store implements Cache.
func (c *KVCache) Store(ctx context.Context, e CacheEntry) error {
	raw, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if _, err := c.kv.Put(ctx, events.EncodeToken(e.Alias), raw); err != nil {
		return fmt.Errorf("store model cache %s: %w", e.Alias, err)
	}
	return nil
}
