package models

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

func TestCaches(t *testing.T) {
	ns := natstest.New(t, natstest.WithMemoryStorage())
	kv, err := OpenKVCache(context.Background(), ns.JS)
	if err != nil {
		t.Fatal(err)
	}
	caches := map[string]Cache{
		"file": NewFileCache(t.TempDir() + "/nested"),
		"kv":   kv,
	}
	for name, c := range caches {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			if _, err := c.Load(ctx, "router.main"); !errors.Is(err, ErrCacheMiss) {
				t.Fatalf("empty cache: %v", err)
			}
			at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
			e := CacheEntry{Alias: "router.main", Models: []llm.Model{InferCapabilities("gpt-4o"), {ID: "x", ContextWindow: 8192}}, FetchedAt: at}
			if err := c.Store(ctx, e); err != nil {
				t.Fatal(err)
			}
			if err := c.Store(ctx, CacheEntry{Alias: "other", Models: []llm.Model{{ID: "y"}}}); err != nil {
				t.Fatal(err)
			}
			got, err := c.Load(ctx, "router.main")
			if err != nil {
				t.Fatal(err)
			}
			if !got.FetchedAt.Equal(at) || len(got.Models) != 2 || !got.Models[0].SupportsImages() || got.Models[1].ContextWindow != 8192 {
				t.Fatalf("round trip: %+v", got)
			}
		})
	}
	// The KV key is the token-encoded alias.
	if _, err := kv.kv.Get(context.Background(), events.EncodeToken("router.main")); err != nil {
		t.Fatalf("kv key: %v", err)
	}
}

func TestFileCacheCorrupt(t *testing.T) {
	dir := t.TempDir()
	c := NewFileCache(dir)
	if err := os.WriteFile(c.Path(), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Load(context.Background(), "a"); err == nil || errors.Is(err, ErrCacheMiss) {
		t.Fatalf("corrupt file: %v", err)
	}
	if err := c.Store(context.Background(), CacheEntry{Alias: "a", Models: []llm.Model{{ID: "m"}}}); err != nil {
		t.Fatal(err)
	}
	if e, err := c.Load(context.Background(), "a"); err != nil || e.Models[0].ID != "m" {
		t.Fatalf("after rewrite: %+v %v", e, err)
	}
}

func TestManager(t *testing.T) {
	var calls atomic.Int32
	fail := atomic.Bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if fail.Load() {
			w.WriteHeader(503)
			return
		}
		w.Write(fixture(t, "openai_models.json"))
	}))
	defer srv.Close()
	providers := map[string]config.Provider{
		"router":  {API: llm.APIOpenAICompletions, BaseURL: srv.URL + "/v1"},
		"pinned":  {API: llm.APIOpenAICompletions, BaseURL: srv.URL + "/v1", Models: []config.ModelEntry{{ID: "only-this"}}},
		"down":    {API: llm.APIOllamaChat, Host: "http://127.0.0.1:1"},
		"painter": {Driver: "zhipu"},
	}
	reg, err := NewRegistry(providers)
	if err != nil {
		t.Fatal(err)
	}
	cache := NewFileCache(t.TempDir())
	// The cache already knows "down" from an earlier run.
	if err := cache.Store(context.Background(), CacheEntry{Alias: "down", Models: []llm.Model{{ID: "llama3.2:3b"}, {ID: "qwen3:14b"}}, FetchedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(&strings.Builder{}, nil))
	m := NewManager(reg, providers, ManagerOptions{Cache: cache, Timeout: 2 * time.Second, Log: quiet})
	m.Start(context.Background())
	// Cache restored synchronously, ranked best first.
	m.Wait()
	defer m.Stop(context.Background())

	if got, _ := reg.Models("down"); !slices.Equal(ids(got), []string{"qwen3:14b", "llama3.2:3b"}) {
		t.Errorf("down (from cache) = %v", ids(got))
	}
	if got, _ := reg.Models("router"); !slices.Equal(ids(got), []string{"o3", "gpt-4o", "gpt-4o-mini"}) {
		t.Errorf("router = %v", ids(got))
	}
	if got, _ := reg.Models("pinned"); !slices.Equal(ids(got), []string{"only-this"}) {
		t.Errorf("pinned = %v", ids(got))
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("discovery requests = %d, want 1 (allowlisted provider skipped)", n)
	}
	st := map[string]ProviderStatus{}
	for _, s := range m.Status() {
		st[s.Alias] = s
	}
	if st["router"].Source != SourceDiscovered || st["router"].Models != 3 || st["router"].Err != "" {
		t.Errorf("router status %+v", st["router"])
	}
	if st["pinned"].Source != SourceAllowlist {
		t.Errorf("pinned status %+v", st["pinned"])
	}
	if st["down"].Source != SourceCache || !strings.Contains(st["down"].Err, "refused") {
		t.Errorf("down status %+v", st["down"])
	}
	if _, ok := st["painter"]; ok {
		t.Errorf("image driver listed: %+v", st)
	}
	if e, err := cache.Load(context.Background(), "router"); err != nil || len(e.Models) != 3 {
		t.Errorf("router not cached: %+v %v", e, err)
	}
	if m, err := reg.GetModel("router", ""); err != nil || m.ID != "o3" {
		t.Errorf("default model = %v, %v (want the best tier)", m, err)
	}

	// A failing refresh keeps the previous list.
	fail.Store(true)
	if err := m.Refresh(context.Background(), "router"); !errors.Is(err, ErrDiscovery) {
		t.Fatalf("refresh: %v", err)
	}
	if got, _ := reg.Models("router"); len(got) != 3 {
		t.Errorf("list lost after failed refresh: %v", ids(got))
	}

	// A fresh cache entry skips the start-up request.
	calls.Store(0)
	reg2, _ := NewRegistry(providers)
	m2 := NewManager(reg2, map[string]config.Provider{"router": providers["router"]}, ManagerOptions{Cache: cache, FreshFor: time.Hour, Log: quiet})
	m2.Start(context.Background())
	m2.Wait()
	if calls.Load() != 0 {
		t.Errorf("fresh cache still refreshed")
	}
	if got, _ := reg2.Models("router"); len(got) != 3 {
		t.Errorf("fresh cache not applied: %v", ids(got))
	}
}
