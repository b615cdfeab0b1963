package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
)

// Replay shows where a compaction happened, between the turns it summarized and the next.
func TestReplayShowsCompactions(t *testing.T) {
	dir := startAll(t, compacting)
	var out bytes.Buffer
	// One chat per line: each waits for its reply, so the turns commit in this order.
	for _, line := range []string{"first message", "second message", "/compact", "after the compaction"} {
		if err := cmdChat(context.Background(), []string{"--data", dir, "--user", "bo", "--wait", "20s"}, strings.NewReader(line+"\n"), &out); err != nil {
			t.Fatalf("chat: %v\n%s", err, out.String())
		}
	}
	if !strings.Contains(out.String(), "Compacted:") {
		t.Fatalf("/compact did not compact:\n%s", out.String())
	}
	out.Reset()
	if err := cmdReplay(context.Background(), []string{"--data", dir, "console:console:private:bo"}, &out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	at := strings.Index(text, "⇣ compaction 1")
	if at < 0 {
		t.Fatalf("replay shows no compaction:\n%s", text)
	}
	if before, after := text[:at], text[at:]; !strings.Contains(before, "user: second message") || !strings.Contains(after, "user: after the compaction") {
		t.Fatalf("the compaction is not between the turns it follows and precedes:\n%s", text)
	}
}

// A turn that called a tool is closed by its context commit, with no turn_committed record,
// and (issue 40) writes nothing to AGENT_EVENTS: its tool-asking step rode on the tool call
// request and its result, and the closing commit carries its start. Replay still shows the
// whole turn in order, its header and prompt, the call, the tool's result, the answer and the
// commit.
func TestReplayShowsAToolTurnClosedByItsCommit(t *testing.T) {
	dir := startAll(t, "")
	var out bytes.Buffer
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), "list_dir tool") { // the tool worker may not be registered yet
		if time.Now().After(deadline) {
			t.Fatalf("no tool turn:\n%s", out.String())
		}
		if err := cmdChat(context.Background(), []string{"--data", dir, "--user", "bo", "--wait", "20s"}, strings.NewReader("list_dir .\n"), &out); err != nil {
			t.Fatalf("chat: %v\n%s", err, out.String())
		}
	}
	out.Reset()
	if err := cmdReplay(context.Background(), []string{"--data", dir, "console:console:private:bo"}, &out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	last := text[strings.LastIndex(text, "── turn"):]
	want := []string{"(model ", "user: list_dir .", "→ list_dir(", "← list_dir:", "assistant: The list_dir tool returned", "✓ committed 4 messages"}
	at := 0
	for _, w := range want {
		i := strings.Index(last[at:], w)
		if i < 0 {
			t.Fatalf("replay of the tool turn lacks %q (in this order: %q):\n%s", w, want, text)
		}
		at += i + len(w)
	}
	js := dialData(t, dir)
	st, err := js.Stream(context.Background(), events.StreamAgentEvents)
	if err != nil {
		t.Fatal(err)
	}
	sk := events.SessionKey{Platform: "console", Bot: "console", Scope: "private", Scene: "bo"}
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(events.AgentEvtSessionFilter(sk)))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Errorf("AGENT_EVENTS holds %d records of the session, want none (the steps rode on the tool calls)", info.State.Msgs)
	}
}

// compacting is an ai: block whose compaction threshold is low enough that a few turns compact.
const compacting = "ai:\n  agent:\n    compaction: {keepRecentTokens: 10, minKeepCount: 1}\n"

// startAll starts every role in one process on a fresh data directory, with extraYAML (may be
// empty) appended to the configuration; it stops with the test.
func startAll(t *testing.T, extraYAML string) (dataDir string) {
	t.Helper()
	dir := t.TempDir()
	cfg, err := config.Parse([]byte("dataDir: " + dir + "\nnats:\n  listen: 127.0.0.1:0\n  storeDir: " + filepath.Join(dir, "nats") + "\n" + extraYAML))
	if err != nil {
		t.Fatal(err)
	}
	cfg.AI.Agent.Workspace = filepath.Join(dir, "workspace")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := app.Start(ctx, cfg, app.Options{Roles: app.AllRoles, Out: io.Discard, NoProbe: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	return dir
}

// dialData connects to the bus of the process running on dataDir, as the commands do with
// --data; the connection closes with the test.
func dialData(t *testing.T, dataDir string) jetstream.JetStream {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	bus := addBusFlags(fs)
	if err := fs.Parse([]string{"--data", dataDir}); err != nil {
		t.Fatal(err)
	}
	nc, js, err := connectJS(bus)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return js
}
