package turn

import (
	"context"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/faux"
	"github.com/agentbus/agentbus/pkg/store"
)

// A tool turn is closed by its context commit (store.WithClosing): no turn_committed record.
// These cases leave such a turn behind an owner that died at different points and check what
// the next owner does with it: finish it from its commit (reply again, never ask the model,
// never commit twice) unless its reply is known to be stored, then go on after it.
func TestClosingCommitTakeover(t *testing.T) {
	cases := []struct {
		name string
		// receipt: the reply's receipt is on IM_SENT (it was delivered before the owner died).
		receipt bool
		// listed: the session record lists the turn as running, and a listened message was
		// committed after it, so its commit is not the session's last record.
		listed bool
		// replies the next owner publishes for the turn (0: it is done), and messages in the
		// context afterwards.
		// wantCalls: model calls (only for the next message: the committed turn never asks).
		wantReplies, wantMessages, wantCalls int
	}{
		{name: "reply not delivered: finished from the commit", wantReplies: 1, wantMessages: 4},
		{name: "reply delivered: the owner goes on after it", receipt: true, wantReplies: 0, wantMessages: 6, wantCalls: 1},
		{name: "listed in the record, not the last commit: found after its start", listed: true, wantReplies: 1, wantMessages: 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil, faux.WithResponder(faux.Echo))
			ctx := context.Background()
			h.send(sk, "m1", "use the tool")
			trigger := h.lastInboxSeq(t, sk)
			turn := turnID(trigger)
			sid := events.NewSessionID(sk, 1)
			sessions, err := store.OpenSessions(ctx, h.ns.JS)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sessions.GetOrCreate(ctx, sk); err != nil {
				t.Fatal(err)
			}
			now := time.Now().UnixMilli()
			user := llm.UserText("use the tool", now)
			ask := llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.Text("checking"), llm.ToolCall("c1", "echo", map[string]any{"text": "x"})},
				StopReason: llm.StopReasonToolUse, Timestamp: now}
			result := llm.Message{Role: llm.RoleToolResult, ToolCallID: "c1", ToolName: "echo", Content: []llm.Content{llm.Text("x")}, Timestamp: now}
			answer := llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.Text("the committed answer")}, StopReason: llm.StopReasonStop, Timestamp: now}
			// What the dead owner wrote: the turn's start with its first step (before the call
			// ran), then the commit that closes the turn, with the result and the answer as tail.
			tlog, err := store.NewTurnLog(ctx, h.ns.JS)
			if err != nil {
				t.Fatal(err)
			}
			started := events.New(events.TurnStarted{Turn: turn, Trigger: events.InboxRef{Seq: trigger},
				Model: events.ModelRef{Provider: "demo", ID: "demo-1", API: "faux"}, Input: []llm.Message{user}, Worker: "wA",
				Steps: []events.MessageEnd{{Index: 1, Message: ask}}},
				events.WithSession(sid.String()), events.WithTurn(turn), events.WithID(turn+"-started"))
			if _, err := tlog.Append(ctx, sk, started); err != nil {
				t.Fatal(err)
			}
			cl, err := store.NewContextLog(ctx, h.ns.JS, store.ContextBounds{})
			if err != nil {
				t.Fatal(err)
			}
			seq, err := cl.AppendMessages(ctx, sid, 0, []llm.Message{user, ask, result, answer},
				store.WithMsgID(turn+":commit"), store.WithTurn(turn), store.WithInboxSeq(trigger), store.WithClosing(1, 2))
			if err != nil {
				t.Fatal(err)
			}
			if tc.listed {
				if _, err := sessions.Update(ctx, sk, func(s *store.Session) error {
					s.SetOpenTurn(store.OpenTurn{ID: turn, State: "running", InboxSeq: trigger, StartedAt: now})
					s.InboxCursor = trigger
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				if _, err := cl.AppendMessages(ctx, sid, seq, []llm.Message{llm.UserText("heard later", now)}, store.WithMsgID("in-x")); err != nil {
					t.Fatal(err)
				}
			}
			if tc.receipt {
				if _, err := h.ns.JS.Publish(ctx, events.IMSentPartSubject(sk, events.OutID(turn, 0)), []byte(`{}`)); err != nil {
					t.Fatal(err)
				}
			}

			w := h.worker("wB")
			if tc.wantReplies > 0 {
				if got := h.replies(sk, 1); got[0] != "the committed answer" {
					t.Fatalf("reply = %q", got)
				}
			} else {
				h.send(sk, "m2", "next one")
				if got := h.replies(sk, 1); got[0] == "the committed answer" {
					t.Fatalf("the delivered reply was published again: %q", got)
				}
			}
			if n := h.faux.Calls(); n != tc.wantCalls {
				t.Errorf("model called %d times, want %d (the committed turn must not ask it again)", n, tc.wantCalls)
			}
			tl, err := w.readTurn(ctx, sk, turn)
			if err != nil {
				t.Fatal(err)
			}
			if !tl.committed || !tl.closes || len(tl.messages) != 4 {
				t.Errorf("the turn reads back as committed=%v closes=%v with %d messages", tl.committed, tl.closes, len(tl.messages))
			}
			testwait.Eventually(t, 0, func() error {
				loaded, err := w.ctxlog.LoadContext(ctx, sid)
				return testwait.Want(err == nil && len(loaded.Messages) == tc.wantMessages, "not %d messages in the context yet (err %v)", tc.wantMessages, err)
			})
			time.Sleep(500 * time.Millisecond) // a duplicate would show up now
			var mine int
			for _, o := range h.outboundEvents(sk) {
				if o.Turn == turn {
					mine++
				}
			}
			if mine != tc.wantReplies {
				t.Errorf("%d reply parts of the turn on IM_OUT, want %d", mine, tc.wantReplies)
			}
			// A finished turn leaves the record's cursor past it, so the next owner does not
			// finish it again.
			testwait.Eventually(t, 0, func() error {
				s, err := w.sessions.Get(ctx, sk)
				return testwait.Want(err == nil && s.InboxCursor >= trigger && len(s.OpenTurns) == 0, "cursor not past %d with no open turn yet (err %v)", trigger, err)
			})
		})
	}
}

// replyStored decides whether a new owner may go on after a closing commit: only when the
// reply's last part is known to be stored.
func TestReplyStored(t *testing.T) {
	cases := []struct {
		name string
		// parts of the reply; out: the out ids published to the chat's IM_OUT subject, in
		// order; sent: the out ids with a receipt on IM_SENT.
		parts     int
		out, sent []string
		want      bool
	}{
		{name: "no reply", parts: 0, want: true},
		{name: "nothing stored", parts: 1, want: false},
		{name: "last part last on IM_OUT", parts: 2, out: []string{"t1-0", "t1-1"}, want: true},
		{name: "only the first part stored", parts: 2, out: []string{"t1-0"}, want: false},
		{name: "something else sent after it", parts: 1, out: []string{"t1-0", "cmd7-0"}, want: false},
		{name: "something else sent after it, but delivered", parts: 1, out: []string{"t1-0", "cmd7-0"}, sent: []string{"t1-0"}, want: true},
		{name: "a receipt of another part", parts: 2, sent: []string{"t1-0"}, want: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			w := h.worker("w1")
			ctx := context.Background()
			for _, id := range tc.out {
				o := events.Outbound{OutID: id, Platform: sk.Platform, Bot: sk.Bot, Scene: events.Scene{Type: sk.Scope, ID: sk.Scene},
					Content: events.Segments{events.TextSeg("x")}}
				m, err := events.NewMsg(events.IMOutSubject(sk), events.New(o, events.WithID(id)))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := h.ns.JS.PublishMsg(ctx, m); err != nil {
					t.Fatal(err)
				}
			}
			for _, id := range tc.sent {
				if _, err := h.ns.JS.Publish(ctx, events.IMSentPartSubject(sk, id), []byte(`{}`)); err != nil {
					t.Fatal(err)
				}
			}
			rd := reader{&actor{w: w, sk: sk, ctx: ctx}}
			got, err := rd.replyStored(store.CommitMark{Turn: "t1", Closes: true, ReplyParts: tc.parts})
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("replyStored = %v, want %v", got, tc.want)
			}
		})
	}
}
