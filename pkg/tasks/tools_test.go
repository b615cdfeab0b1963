package tasks

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/toolbus/toolbustest"
	"github.com/agentbus/agentbus/pkg/tools"
)

func TestToolSearch(t *testing.T) {
	cat := toolbustest.BackgroundCatalog(t)
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
