package app_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/store"
)

// Every chat command answers through the whole pipeline (webhook → ingest → session actor →
// egress → callback), with the sender's permissions applied, and /model and /queue change the
// session record that the next turn uses.
func TestChatCommands(t *testing.T) {
	pl := newPipeline(t, fakeopenai.Echo, pipelineOpts{})
	pl.waitToolsServed()
	n := 0
	// ask posts text from sender in their private chat and returns the reply.
	ask := func(sender, text string) string {
		t.Helper()
		n++
		id := fmt.Sprintf("c%d", n)
		before := len(pl.cb.all())
		pl.post(private(id, sender, text))
		got, err := pl.cb.waitFor(1, waitMargin, func(r reply) bool { return r.ReplyTo == id })
		if err != nil {
			t.Fatalf("%s %q: %v; replies: %s", sender, text, err, fmtReplies(pl.cb.all()[before:]))
		}
		return got[0].Text()
	}
	// A conversation to report on.
	if got := ask(master, "hello there"); got != "echo: hello there" {
		t.Fatalf("first turn: %q", got)
	}
	cases := []struct {
		sender, text string
		want         []string // substrings of the reply
	}{
		{master, "/cancel", []string{"Nothing to cancel"}},
		{master, "/frobnicate now", []string{"Unknown command /frobnicate", "/help"}},
		{master, "/help", []string{"/new", "/model", "/queue", "/usage", "/whoami", "/context", "/tools", "/mcp", "/bindings", "/status"}},
		{master, "/whoami", []string{"You are " + master, "master", "trusted", "webhook"}},
		{"u1", "/whoami", []string{"You are u1", "Roles: user"}},
		{master, "/usage", []string{"1 model call", "input", "output"}},
		{master, "/context", []string{"2 messages", "1 assistant", "1 user", "tokens"}},
		{master, "/status", []string{"epoch 1", "fake/m1 (routing)", "parallel (ai.agent.concurrency)", "0 running", "2 messages"}},
		{master, "/tools", []string{"web_fetch (builtin)", "bash (builtin)", "spawn_task"}},
		{master, "/tools web", []string{"web_fetch", "matching \"web\""}},
		{"u1", "/tools", []string{"web_fetch"}},
		{master, "/mcp", []string{"No MCP servers"}},
		{master, "/bindings", []string{"zhin → fake/m1"}},
		{"u1", "/bindings", []string{"masters and trusted users"}},
		{"u1", "/model fake/m2", []string{"masters and trusted users"}},
		{master, "/model", []string{"fake/m1 (routing)", "Choices: zhin"}},
		{master, "/model nosuch/x", []string{"Unknown model", "no provider \"nosuch\""}},
		{master, "/model fake/m2", []string{"Model for this chat: fake/m2"}},
		{master, "/queue", []string{"parallel (ai.agent.concurrency)", "collect"}},
		{master, "/queue sideways", []string{"Unknown policy"}},
		{master, "/queue queue", []string{"queue (chosen with /queue)"}},
		{master, "/status", []string{"fake/m2 (chosen with /model)", "queue (chosen with /queue)"}},
	}
	for _, tc := range cases {
		got := ask(tc.sender, tc.text)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s %q: reply %q lacks %q", tc.sender, tc.text, got, w)
			}
		}
	}
	// The session record holds the choices, and the next turn runs on the chosen model.
	kv, err := pl.p.JS.KeyValue(context.Background(), events.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	sessions := store.NewSessions(kv)
	sk := private("x", master, "").key()
	s, err := sessions.Get(context.Background(), sk)
	if err != nil || s.ModelOverride != "fake/m2" || s.Concurrency != "queue" {
		t.Fatalf("session record: %+v, %v", s, err)
	}
	before := len(pl.model.Requests())
	ask(master, "which model?")
	reqs := pl.model.Requests()[before:]
	if len(reqs) != 1 || reqs[0].Model != "m2" {
		t.Fatalf("the turn after /model fake/m2 asked %d requests, model %q", len(reqs), reqs[0].Model)
	}
	// /new starts over but keeps the chat's settings; /clear is the same.
	if got := ask(master, "/new"); !strings.Contains(got, "epoch 2") {
		t.Errorf("/new: %q", got)
	}
	if got := ask(master, "/context"); !strings.Contains(got, "0 messages") {
		t.Errorf("/context after /new: %q", got)
	}
	if got := ask(master, "/clear"); !strings.Contains(got, "epoch 3") {
		t.Errorf("/clear: %q", got)
	}
	if got := ask(master, "/status"); !strings.Contains(got, "fake/m2 (chosen with /model)") {
		t.Errorf("/status after /clear lost the model choice: %q", got)
	}
	if got := ask(master, "/model default"); !strings.Contains(got, "back to routing") {
		t.Errorf("/model default: %q", got)
	}
	// In a group, /new needs a moderator.
	pl.post(group("g-new", "g1", "u2", "/new", true))
	got, err := pl.cb.waitFor(1, waitMargin, func(r reply) bool { return r.ReplyTo == "g-new" })
	if err != nil || !strings.Contains(got[0].Text(), "in a group is for") {
		t.Errorf("/new in a group by a user: %v %s", err, fmtReplies(got))
	}
}

// /queue queue in one chat makes a message that arrives during a turn wait for it there (the
// configured default, parallel, would run both at once).
func TestQueueCommandChangesThePolicy(t *testing.T) {
	const first, second = "first question alpha", "second question beta"
	pl := newPipeline(t, func(r *fakeopenai.Request) fakeopenai.Reply {
		if strings.Contains(r.LastUser(), first) {
			return fakeopenai.Reply{Text: "echo: " + first, Latency: 800 * time.Millisecond}
		}
		return fakeopenai.Echo(r)
	}, pipelineOpts{})
	pl.post(private("q", "u1", "/queue queue"))
	if got := pl.repliesIn("u1", 1)[0].Text(); !strings.Contains(got, "queue (chosen with /queue)") {
		t.Fatalf("/queue queue: %q", got)
	}
	pl.post(private("a", "u1", first))
	pl.requests(1)
	pl.post(private("b", "u1", second))
	got := pl.repliesIn("u1", 3)
	reqs := pl.requests(2)
	if n := pl.model.MaxConcurrent(); n != 1 {
		t.Errorf("max concurrent model requests = %d, want 1", n)
	}
	if !reqs[1].Contains("echo: "+first) || !strings.Contains(reqs[1].LastUser(), second) {
		t.Errorf("queued turn's request:\n%s", reqs[1].Text())
	}
	if got[1].ReplyTo != "a" || got[2].ReplyTo != "b" {
		t.Errorf("replies out of order: %s", fmtReplies(got))
	}
}
