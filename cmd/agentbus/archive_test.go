package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/store"
)

// streamUse is what a stream holds, as the server counts it: its messages and bytes, and the
// messages on the subjects matching filter.
type streamUse struct {
	msgs, bytes, matching uint64
}

func useOf(t *testing.T, js jetstream.JetStream, stream, filter string) streamUse {
	t.Helper()
	st, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(filter))
	if err != nil {
		t.Fatal(err)
	}
	u := streamUse{msgs: info.State.Msgs, bytes: info.State.Bytes}
	for _, n := range info.State.Subjects {
		u.matching += n
	}
	return u
}

// After /reset the ended epoch is archived (object store epochs) and trimmed from SESSION_IN
// and AGENT_CTX; `agentbus replay` prints exactly what it printed before the trim, text and
// JSON: a compaction, a tool turn closed by its commit (read from the context log) and plain
// turns. The streams' per-session footprint is printed before and after.
func TestReplayAfterEpochTrim(t *testing.T) {
	dir := startAll(t, compacting)
	chat := func(user, line string) string {
		t.Helper()
		var out bytes.Buffer
		if err := cmdChat(context.Background(), []string{"--data", dir, "--user", user, "--wait", "20s"}, strings.NewReader(line+"\n"), &out); err != nil {
			t.Fatalf("chat: %v\n%s", err, out.String())
		}
		return out.String()
	}
	// One rich session (a tool turn, a compaction) and a few plain ones.
	users := []string{"bo", "s1", "s2", "s3"}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(chat("bo", "list_dir ."), "list_dir tool") { // the tool worker may not be registered yet
		if time.Now().After(deadline) {
			t.Fatal("no tool turn")
		}
	}
	for _, line := range []string{"first message", "/compact", "after the compaction"} {
		chat("bo", line)
	}
	for _, u := range users[1:] {
		for i := range 3 {
			chat(u, fmt.Sprintf("message %d", i))
		}
	}
	replay := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := cmdReplay(context.Background(), append(append([]string{"--data", dir}, args...), "console:console:private:bo"), &out); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	text, asJSON := replay(), replay("--json")
	if !strings.Contains(text, "⇣ compaction 1") || !strings.Contains(text, "← list_dir:") {
		t.Fatalf("the replay lacks the compaction or the tool turn:\n%s", text)
	}

	js := dialData(t, dir)
	keys := make([]events.SessionKey, len(users))
	for i, u := range users {
		keys[i] = events.SessionKey{Platform: "console", Bot: "console", Scope: events.ScopePrivate, Scene: u}
	}
	use := func() (in, cx, obj streamUse) {
		for _, k := range keys {
			i := useOf(t, js, events.StreamSessionIn, events.AgentInSubject(k))
			c := useOf(t, js, events.StreamAgentCtx, events.AgentCtxSubject(events.NewSessionID(k, 1)))
			in.matching += i.matching
			cx.matching += c.matching
			in.msgs, in.bytes, cx.msgs, cx.bytes = i.msgs, i.bytes, c.msgs, c.bytes
		}
		return in, cx, useOf(t, js, "OBJ_"+events.ObjectEpochs, "$O."+events.ObjectEpochs+".M.>")
	}
	in0, cx0, obj0 := use()
	ev0 := useOf(t, js, events.StreamAgentEvents, events.PrefixAgentEvt+".>")

	for _, u := range users {
		if out := chat(u, "/reset"); !strings.Contains(out, "epoch 2") {
			t.Fatalf("/reset of %s: %s", u, out)
		}
	}
	// The archive and the trim run in the background after the reset.
	deadline = time.Now().Add(60 * time.Second)
	for {
		in, cx, obj := use()
		if in.matching == 0 && cx.matching == 0 && obj.matching == uint64(len(users)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not trimmed: inbox %d, epoch 1 context %d messages, %d archived epochs", in.matching, cx.matching, obj.matching)
		}
		time.Sleep(100 * time.Millisecond)
	}
	in1, cx1, obj1 := use()
	n := uint64(len(users))
	t.Logf("%d sessions after 3-4 turns each, before → after /reset and the archive:", n)
	t.Logf("  SESSION_IN:   %d → %d messages, %d → %d bytes (%d → %d per session)", in0.msgs, in1.msgs, in0.bytes, in1.bytes, in0.bytes/n, in1.bytes/n)
	t.Logf("  AGENT_CTX:    %d → %d messages, %d → %d bytes (%d → %d per session)", cx0.msgs, cx1.msgs, cx0.bytes, cx1.bytes, cx0.bytes/n, cx1.bytes/n)
	t.Logf("  AGENT_EVENTS: %d messages, %d bytes (%d per session; not trimmed: it ages out, and the archive holds a copy)", ev0.msgs, ev0.bytes, ev0.bytes/n)
	t.Logf("  OBJ_epochs:   %d → %d messages, %d → %d bytes (%d per archived epoch)", obj0.msgs, obj1.msgs, obj0.bytes, obj1.bytes, (obj1.bytes-obj0.bytes)/n)
	if in1.bytes >= in0.bytes || cx1.bytes >= cx0.bytes {
		t.Fatalf("the streams did not shrink: SESSION_IN %d → %d bytes, AGENT_CTX %d → %d bytes", in0.bytes, in1.bytes, cx0.bytes, cx1.bytes)
	}

	if got := replay(); got != text {
		t.Fatalf("replay after the trim differs.\nbefore:\n%s\nafter:\n%s", text, got)
	}
	if got := replay("--json"); got != asJSON {
		t.Fatalf("replay --json after the trim differs.\nbefore:\n%s\nafter:\n%s", asJSON, got)
	}
	// The new epoch goes on where the old one left off.
	chat("bo", "in the new epoch")
	if got := replay(); !strings.HasPrefix(got, text) || !strings.Contains(got[len(text):], "user: in the new epoch") {
		t.Fatalf("replay of the new epoch:\n%s", got)
	}
}

// A turn worker that dies after /reset ended the epoch (the record lists it in Ended) but
// before it archived it: the next actor of the session archives and trims it when it starts.
func TestEndedEpochArchivedByTheNextOwner(t *testing.T) {
	dir := startAll(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js := dialData(t, dir)
	// What the dead worker left: epoch 1 with a context log, ended by Archive, not archived.
	sk := events.SessionKey{Platform: "console", Bot: "console", Scope: events.ScopePrivate, Scene: "ghost"}
	sessions, err := store.OpenSessions(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sessions.GetOrCreate(ctx, sk); err != nil {
		t.Fatal(err)
	}
	cl, err := store.NewContextLog(ctx, js, store.ContextBounds{})
	if err != nil {
		t.Fatal(err)
	}
	id1 := events.NewSessionID(sk, 1)
	if _, err := cl.AppendMessages(ctx, id1, 0, []llm.Message{llm.UserText("before the crash", 1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := sessions.Archive(ctx, sk); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := cmdChat(context.Background(), []string{"--data", dir, "--user", "ghost", "--wait", "20s"}, strings.NewReader("hello again\n"), &out); err != nil {
		t.Fatalf("chat: %v\n%s", err, out.String())
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, err := sessions.Get(ctx, sk)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Ended) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("epoch 1 is still listed as not archived: %+v", s.Ended)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if u := useOf(t, js, events.StreamAgentCtx, events.AgentCtxSubject(id1)); u.matching != 0 {
		t.Fatalf("epoch 1's context holds %d records after the archive", u.matching)
	}
	arch, err := store.OpenEpochArchive(ctx, js, nil)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for r, err := range arch.ContextHistory(ctx, cl, id1) {
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, r.First)
	}
	if len(texts) != 1 || texts[0] != "before the crash" {
		t.Fatalf("epoch 1 read back from its archive: %q", texts)
	}
}
