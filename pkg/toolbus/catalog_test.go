package toolbus

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

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

func names(es []events.ToolEntry) string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Name
	}
	return fmt.Sprint(out)
}

// The catalog filters tools by platform, scene type and roles, memoizes the answer per kind of
// sender, keeps it across heartbeats, and drops it when an offer changes.
func TestToolCatalogViews(t *testing.T) {
	ctx := context.Background()
	ns := natstest.New(t, natstest.WithMemoryStorage())
	kv, err := ns.JS.KeyValue(ctx, events.BucketTools)
	if err != nil {
		t.Fatal(err)
	}
	params := []byte(`{"type":"object"}`)
	for _, e := range []events.ToolEntry{
		{Name: "zeta", Description: "z", Parameters: params, UpdatedAt: 1},
		{Name: "alpha", Description: "a", Parameters: params, PreExecutable: true, UpdatedAt: 1},
		{Name: "admin", Description: "m", Parameters: params, Roles: []string{"master"}, UpdatedAt: 1},
		{Name: "grouponly", Description: "g", Parameters: params, Scopes: []string{"group"}, UpdatedAt: 1},
		{Name: "qq", Description: "q", Parameters: params, Platforms: []string{"qq"}, UpdatedAt: 1},
	} {
		putTool(t, kv, e)
	}
	c, err := NewCatalog(ctx, ns.JS)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	msg := func(platform, scope string, roles ...string) events.IMMessage {
		return events.IMMessage{Platform: platform, Scene: events.Scene{Type: scope, ID: "s"}, Sender: events.Sender{ID: "u", Roles: roles}}
	}
	cases := []struct {
		name string
		m    events.IMMessage
		want string
	}{
		{"private user", msg("webhook", "private"), "[alpha zeta]"},
		{"master", msg("webhook", "private", "master"), "[admin alpha zeta]"},
		{"group", msg("webhook", "group"), "[alpha grouponly zeta]"},
		{"other platform", msg("qq", "private"), "[alpha qq zeta]"},
	}
	for _, tc := range cases {
		if got := names(c.For(tc.m)); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}

	user := msg("webhook", "private")
	v := c.View(user)
	if names(v.Pre) != "[alpha]" || len(v.Agent) != 2 || v.Agent[v.Index["zeta"]].Name != "zeta" {
		t.Fatalf("view shapes: pre %s, %d agent tools, index %v", names(v.Pre), len(v.Agent), v.Index)
	}
	apply := func(e events.ToolEntry) {
		t.Helper()
		putTool(t, kv, e)
		got, err := kv.Get(ctx, events.EncodeToken(e.Name))
		if err != nil {
			t.Fatal(err)
		}
		c.apply(got)
	}
	apply(events.ToolEntry{Name: "zeta", Description: "z", Parameters: params, UpdatedAt: 2, Workers: []string{"w2"}})
	if c.View(user) != v {
		t.Fatal("a heartbeat rebuilt the view")
	}
	if e, _ := c.Entry("zeta"); e.UpdatedAt != 2 || fmt.Sprint(e.Workers) != "[w2]" {
		t.Fatalf("entry after heartbeat: %+v", e)
	}
	apply(events.ToolEntry{Name: "zeta", Description: "new words", Parameters: params, UpdatedAt: 3})
	if nv := c.View(user); nv == v || nv.Entries[nv.Index["zeta"]].Description != "new words" {
		t.Fatal("a changed description kept the old view")
	}
	// Keywords reach the selection, and a change of keywords is a change of the offer.
	v = c.View(user)
	apply(events.ToolEntry{Name: "zeta", Description: "new words", Parameters: params, UpdatedAt: 4, Keywords: []string{"网页"}})
	if nv := c.View(user); nv == v || fmt.Sprint(nv.Avail[nv.Index["zeta"]].Keywords) != "[网页]" {
		t.Fatal("keywords did not reach the selection's view")
	}
	w, err := kv.Watch(ctx, events.EncodeToken("alpha"), jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := kv.Delete(ctx, events.EncodeToken("alpha")); err != nil {
		t.Fatal(err)
	}
	c.apply(<-w.Updates())
	if got := names(c.For(user)); got != "[zeta]" {
		t.Fatalf("after delete: %s", got)
	}
}

// A tool's calls may carry their step only while every worker announcing it copies steps: an
// announcement by a worker of an earlier version (no StepWorkers, written the way such a
// worker writes its entry) or by a worker that does not copy turns it off until the entry's
// list is rebuilt without it; withdrawing that worker turns it on again.
func TestCatalogCopiesStep(t *testing.T) {
	ctx := context.Background()
	ns := natstest.New(t, natstest.WithMemoryStorage())
	kv, err := ns.JS.KeyValue(ctx, events.BucketTools)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCatalog(ctx, ns.JS)
	if err != nil {
		t.Fatal(err)
	}
	entry := events.ToolEntry{Name: "echo", Description: "e", Parameters: []byte(`{"type":"object"}`)}
	ann := func(id string, copies bool) *Announcer {
		return &Announcer{KV: kv, ID: id, Window: time.Hour, CopiesStep: copies}
	}
	copies := func() bool {
		t.Helper()
		if err := c.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		return c.CopiesStep("echo")
	}
	steps := []struct {
		what string
		do   func() error
		want bool
	}{
		{"nobody serves it", func() error { return nil }, false},
		{"a new worker", func() error { return ann("a", true).Announce(ctx, entry) }, true},
		{"and a second new one", func() error { return ann("b", true).Announce(ctx, entry) }, true},
		{"and one that does not copy", func() error { return ann("c", false).Announce(ctx, entry) }, false},
		{"that one withdrawn", func() error { return ann("c", false).Withdraw(ctx, "echo") }, true},
		{"an old worker rewrites the entry", func() error {
			cur, err := kv.Get(ctx, events.EncodeToken("echo"))
			if err != nil {
				return err
			}
			old, err := events.UnmarshalToolEntry(cur.Value())
			if err != nil {
				return err
			}
			old.Workers, old.StepWorkers = append(old.Workers, "old"), nil
			b, err := events.MarshalToolEntry(old)
			if err != nil {
				return err
			}
			_, err = kv.Put(ctx, events.EncodeToken("echo"), b)
			return err
		}, false},
		{"a new worker announces again: the old one is still listed", func() error { return ann("a", true).Announce(ctx, entry) }, false},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.what, err)
		}
		if got := copies(); got != s.want {
			t.Errorf("%s: CopiesStep = %v, want %v", s.what, got, s.want)
		}
	}
}
