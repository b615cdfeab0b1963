package events

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/nats-io/nats.go"
)

func goodIM() IMMessage {
	return IMMessage{
		Platform: "qq", Bot: "10001", MessageID: "m1",
		Scene:  Scene{Type: ScopeGroup, ID: "g1"},
		Sender: Sender{ID: "u1", Name: "Alice", Roles: []string{RoleMember}},
		Content: Segments{
			AtSeg("10001", "bot"), TextSeg("hello "), ImageSeg("https://x/y.png"),
			{Type: SegRecord, Data: map[string]any{"base64": "AAAA", "format": "wav"}},
			{Type: SegFace, Data: map[string]any{"face_id": 14.0}},
			ReplySeg("m0"),
			{Type: "markdown", Data: map[string]any{"x": 1}}, // unknown types pass through
		},
		Time: 1767000000000,
	}
}

// roundTrip marshals ev, unmarshals into a fresh Event[P] and via Decode.
func roundTrip[P Payload](t *testing.T, ev *Event[P]) *Event[P] {
	t.Helper()
	data, err := Marshal(ev)
	if err != nil {
		t.Fatalf("Marshal %s: %v", ev.Type, err)
	}
	var back Event[P]
	if err := Unmarshal(data, &back); err != nil {
		t.Fatalf("Unmarshal %s: %v\n%s", ev.Type, err, data)
	}
	anyEv, err := Decode(data)
	if err != nil {
		t.Fatalf("Decode %s: %v", ev.Type, err)
	}
	if _, ok := anyEv.(*Event[P]); !ok {
		t.Fatalf("Decode %s returned %T", ev.Type, anyEv)
	}
	again, _ := json.Marshal(&back)
	if string(again) != string(data) {
		t.Errorf("%s: not stable across a round trip:\n%s\n%s", ev.Type, data, again)
	}
	return &back
}

func TestCodecRoundTripEveryType(t *testing.T) {
	k := goodIM().SessionKey()
	sid := WithSession(NewSessionID(k, 1).String())
	im := goodIM()
	asst := llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.Text("hi"), llm.ToolCall("c1", "bash", map[string]any{"cmd": "ls"})},
		Model: "m", StopReason: llm.StopReasonToolUse, Usage: &llm.Usage{Input: 3, Output: 4, TotalTokens: 7}, Timestamp: 5}
	res := ToolResult{CallID: "c1", Tool: "bash", Content: []llm.Content{llm.Text("ok")}, Details: json.RawMessage(`{"exit":0}`)}
	seen := map[string]bool{}
	check := func(typ string) { seen[typ] = true }

	back := roundTrip(t, New(im, WithSession(k.String()), WithTrace(NewTraceID())))
	if back.Data.Content.PlainText() != "@bot hello " || !back.Data.Content.HasMedia() || back.Data.Content[4].Str("face_id") != "14" {
		t.Errorf("im content after round trip: %+v", back.Data.Content)
	}
	check(TypeIMMessage)
	roundTrip(t, New(UserMessage{Message: im, Text: "hello", IMSeq: 9}, sid))
	check(TypeUserMessage)
	roundTrip(t, New(Listen{Message: im}, sid))
	check(TypeListen)
	roundTrip(t, New(Command{Name: "reset", Args: []string{"all"}, Raw: "all", Message: &im}, sid))
	check(TypeCommand)
	roundTrip(t, New(Steer{Text: "stop that", Sender: Sender{ID: "u1", Roles: []string{RoleMaster}}}, sid))
	check(TypeSteer)
	roundTrip(t, New(FollowUp{Text: "and then", Sender: Sender{ID: "u1"}}, sid))
	check(TypeFollowUp)
	roundTrip(t, New(SubagentResult{TaskID: "t1", Content: []llm.Content{llm.Text("done")}}, sid))
	check(TypeSubagentResult)
	roundTrip(t, New(Scheduled{ScheduleID: "s1", Text: "standup", CreatedBy: Sender{ID: "u1"}}, sid))
	check(TypeScheduled)
	roundTrip(t, New(TaskResult{TaskID: "t2", Kind: DeferredKindTool, Label: "image", Content: []llm.Content{llm.Text("![cat](media://x.png)")}}, sid))
	check(TypeTaskResult)
	roundTrip(t, New(Abort{Sender: Sender{ID: "u1"}}, sid))
	check(TypeAbort)
	roundTrip(t, New(TurnStarted{Turn: "T1", Trigger: InboxRef{Seq: 3, ID: "e1"}, Model: ModelRef{ID: "gpt", Provider: "openai"},
		ContextSeq: 10, Input: []llm.Message{{Role: llm.RoleUser, Content: []llm.Content{llm.Text("hello")}, Timestamp: 1}}}, sid, WithTurn("T1")))
	check(TypeTurnStarted)
	if got := roundTrip(t, New(MessageEnd{Index: 1, Message: asst}, sid, WithTurn("T1"))); got.Data.Message.Content[1].Arguments["cmd"] != "ls" {
		t.Errorf("message_end lost tool call args: %+v", got.Data.Message)
	}
	check(TypeMessageEnd)
	roundTrip(t, New(ToolCallRequested{CallID: "c1", Tool: "bash", Args: map[string]any{"cmd": "ls"}}, sid, WithTurn("T1")))
	check(TypeToolCallRequested)
	roundTrip(t, New(ToolResultRecorded{Result: res, Seq: 4}, sid, WithTurn("T1")))
	check(TypeToolResultRecorded)
	roundTrip(t, New(OutboundPublished{OutID: OutID("T1", 0)}, sid, WithTurn("T1")))
	check(TypeOutboundPublished)
	roundTrip(t, New(TurnCommitted{FirstSeq: 11, LastSeq: 14, Messages: 4}, sid, WithTurn("T1")))
	check(TypeTurnCommitted)
	roundTrip(t, New(TurnFailed{Reason: FailLeaseLost, Retryable: true}, sid, WithTurn("T1")))
	check(TypeTurnFailed)
	roundTrip(t, New(CtxMessages{Messages: []llm.Message{asst}}, sid))
	check(TypeCtxMessages)
	roundTrip(t, New(CtxSummary{Summary: "they talked", AnchorSeq: 9}, sid))
	check(TypeCtxSummary)
	roundTrip(t, New(CtxLeaf{LeafSeq: 4, BranchFrom: 5, BranchTo: 9, BranchSummary: "tried X"}, sid))
	check(TypeCtxLeaf)
	roundTrip(t, New(LiveDelta{Kind: "text_delta", Delta: "he", Seq: 1}, sid))
	check(TypeLiveDelta)
	roundTrip(t, New(ToolCall{CallID: "c1", Tool: "bash", Args: map[string]any{}, SessionKey: k,
		Caller: Caller{Platform: "qq", Scope: ScopeGroup, Roles: []string{RoleMaster}}}, sid))
	check(TypeToolCall)
	roundTrip(t, New(ToolCall{CallID: "c2", Tool: "activate_skill", Args: map[string]any{}, SessionKey: k,
		Caller: Caller{Platform: "qq", Scope: ScopeGroup}, Model: "ollama/qwen3:8b", ModelSize: "small", SkillChars: 1500}, sid))
	roundTrip(t, New(res, sid))
	check(TypeToolResult)
	roundTrip(t, New(Outbound{OutID: OutID("T1", 0), Turn: "T1", Platform: "qq", Bot: "10001", Scene: im.Scene, ReplyTo: "m1",
		Content: Segments{TextSeg("hi")}}, sid))
	check(TypeIMOut)
	roundTrip(t, New(Receipt{OutID: "T1-0", Platform: "qq", Bot: "10001", Scene: im.Scene, MessageID: "p9", Time: 1,
		Content: Segments{TextSeg("hi")}, Sender: Sender{ID: "10001"}}, sid))
	check(TypeIMSent)
	roundTrip(t, New(ReceiptBatch{Receipts: []Receipt{
		{OutID: "t2048-0", Turn: "t2048", Platform: "qq", Bot: "10001", Scene: im.Scene, MessageID: "p10", Time: 1, Content: Segments{TextSeg("a")}, Sender: Sender{ID: "10001"}},
		{OutID: "t3071-1", Turn: "t3071", Platform: "qq", Bot: "10001", Scene: Scene{Type: ScopePrivate, ID: "u2"}, MessageID: "p11", Time: 2, Sender: Sender{ID: "10001"}},
	}}, sid))
	check(TypeIMSentBatch)
	roundTrip(t, New(SubagentTask{TaskID: "t1", Parent: k, Prompt: "research", Caller: Caller{Platform: "qq", Scope: ScopeGroup}}))
	check(TypeSubagentTask)
	roundTrip(t, New(DeferredTask{TaskID: "t2", Kind: "compact", Payload: json.RawMessage(`{"a":1}`)}))
	check(TypeDeferredTask)
	dl := DeadLetter{Role: RoleEgress, Reason: DLQPoison, Error: "platform said no", Subject: "im.out.x.y.group.z"}
	dl.SetBody([]byte{0xff, 0x00})
	if got := roundTrip(t, New(dl)); string(got.Data.Body()) != "\xff\x00" {
		t.Errorf("dead letter body %q", got.Data.Body())
	}
	check(TypeDeadLetter)

	for _, typ := range Types() {
		if !seen[typ] {
			t.Errorf("type %s has no round-trip case", typ)
		}
	}
}

func TestMalformedEvents(t *testing.T) {
	valid := func(mut func(m map[string]any)) []byte {
		ev := New(goodIM(), WithID("e1"), WithTime(1))
		b, _ := json.Marshal(ev)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		mut(m)
		out, _ := json.Marshal(m)
		return out
	}
	data := func(m map[string]any) map[string]any { return m["data"].(map[string]any) }
	tests := []struct {
		name string
		in   []byte
		want string // exact error text
		is   error
	}{
		{"not json", []byte(`{"type":`), "im.message event: malformed JSON: unexpected end of JSON input", nil},
		{"wrong json type", valid(func(m map[string]any) { data(m)["sender"] = map[string]any{"id": 7} }),
			"im.message event: data.sender.id: want string, got JSON number", nil},
		{"missing type", valid(func(m map[string]any) { delete(m, "type") }), "im.message event: type is required", nil},
		{"other type", valid(func(m map[string]any) { m["type"] = "im.out" }), `im.message event: type "im.out" does not match, want "im.message"`, nil},
		{"missing v", valid(func(m map[string]any) { delete(m, "v") }), "im.message event: v is required (a positive schema version)", nil},
		{"future v", valid(func(m map[string]any) { m["v"] = 99 }), "im.message event: v 99 is newer than supported version 1", ErrUnsupportedVersion},
		{"missing id", valid(func(m map[string]any) { delete(m, "id") }), "im.message event: id is required", nil},
		{"missing time", valid(func(m map[string]any) { delete(m, "time") }), "im.message event: time is required (Unix milliseconds)", nil},
		{"bad session", valid(func(m map[string]any) { m["session"] = "nope" }), `im.message event: session "nope" is not a session id or key`, nil},
		{"missing data", valid(func(m map[string]any) { delete(m, "data") }), "im.message event: platform is required", nil},
		{"missing sender id", valid(func(m map[string]any) { delete(data(m)["sender"].(map[string]any), "id") }), "im.message event: sender.id is required", nil},
		{"missing message id", valid(func(m map[string]any) { delete(data(m), "messageId") }), "im.message event: messageId is required", nil},
		{"bad scene type", valid(func(m map[string]any) { data(m)["scene"].(map[string]any)["type"] = "guild" }),
			`im.message event: scene.type "guild" must be private, group or channel`, nil},
		{"empty content", valid(func(m map[string]any) { data(m)["content"] = []any{} }), "im.message event: content must have at least one segment", nil},
		{"text without text", valid(func(m map[string]any) {
			data(m)["content"] = []any{map[string]any{"type": "text", "data": map[string]any{}}}
		}), "im.message event: content[0].data.text is required (a string)", nil},
		{"image without ref", valid(func(m map[string]any) {
			data(m)["content"] = []any{map[string]any{"type": "text", "data": map[string]any{"text": "x"}}, map[string]any{"type": "image", "data": map[string]any{}}}
		}), "im.message event: content[1].data needs one of url, file, src, object, base64", nil},
		{"segment without type", valid(func(m map[string]any) { data(m)["content"] = []any{map[string]any{"data": map[string]any{}}} }),
			"im.message event: content[0].type is required", nil},
		{"at without id", valid(func(m map[string]any) {
			data(m)["content"] = []any{map[string]any{"type": "at", "data": map[string]any{"name": "x"}}}
		}),
			"im.message event: content[0].data needs id (or user_id, qq)", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ev Event[IMMessage]
			err := Unmarshal(tt.in, &ev)
			if err == nil {
				t.Fatalf("accepted %s", tt.in)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v does not wrap %v", err, tt.is)
			}
			if err.Error() != tt.want {
				t.Errorf("error\n got %q\nwant %q", err.Error(), tt.want)
			}
		})
	}
}

func TestMalformedInboxAndOthers(t *testing.T) {
	k := goodIM().SessionKey()
	tests := []struct {
		ev   Any
		want string
	}{
		{New(UserMessage{Message: IMMessage{Platform: "qq"}}), "inbox.user_message event: message.bot is required"},
		{New(Command{Name: "reset"}), "inbox.command event: message or sender is required (who issued the command)"},
		{New(Command{Sender: &Sender{ID: "u"}}), "inbox.command event: name is required"},
		{New(Steer{Sender: Sender{ID: "u"}}), "inbox.steer event: text is required"},
		{New(FollowUp{Text: "x"}), "inbox.follow_up event: sender.id is required"},
		{New(Scheduled{ScheduleID: "s", Text: "x"}), "inbox.scheduled event: createdBy.id is required"},
		{New(TurnStarted{Turn: "T"}), "evt.turn_started event: trigger.seq is required"},
		{New(TurnCommitted{FirstSeq: 5, LastSeq: 4}), "evt.turn_committed event: lastSeq 4 is before firstSeq 5"},
		{New(CtxMessages{}), "ctx.messages event: messages must have at least one message"},
		{New(CtxMessages{Messages: []llm.Message{{}}}), "ctx.messages event: messages[0].role is required"},
		{New(CtxSummary{Summary: "s"}), "ctx.summary event: anchorSeq is required"},
		{New(ToolCall{CallID: "c", Tool: "t", SessionKey: k, Caller: Caller{Platform: "qq", Scope: "room"}}),
			`tool.call event: caller.scope "room" must be private, group or channel`},
		{New(ToolCall{CallID: "c", Tool: "t"}), "tool.call event: sessionKey.platform is required"},
		{New(ToolResult{CallID: "c", Tool: "t", Content: []llm.Content{{}}}), "tool.result event: content[0].type is required"},
		{New(Outbound{OutID: "o", Platform: "qq", Bot: "b", Scene: Scene{Type: ScopeGroup, ID: "g"}}), "im.out event: content must have at least one segment"},
		{New(Receipt{OutID: "o", Platform: "qq", Bot: "b", Scene: Scene{Type: ScopeGroup, ID: "g"}, Time: 1}), "im.sent event: messageId is required"},
		{New(DeferredTask{TaskID: "t", Kind: "k", Payload: json.RawMessage("{")}), "task.deferred event: payload is not valid JSON"},
		{New(DeadLetter{Role: "egress", Reason: "poison", Error: "x"}), "dead_letter event: subject is required"},
		{&Event[IMMessage]{Meta: Meta{ID: "x", Time: 1, Type: TypeIMOut}, Data: goodIM()}, `im.message event: type "im.out" does not match, want "im.message"`},
		{&Event[IMMessage]{Meta: Meta{Time: 1}, Data: goodIM()}, "im.message event: id is required"},
	}
	for _, tt := range tests {
		_, err := Marshal(tt.ev)
		if err == nil || !errors.Is(err, ErrInvalid) || err.Error() != tt.want {
			t.Errorf("Marshal(%T):\n got %v\nwant %s", tt.ev.EventPayload(), err, tt.want)
		}
	}
}

func TestDecodeUnknownAndBlankMeta(t *testing.T) {
	_, err := Decode([]byte(`{"type":"im.nope","v":1,"id":"x","time":1,"data":{}}`))
	if !errors.Is(err, ErrUnknownType) || !errors.Is(err, ErrInvalid) || err.Error() != `event: unknown type "im.nope"` {
		t.Errorf("unknown type: %v", err)
	}
	_, err = Decode([]byte(`{"v":1}`))
	if err == nil || err.Error() != "event: type is required" {
		t.Errorf("missing type: %v", err)
	}
	// Blank type and v are filled by Marshal without changing the event.
	ev := &Event[Abort]{Meta: Meta{ID: "a", Time: 1}, Data: Abort{Sender: Sender{ID: "u"}}}
	data, err := Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type != "" || !strings.Contains(string(data), `"type":"inbox.abort","v":1`) {
		t.Errorf("marshal filled %s; event now %+v", data, ev.Meta)
	}
}

func TestNewMsgHeadersAndCorrelation(t *testing.T) {
	im := goodIM()
	trace := NewTraceID()
	sid := NewSessionID(im.SessionKey(), 2).String()
	tests := []struct {
		ev        Any
		subject   string
		wantMsgID string
	}{
		{New(im, WithSession(sid), WithTrace(trace), WithTurn("T")), IMInSubject(im.SessionKey()), "qq/10001/m1"},
		{New(ToolCall{CallID: "call-9", Tool: "bash", SessionKey: im.SessionKey(), Caller: Caller{Platform: "qq", Scope: ScopeGroup}}, WithID("e1")), ToolCallSubject("bash"), "call-9"},
		{New(Outbound{OutID: OutID("T", 2), Platform: "qq", Bot: "b", Scene: im.Scene, Content: Segments{TextSeg("x")}}), IMOutSubject(im.SessionKey()), "T-2"},
		{New(Abort{Sender: Sender{ID: "u"}}, WithID("ev-1")), AgentInSubject(im.SessionKey()), "ev-1"},
	}
	for _, tt := range tests {
		msg, err := NewMsg(tt.subject, tt.ev)
		if err != nil {
			t.Fatal(err)
		}
		if got := msg.Header.Get(nats.MsgIdHdr); got != tt.wantMsgID {
			t.Errorf("%s: Nats-Msg-Id %q, want %q", tt.ev.EventMeta().Type, got, tt.wantMsgID)
		}
		if msg.Header.Get(HeaderType) != tt.ev.EventPayload().EventType() || msg.Header.Get(HeaderEventID) != tt.ev.EventMeta().ID {
			t.Errorf("type/id headers: %v", msg.Header)
		}
	}

	msg, _ := NewMsg("x", tests[0].ev)
	c := CorrelationFromHeader(msg.Header)
	if c != (Correlation{Session: sid, Turn: "T", Trace: trace}) {
		t.Errorf("correlation %+v", c)
	}
	if tp := msg.Header.Get(HeaderTraceparent); TraceIDFromTraceparent(tp) != trace || len(tp) != 55 {
		t.Errorf("traceparent %q", tp)
	}
	// A third party that only sends traceparent still gets its trace id read.
	h := nats.Header{}
	h.Set(HeaderTraceparent, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if got := CorrelationFromHeader(h).Trace; got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("trace from traceparent %q", got)
	}
	// Body without correlation, headers with it: DecodeMsg fills from headers.
	ev := New(im, WithID("z"))
	m2, _ := NewMsg("x", ev)
	SetCorrelation(m2.Header, Correlation{Session: sid, Turn: "T9", Trace: trace})
	got, err := DecodeMsg(m2)
	if err != nil {
		t.Fatal(err)
	}
	if mm := got.EventMeta(); mm.Session != sid || mm.Turn != "T9" || mm.Trace != trace {
		t.Errorf("DecodeMsg meta %+v", mm)
	}
	var typed Event[IMMessage]
	if err := UnmarshalMsg(m2, &typed); err != nil || typed.Turn != "T9" {
		t.Errorf("UnmarshalMsg: %v %+v", err, typed.Meta)
	}
}

func TestSegmentsHelpers(t *testing.T) {
	ss := Segments{AtSeg("42", ""), TextSeg("hi"), {Type: SegAt, Data: map[string]any{"qq": 7.0}}}
	if !ss.Mentions("42") || !ss.Mentions("7") || ss.Mentions("8") {
		t.Error("Mentions")
	}
	if got := ss.PlainText(); got != "@42 hi@7 " {
		t.Errorf("PlainText %q", got)
	}
	if ss.HasMedia() {
		t.Error("HasMedia")
	}
}

func BenchmarkMarshalIMMessage(b *testing.B) {
	ev := New(goodIM(), WithSession("qq:10001:group:g1#1"), WithTrace(NewTraceID()))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Marshal(ev); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUnmarshalIMMessage(b *testing.B) {
	data, _ := Marshal(New(goodIM(), WithSession("qq:10001:group:g1#1")))
	b.ReportAllocs()
	for b.Loop() {
		var ev Event[IMMessage]
		if err := Unmarshal(data, &ev); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeCtxMessages4(b *testing.B) {
	msgs := make([]llm.Message, 4)
	for i := range msgs {
		msgs[i] = llm.Message{Role: llm.RoleUser, Content: []llm.Content{llm.Text(strings.Repeat("x", 200))}, Timestamp: int64(i + 1)}
	}
	data, _ := Marshal(New(CtxMessages{Messages: msgs}, WithSession("qq:10001:group:g1#1")))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}

func TestMarshalNil(t *testing.T) {
	var ev *Event[Abort]
	if _, err := Marshal(ev); !errors.Is(err, ErrInvalid) {
		t.Errorf("typed nil: %v", err)
	}
	if _, err := NewMsg("x", ev); !errors.Is(err, ErrInvalid) {
		t.Errorf("NewMsg typed nil: %v", err)
	}
	if _, err := Marshal(nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("nil: %v", err)
	}
}
