package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/natsutil"
)

// A step carried on tool calls (EncodeStep of the records a turn would have appended) reads
// back as those records, a turn_started with steps expanded as from AGENT_EVENTS.
func TestCarriedStepRoundTrip(t *testing.T) {
	k := testKey("carried")
	tm := TurnMeta{Key: k, Session: events.NewSessionID(k, 1).String(), Turn: "t9"}
	ask := llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.ToolCall("c1", "echo", map[string]any{"text": "x"})}}
	started, err := TurnEventMsg(tm, events.EvtKindTurnStarted, events.TurnStarted{Turn: "t9", Trigger: events.InboxRef{Seq: 9}, Model: events.ModelRef{ID: "m"}, Input: []llm.Message{llm.UserText("q", 1)},
		Steps: []events.MessageEnd{{Index: 1, Message: ask}}}, "started")
	if err != nil {
		t.Fatal(err)
	}
	later, err := TurnEventMsg(tm, events.EvtKindMessageEnd, events.MessageEnd{Index: 3, Message: ask}, "m3")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		recs []*nats.Msg
		want string
	}{
		{[]*nats.Msg{started}, "[t9/turn_started t9/message_end]"},
		{[]*nats.Msg{later}, "[t9/message_end]"},
		{[]*nats.Msg{started, later}, "[t9/turn_started t9/message_end t9/message_end]"},
	}
	for _, c := range cases {
		rs, err := DecodeStep(k, EncodeStep(c.recs...), 7, time.UnixMilli(5))
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(kinds(rs)); got != c.want {
			t.Errorf("DecodeStep = %s, want %s", got, c.want)
		}
		for _, r := range rs {
			if r.Seq != 7 || r.Key != k {
				t.Errorf("record %+v: want seq 7 of %s", r, k)
			}
		}
	}
	if _, err := DecodeStep(k, []byte(`{"not":"an array"}`), 1, time.Time{}); err == nil {
		t.Error("a step that is not an array decoded")
	}
}

// A closing commit that carries its turn's start (WithClosingStart) stands for the turn's
// turn_started too, with its input taken from the commit's first messages and dated when the
// turn started; one without it stands for the tail and the commit only.
func TestClosingRecordsWithStart(t *testing.T) {
	l, _ := newCtxLog(t, ContextBounds{})
	ctx := context.Background()
	k := testKey("closing")
	id := events.NewSessionID(k, 1)
	msgs := []llm.Message{llm.UserText("question", 1),
		{Role: llm.RoleAssistant, Content: []llm.Content{llm.ToolCall("c1", "echo", nil)}},
		{Role: llm.RoleToolResult, ToolCallID: "c1", Content: []llm.Content{llm.Text("r")}},
		{Role: llm.RoleAssistant, Content: []llm.Content{llm.Text("answer")}}}
	st := events.TurnStarted{Turn: "t1", Trigger: events.InboxRef{Seq: 1}, Model: events.ModelRef{Provider: "p", ID: "m"}, Worker: "w1", ContextSeq: 0, Input: msgs[:1]}
	at := time.Now().Add(-time.Minute).UnixMilli()
	last, err := l.AppendMessages(ctx, id, 0, msgs, WithMsgID("t1:commit"), WithTurn("t1"), WithClosing(1, 1), WithClosingStart(st, at))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.AppendMessages(ctx, id, last, msgs[:2], WithMsgID("t2:commit"), WithTurn("t2"), WithClosing(1, 1)); err != nil {
		t.Fatal(err)
	}
	var got []string
	for r, err := range l.History(ctx, id) {
		if err != nil {
			t.Fatal(err)
		}
		for _, cr := range ClosingRecords(k, id, r) {
			got = append(got, cr.Turn+"/"+cr.Kind)
			if s, ok := cr.Event.(*events.Event[events.TurnStarted]); ok {
				if len(s.Data.Input) != 1 || s.Data.Input[0].TextContent() != "question" || s.Data.Worker != "w1" || s.Data.Model.ID != "m" || cr.Time.UnixMilli() != at {
					t.Errorf("turn_started from the commit: %+v at %v", s.Data, cr.Time)
				}
			}
		}
	}
	want := "[t1/turn_started t1/message_end t1/message_end t1/message_end t1/turn_committed t2/message_end t2/turn_committed]"
	if fmt.Sprint(got) != want {
		t.Errorf("closing records %v, want %s", got, want)
	}
}

// ReadCarried finds a turn's carried records on its queued requests (past requests already
// removed from the work queue) and on its session's results, and nothing of other turns or
// sessions.
func TestReadCarried(t *testing.T) {
	ctx := context.Background()
	js := startJS(t)
	tl, err := NewTurnLog(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	calls, err := js.Stream(ctx, events.StreamToolCalls)
	if err != nil {
		t.Fatal(err)
	}
	results, err := js.Stream(ctx, events.StreamToolResults)
	if err != nil {
		t.Fatal(err)
	}
	k, other := testKey("carry"), testKey("other")
	step := func(k events.SessionKey, turn string, index int) []byte {
		tm := TurnMeta{Key: k, Session: events.NewSessionID(k, 1).String(), Turn: turn}
		m, err := TurnEventMsg(tm, events.EvtKindMessageEnd, events.MessageEnd{Index: index, Message: llm.UserText("x", 1)}, fmt.Sprintf("m%d", index))
		if err != nil {
			t.Fatal(err)
		}
		return EncodeStep(m)
	}
	request := func(k events.SessionKey, turn, id string, s []byte) uint64 {
		ev := events.New(events.ToolCall{CallID: turn + "-" + id, Tool: "echo", Args: map[string]any{}, SessionKey: k, Turn: turn,
			Caller: events.Caller{Platform: k.Platform, Scope: k.Scope}, Step: s}, events.WithTurn(turn))
		m, err := events.NewMsg(events.ToolCallSubject("echo"), ev)
		if err != nil {
			t.Fatal(err)
		}
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	// Two requests that left the queue (the first sequences are gone), then the queued ones.
	for i := range 2 {
		seq := request(k, "t1", fmt.Sprintf("gone%d", i), step(k, "t1", 9))
		if err := calls.DeleteMsg(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	request(k, "t1", "c2", step(k, "t1", 2))
	request(k, "t2", "c1", step(k, "t2", 5))         // another turn
	request(other, "t1", "c1", step(other, "t1", 6)) // the same turn id in another session
	res := events.New(events.ToolResult{CallID: "t1-c1", Tool: "echo", Content: []llm.Content{llm.Text("r")}, Step: step(k, "t1", 1)}, events.WithTurn("t1"))
	m, err := events.NewMsg(events.ToolResultSubject(k), res)
	if err != nil {
		t.Fatal(err)
	}
	m.Header.Set(events.HeaderCallID, "t1-c1")
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	// On a replicated stream scanQueue asks the leader for the next request on the wildcard
	// subject (STREAM.MSG.GET next_by_subj): it must skip the removed ones too.
	if m, err := natsutil.LeaderGetMsg(ctx, js, events.StreamToolCalls, natsutil.MsgQuery{Seq: 1, NextFor: events.PrefixToolCall + ".>"}); err != nil || m.Sequence != 3 {
		t.Fatalf("the leader's next request after 1: %v, %v; want sequence 3", m, err)
	}
	recs, err := tl.ReadCarried(ctx, calls, results, k, "t1", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, r := range recs {
		if e, ok := r.Event.(*events.Event[events.MessageEnd]); ok {
			got = append(got, e.Data.Index)
		}
	}
	if fmt.Sprint(got) != "[2 1]" {
		t.Errorf("carried message indexes %v, want [2 1] (the queued request, then the result)", got)
	}
}
