package app_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/fakeopenai"
)

// ask_user ends the turn: the question is the reply, the loop does not go on, and the user's
// answer starts the next turn, which sees the question and the answer.
func TestAskUserEndsTheTurn(t *testing.T) {
	pl := newPipeline(t, func(r *fakeopenai.Request) fakeopenai.Reply {
		if strings.Contains(r.LastUser(), "book a table") {
			return fakeopenai.Reply{Text: "Sure.", ToolCalls: []fakeopenai.ToolCall{{ID: "ask1", Name: "ask_user",
				Arguments: `{"question":"For how many people?","options":["2","4"]}`}}}
		}
		if _, ok := r.ToolResult("ask1"); ok && strings.Contains(r.LastUser(), "four") {
			return fakeopenai.Reply{Text: "Booked for four."}
		}
		return fakeopenai.Reply{Text: "the loop went on after ask_user"}
	}, pipelineOpts{})
	pl.waitToolsServed()
	before := len(pl.model.Requests())
	pl.post(private("m1", "u1", "please book a table"))
	got := pl.repliesIn("u1", 1)[0].Text()
	if !strings.Contains(got, "For how many people?") || !strings.Contains(got, "- 4") || strings.Contains(got, "went on") {
		t.Fatalf("reply to the asking turn = %q", got)
	}
	time.Sleep(300 * time.Millisecond) // a loop that went on would make another request now
	if n := len(pl.model.Requests()) - before; n != 1 {
		t.Fatalf("%d model requests for the asking turn, want 1", n)
	}
	pl.post(private("m2", "u1", "four"))
	if got := pl.repliesIn("u1", 2)[1].Text(); got != "Booked for four." {
		t.Fatalf("reply to the answer = %q", got)
	}
}

// execApprovalMode ask, through the whole pipeline: bash refuses a command that needs the
// owner, the model asks with ask_user and the turn ends; the owner's "yes" in a later turn
// runs it once; a user's "yes" does not, until the owner says "/approve" (once) in a private
// chat; "/approve always" finds the pending window.
func TestExecApprovalRoundTrips(t *testing.T) {
	pl := newPipeline(t, func(r *fakeopenai.Request) fakeopenai.Reply {
		// Answer the newest tool result, else start from the user's words.
		last := r.Messages[len(r.Messages)-1]
		switch {
		case last.Role == "tool" && strings.Contains(last.Content, "ZHIN_NEEDS_OWNER"):
			return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{ID: fmt.Sprintf("ask%d", r.N), Name: "ask_user",
				Arguments: `{"question":"May I run touch approved.txt?"}`}}}
		case last.Role == "tool":
			return fakeopenai.Reply{Text: "ran: " + last.Content}
		case strings.Contains(r.LastUser(), "make the file") || strings.Contains(r.LastUser(), "yes"):
			args, _ := json.Marshal(map[string]string{"command": "touch approved.txt && echo made-it"})
			return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{ID: fmt.Sprintf("b%d", r.N), Name: "bash", Arguments: string(args)}}}
		}
		return fakeopenai.Echo(r)
	}, pipelineOpts{agentYAML: "    execSecurity: allowlist\n    execPreset: readonly\n    execApprovalMode: ask\n"})
	pl.waitToolsServed()
	n := 0
	say := func(sender, text string) string {
		t.Helper()
		n++
		id := fmt.Sprintf("a%d", n)
		pl.post(private(id, sender, text))
		got, err := pl.cb.waitFor(1, waitMargin, func(r reply) bool { return r.ReplyTo == id })
		if err != nil {
			t.Fatalf("%s %q: %v; replies: %s", sender, text, err, fmtReplies(pl.cb.all()))
		}
		return got[0].Text()
	}
	expect := func(got string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("reply %q lacks %q", got, w)
			}
		}
		if strings.HasPrefix(got, "ran: ") && strings.Contains(got, "made-it") && !slices.Contains(want, "made-it") {
			t.Errorf("the command ran: %q", got)
		}
	}
	expect(say(master, "/approve always"), "no pending bash approval")
	expect(say(master, "/approve"), "No bash command of this chat is waiting")

	// The owner asks, is asked, answers yes: it runs once.
	expect(say(master, "please run the command to make the file"), "May I run touch approved.txt?")
	expect(say(master, "yes"), "made-it", "exit code 0")

	// A user asks; their own yes is not enough. The owner's /approve in their private chat
	// approves nothing of another chat (issue 36: it approved the newest request of the whole
	// endpoint); it lists the waiting request with its id, and /approve <id> names the command
	// and the chat it runs in.
	expect(say("u1", "please run the command to make the file"), "May I run touch approved.txt?")
	expect(say("u1", "yes"), "May I run touch approved.txt?")
	listed := say(master, "/approve")
	expect(listed, "No bash command of this chat is waiting", "touch approved.txt", "webhook:b1:private:u1", "asked by u1")
	expect(say("u1", "yes"), "May I run touch approved.txt?") // still not approved
	m := regexp.MustCompile(`- ([0-9a-f]{8}): `).FindStringSubmatch(listed)
	if m == nil {
		t.Fatalf("no request id in %q", listed)
	}
	expect(say(master, "/approve "+m[1]), "Approved once ["+m[1]+"]", "touch approved.txt", "private u1 (webhook:b1:private:u1)", "asked by u1")
	expect(say("u1", "yes"), "made-it")
	expect(say("u1", "yes again"), "May I run touch approved.txt?") // used up

	// In a group, the owner's /approve typed there approves that chat's request.
	gsay := func(sender, text string) string {
		t.Helper()
		n++
		id := fmt.Sprintf("a%d", n)
		pl.post(group(id, "g1", sender, text, true))
		got, err := pl.cb.waitFor(1, waitMargin, func(r reply) bool { return r.ReplyTo == id })
		if err != nil {
			t.Fatalf("%s %q: %v; replies: %s", sender, text, err, fmtReplies(pl.cb.all()))
		}
		return got[0].Text()
	}
	expect(gsay("u2", "please run the command to make the file"), "May I run touch approved.txt?")
	expect(gsay(master, "/approve always"), "private chat")
	expect(gsay(master, "/approve"), "Approved once", "touch approved.txt", "in this chat", "asked by u2")
	expect(gsay("u2", "yes"), "made-it")

	// Now something is pending: /approve always finds the window, and the command runs for anyone.
	expect(say(master, "/approve always"), "now skipped")
	expect(say("u1", "yes"), "made-it")
}
