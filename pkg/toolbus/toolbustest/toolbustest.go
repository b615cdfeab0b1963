// Package toolbustest gives tests a tool catalogue on a real nats-server: the turn worker's and
// the task tools' tests select and search tools from the same entries.
package toolbustest

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
	"github.com/agentbus/agentbus/pkg/toolbus"
)

// BackgroundCatalog returns a refreshed catalogue, on a fresh in-memory server, holding the
// orchestration tools (tool_search, run_deferred_task, spawn_task), ask_user, the reminder
// tool, user_profile, two workers' tools (generate_image, web_fetch) and admin_only, which
// only masters may see.
func BackgroundCatalog(t *testing.T) *toolbus.Catalog {
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
		PutTool(t, kv, te)
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

// PutTool stores e in the tools bucket kv as a tool worker's announcer would.
func PutTool(t *testing.T, kv jetstream.KeyValue, e events.ToolEntry) {
	t.Helper()
	b, err := events.MarshalToolEntry(e)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), events.EncodeToken(e.Name), b); err != nil {
		t.Fatal(err)
	}
}
