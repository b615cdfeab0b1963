package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
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
