package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/nats-io/nats.go/jetstream"
)

func turnEvents(sk events.SessionKey, turn string, inboxSeq uint64) []events.Any {
	opts := []events.Option{events.WithSession(events.NewSessionID(sk, 1).String()), events.WithTurn(turn)}
	return []events.Any{
		events.New(events.TurnStarted{Turn: turn, Trigger: events.InboxRef{Seq: inboxSeq}, Model: events.ModelRef{ID: "m"},
			Input: []llm.Message{llm.UserText("q "+turn, 1)}}, opts...),
		events.New(events.MessageEnd{Index: 0, Message: llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.ToolCall("c-"+turn, "search", nil)}}}, opts...),
		events.New(events.ToolCallRequested{CallID: "c-" + turn, Tool: "search", Args: map[string]any{}}, opts...),
		events.New(events.MessageEnd{Index: 1, Message: llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.Text("answer " + turn)}}}, opts...),
		events.New(events.TurnCommitted{FirstSeq: 1, LastSeq: 1, Messages: 3}, opts...),
	}
}

func kinds(rs []TurnRecord) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Turn + "/" + r.Kind
	}
	return out
}

func TestTurnLog(t *testing.T) {
	ctx := context.Background()
	js := startJS(t)
	tl, err := NewTurnLog(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	sk, other := testKey("turns"), testKey("other")
	var seqs []uint64
	// Two turns of sk interleaved with another session's turn.
	t1, t2, o1 := turnEvents(sk, "t1", 1), turnEvents(sk, "t2", 2), turnEvents(other, "t1", 1)
	for i := range t1 {
		for _, x := range []struct {
			k  events.SessionKey
			ev events.Any
		}{{sk, t1[i]}, {other, o1[i]}} {
			s, err := tl.Append(ctx, x.k, x.ev)
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, s)
		}
	}
	before := time.Now()
	time.Sleep(5 * time.Millisecond) // what follows is stamped strictly after before
	var t2start uint64
	for i, ev := range t2 {
		s, err := tl.Append(ctx, sk, ev)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			t2start = s
		}
	}
	// A re-published event (a resumed worker) is stored once, at its original sequence.
	again, err := tl.Append(ctx, sk, t1[1])
	if err != nil || again != seqs[2] {
		t.Fatalf("republish: seq %d err %v, want %d", again, err, seqs[2])
	}

	got, err := tl.ReadTurn(ctx, sk, "t1", 0)
	if err != nil {
		t.Fatal(err)
	}
	want := "[t1/turn_started t1/message_end t1/tool_call_requested t1/message_end t1/turn_committed]"
	if fmt.Sprint(kinds(got)) != want {
		t.Fatalf("ReadTurn: %v", kinds(got))
	}
	me, ok := got[3].Event.(*events.Event[events.MessageEnd])
	if !ok || me.Data.Message.TextContent() != "answer t1" || got[3].Key != sk || me.Meta.Turn != "t1" {
		t.Fatalf("decoded %T %+v", got[3].Event, got[3])
	}
	if got, _ := tl.ReadTurn(ctx, sk, "t2", t2start); len(got) != 5 || got[0].Seq != t2start {
		t.Fatalf("ReadTurn from seq: %v", kinds(got))
	}
	if got, _ := tl.ReadTurn(ctx, sk, "nope", 0); len(got) != 0 {
		t.Fatalf("unknown turn: %v", kinds(got))
	}

	tests := []struct {
		name string
		from ReplayFrom
		want int
		// first record expected
		first string
	}{
		{"whole session", ReplayFrom{}, 10, "t1/turn_started"},
		{"from sequence", ReplayFrom{Seq: t2start}, 5, "t2/turn_started"},
		{"from time", ReplayFrom{Time: before}, 5, "t2/turn_started"},
		{"past the end", ReplayFrom{Seq: t2start + 100}, 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var rs []TurnRecord
			for r, err := range tl.Replay(ctx, sk, tc.from) {
				if err != nil {
					t.Fatal(err)
				}
				if r.Key != sk {
					t.Fatalf("other session's record %s", r.Subject)
				}
				rs = append(rs, r)
			}
			if len(rs) != tc.want || (tc.want > 0 && kinds(rs)[0] != tc.first) {
				t.Fatalf("replay: %v", kinds(rs))
			}
			for i := 1; i < len(rs); i++ {
				if rs[i].Seq <= rs[i-1].Seq {
					t.Fatal("out of order")
				}
			}
		})
	}
	// Stopping early is allowed.
	n := 0
	for range tl.Replay(ctx, sk, ReplayFrom{}) {
		if n++; n == 2 {
			break
		}
	}

	for _, tc := range []struct {
		name string
		ev   events.Any
	}{
		{"not a turn event", events.New(events.CtxSummary{Summary: "s", AnchorSeq: 1}, events.WithTurn("t"))},
		{"no turn id", events.New(events.TurnCommitted{})},
		{"invalid payload", events.New(events.MessageEnd{Index: -1}, events.WithTurn("t"))},
	} {
		if _, err := tl.Append(ctx, sk, tc.ev); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

// A commit that carries the turn's last messages reads back as if they had been recorded on
// their own: resume and replay see the same turn either way.
func TestTurnLogExpandsCommitTail(t *testing.T) {
	ctx := context.Background()
	js := startJS(t)
	tl, err := NewTurnLog(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	sk := testKey("tail")
	opts := []events.Option{events.WithSession(events.NewSessionID(sk, 1).String()), events.WithTurn("t9"), events.WithTrace("tr")}
	result := llm.Message{Role: llm.RoleToolResult, ToolCallID: "c1", ToolName: "search", Content: []llm.Content{llm.Text("found")}}
	final := llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.Text("done")}, StopReason: llm.StopReasonStop}
	stored := []events.Any{
		events.New(events.TurnStarted{Turn: "t9", Trigger: events.InboxRef{Seq: 9}, Model: events.ModelRef{ID: "m"},
			Input: []llm.Message{llm.UserText("q", 1)}}, opts...),
		events.New(events.MessageEnd{Index: 1, Message: llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.ToolCall("c1", "search", nil)}}}, opts...),
		events.New(events.TurnCommitted{FirstSeq: 4, LastSeq: 4, Messages: 4,
			Tail: []events.MessageEnd{{Index: 2, Message: result}, {Index: 3, Message: final}}}, opts...),
	}
	var commitSeq uint64
	for _, ev := range stored {
		if commitSeq, err = tl.Append(ctx, sk, ev); err != nil {
			t.Fatal(err)
		}
	}
	got, err := tl.ReadTurn(ctx, sk, "t9", 0)
	if err != nil {
		t.Fatal(err)
	}
	want := "[t9/turn_started t9/message_end t9/message_end t9/message_end t9/turn_committed]"
	if fmt.Sprint(kinds(got)) != want {
		t.Fatalf("ReadTurn = %v, want %s", kinds(got), want)
	}
	for i, wantMsg := range []llm.Message{result, final} {
		r := got[2+i]
		e, ok := r.Event.(*events.Event[events.MessageEnd])
		if !ok {
			t.Fatalf("record %d is %T", 2+i, r.Event)
		}
		if e.Data.Index != 2+i || e.Data.Message.TextContent() != wantMsg.TextContent() || e.Data.Message.Role != wantMsg.Role {
			t.Errorf("record %d = %+v, want index %d %+v", 2+i, e.Data, 2+i, wantMsg)
		}
		if r.Seq != commitSeq || e.ID != fmt.Sprintf("t9-m%d", 2+i) || e.Session != stored[2].EventMeta().Session || e.Trace != "tr" {
			t.Errorf("record %d: seq %d id %q session %q trace %q", 2+i, r.Seq, e.ID, e.Session, e.Trace)
		}
		if r.Subject != events.AgentEvtSubject(sk, events.EvtKindMessageEnd) {
			t.Errorf("record %d subject %s", 2+i, r.Subject)
		}
	}
	var replayed []TurnRecord
	for r, err := range tl.Replay(ctx, sk, ReplayFrom{}) {
		if err != nil {
			t.Fatal(err)
		}
		replayed = append(replayed, r)
	}
	if fmt.Sprint(kinds(replayed)) != want {
		t.Fatalf("Replay = %v, want %s", kinds(replayed), want)
	}
	// A tail entry without a role is refused like a message_end without one.
	bad := events.New(events.TurnCommitted{Tail: []events.MessageEnd{{Index: 1}}}, opts...)
	if _, err := tl.Append(ctx, sk, bad); err == nil || !strings.Contains(err.Error(), "tail[0].message.role") {
		t.Fatalf("append commit with a bad tail: %v", err)
	}
}

// Turns that record their start with their first record (the steps of a turn_started, or the
// started of a commit) read back like turns that recorded everything on its own.
func TestTurnLogExpandsCarriedRecords(t *testing.T) {
	ctx := context.Background()
	js := startJS(t)
	tl, err := NewTurnLog(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	opts := func(turn string) []events.Option {
		return []events.Option{events.WithSession("webhook:b:private:u#1"), events.WithTurn(turn), events.WithTrace("tr")}
	}
	start := func(turn string, steps ...events.MessageEnd) events.TurnStarted {
		return events.TurnStarted{Turn: turn, Trigger: events.InboxRef{Seq: 7}, Model: events.ModelRef{ID: "m"},
			Input: []llm.Message{llm.UserText("q", 1)}, Steps: steps}
	}
	ask := events.MessageEnd{Index: 1, Message: llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.ToolCall("c1", "search", nil)}}}
	result := events.MessageEnd{Index: 2, Message: llm.Message{Role: llm.RoleToolResult, ToolCallID: "c1", ToolName: "search", Content: []llm.Content{llm.Text("found")}}}
	final := func(i int) events.MessageEnd {
		return events.MessageEnd{Index: i, Message: llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.Text("done")}, StopReason: llm.StopReasonStop}}
	}
	tests := []struct {
		name, turn string
		stored     func(turn string) []events.Any
		want       string
		indexes    []int // message_end indexes in order
	}{
		{"tool turn: start with its first step, commit with its tail", "ta", func(turn string) []events.Any {
			s := start(turn, ask)
			return []events.Any{events.New(s, opts(turn)...),
				events.New(events.TurnCommitted{Messages: 4, Tail: []events.MessageEnd{result, final(3)}}, opts(turn)...)}
		}, "[ta/turn_started ta/message_end ta/message_end ta/message_end ta/turn_committed]", []int{1, 2, 3}},
		{"plain turn: one commit with start and tail", "tb", func(turn string) []events.Any {
			s := start(turn)
			return []events.Any{events.New(events.TurnCommitted{Messages: 2, Tail: []events.MessageEnd{final(1)}, Started: &s}, opts(turn)...)}
		}, "[tb/turn_started tb/message_end tb/turn_committed]", []int{1}},
		{"older layout: every record on its own", "tc", func(turn string) []events.Any {
			return []events.Any{events.New(start(turn), opts(turn)...), events.New(ask, append(opts(turn), events.WithID(turn+"-m1"))...),
				events.New(events.TurnCommitted{Messages: 2}, opts(turn)...)}
		}, "[tc/turn_started tc/message_end tc/turn_committed]", []int{1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sk := testKey("carried-" + tt.turn)
			for _, ev := range tt.stored(tt.turn) {
				if _, err := tl.Append(ctx, sk, ev); err != nil {
					t.Fatal(err)
				}
			}
			got, err := tl.ReadTurn(ctx, sk, tt.turn, 0)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(kinds(got)) != tt.want {
				t.Fatalf("ReadTurn = %v, want %s", kinds(got), tt.want)
			}
			var idx []int
			for _, r := range got {
				switch e := r.Event.(type) {
				case *events.Event[events.MessageEnd]:
					idx = append(idx, e.Data.Index)
					if e.ID != fmt.Sprintf("%s-m%d", tt.turn, e.Data.Index) || e.Trace != "tr" {
						t.Errorf("message_end id %q trace %q", e.ID, e.Trace)
					}
				case *events.Event[events.TurnStarted]:
					if e.Data.Turn != tt.turn || len(e.Data.Input) != 1 || r.Subject != events.AgentEvtSubject(sk, events.EvtKindTurnStarted) {
						t.Errorf("turn_started %+v on %s", e.Data, r.Subject)
					}
				}
			}
			if fmt.Sprint(idx) != fmt.Sprint(tt.indexes) {
				t.Errorf("message_end indexes %v, want %v", idx, tt.indexes)
			}
		})
	}
}

// TestTurnLogBothLayouts: turn events are stored on one subject per session and kind, however
// many turns a session has; events an older version stored on agent.evt.<sk>.<turn>.<kind> are
// still read by ReadTurn, ReadTurnSince, Replay and Committed next to the new ones.
func TestTurnLogBothLayouts(t *testing.T) {
	ctx := context.Background()
	js := startJS(t)
	tl, err := NewTurnLog(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	sk := testKey("layouts")
	// An old version's turn "old": published on its legacy subjects.
	for _, ev := range turnEvents(sk, "old", 1) {
		m, err := events.NewMsg(events.AgentEvtTurnSubject(sk, "old", events.EvtKind(ev.EventPayload().EventType())), ev)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	since := time.Now().Add(-time.Minute)
	for i := range 10 {
		for _, ev := range turnEvents(sk, fmt.Sprintf("n%d", i), uint64(i+2)) {
			if _, err := tl.Append(ctx, sk, ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	st, err := js.Stream(ctx, events.StreamAgentEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(events.PrefixAgentEvt+".>"))
	if err != nil {
		t.Fatal(err)
	}
	// 4 kinds of the legacy turn + 4 kinds shared by the ten new turns.
	if n := len(info.State.Subjects); n != 8 {
		t.Fatalf("%d subjects after 11 turns, want 8: %v", n, info.State.Subjects)
	}
	want := "[%s/turn_started %s/message_end %s/tool_call_requested %s/message_end %s/turn_committed]"
	for _, turn := range []string{"old", "n0", "n9"} {
		got, err := tl.ReadTurn(ctx, sk, turn, 0)
		if err != nil {
			t.Fatal(err)
		}
		if w := strings.ReplaceAll(want, "%s", turn); fmt.Sprint(kinds(got)) != w {
			t.Fatalf("ReadTurn(%s) = %v, want %s", turn, kinds(got), w)
		}
		if got, err := tl.ReadTurnSince(ctx, sk, turn, since); err != nil || len(got) != 5 {
			t.Fatalf("ReadTurnSince(%s) = %v, %v", turn, kinds(got), err)
		}
		if ok, err := tl.Committed(ctx, sk, turn, time.Time{}); err != nil || !ok {
			t.Fatalf("Committed(%s) = %v, %v", turn, ok, err)
		}
	}
	if ok, err := tl.Committed(ctx, sk, "nope", since); err != nil || ok {
		t.Fatalf("Committed(nope) = %v, %v", ok, err)
	}
	n := 0
	for r, err := range tl.Replay(ctx, sk, ReplayFrom{}) {
		if err != nil {
			t.Fatal(err)
		}
		if r.Turn == "" {
			t.Fatalf("record %d without its turn", r.Seq)
		}
		n++
	}
	if n != 55 {
		t.Fatalf("replay: %d records, want 55", n)
	}
}
