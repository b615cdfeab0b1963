package tasks

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
	"github.com/agentbus/agentbus/pkg/toolbus"
	"github.com/agentbus/agentbus/pkg/tools"
)

// backgroundCatalog is a catalogue with orchestration tools, the reminder tool and workers'
// tools.
func backgroundCatalog(t *testing.T) *toolbus.Catalog {
	t.Helper()
	ctx := context.Background()
	ns := natstest.New(t, natstest.WithMemoryStorage())
	kv, err := ns.JS.KeyValue(ctx, events.BucketTools)
	if err != nil {
		t.Fatal(err)
	}
	params := []byte(`{"type":"object","properties":{"prompt":{"type":"string"}}}`)
	for _, e := range []struct{ name, desc string }{
		{"tool_search", "find tools"}, {"run_deferred_task", "run in background"}, {"spawn_task", "subagent"},
		{"ask_user", "ask"}, {"schedule_followup", "reminders"}, {"user_profile", "profile"},
		{"generate_image", "Generate an image from a text prompt"}, {"web_fetch", "Fetch a web page"},
		{"admin_only", "restart the image server"},
	} {
		te := events.ToolEntry{Name: e.name, Description: e.desc, Parameters: params, UpdatedAt: 1}
		if e.name == "admin_only" {
			te.Roles = []string{"master"}
		}
		putTool(t, kv, te)
	}
	c, err := toolbus.NewCatalog(ctx, ns.JS)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

func putTool(t *testing.T, kv jetstream.KeyValue, e events.ToolEntry) {
	t.Helper()
	b, err := events.MarshalToolEntry(e)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), events.EncodeToken(e.Name), b); err != nil {
		t.Fatal(err)
	}
}

func TestToolSearch(t *testing.T) {
	cat := backgroundCatalog(t)
	cache := NewToolSearchCache(2, time.Minute)
	tool := ToolSearchTool(cat, cache)
	run := func(query string, roles ...string) string {
		res := tool.Run(context.Background(), tools.Call{ID: "c", Args: map[string]any{"query": query},
			Env: tools.Env{Platform: "webhook", Scope: "private", SenderID: "u", SenderRoles: roles}})
		return res.Content[0].Text
	}
	tests := []struct {
		query   string
		roles   []string
		want    []string
		notWant []string
	}{
		{"generate image", nil, []string{"- generate_image: Generate an image", `"prompt"`}, []string{"tool_search:", "admin_only"}},
		{"image", []string{"master"}, []string{"generate_image", "admin_only"}, nil},
		{"fetch web page", nil, []string{"- web_fetch"}, []string{"generate_image"}},
		{"zzz nothing", nil, []string{"No tool matches", "generate_image", "web_fetch"}, []string{" tool_search"}},
	}
	for _, tt := range tests {
		got := run(tt.query, tt.roles...)
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("tool_search(%q, %v) = %q, want %q in it", tt.query, tt.roles, got, w)
			}
		}
		for _, w := range tt.notWant {
			if strings.Contains(got, w) {
				t.Errorf("tool_search(%q, %v) = %q, do not want %q", tt.query, tt.roles, got, w)
			}
		}
	}
	if n := len(cache.m); n > 2 {
		t.Errorf("cache holds %d answers, max 2", n)
	}
	v := cat.View(CallerMessage(tools.Env{Platform: "webhook", Scope: "private"}))
	calls := 0
	for range 3 {
		cache.getOrSearch(searchKey{v, "q"}, func() []string { calls++; return nil })
	}
	if calls != 1 {
		t.Errorf("searched %d times for one query, want 1 (cached)", calls)
	}
}
