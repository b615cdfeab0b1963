package events

import (
	"testing"
)

// FuzzParseSubjects: no parser panics, and whatever a parser accepts is canonical — building the
// subject again from the parsed parts gives back exactly the input.
func FuzzParseSubjects(f *testing.F) {
	k := SessionKey{Platform: "qq", Bot: "1", Scope: ScopeGroup, Scene: "a.b"}
	for _, s := range []string{
		IMInSubject(k), IMOutSubject(k), IMSentSubject(k), AgentInSubject(k), AgentLiveSubject(k),
		AgentEvtSubject(k, "message_end"), AgentEvtTurnSubject(k, "T", "message_end"), AgentCtxSubject(NewSessionID(k, 3)), ToolCallSubject("x.y"),
		ToolResultSubject(k), ToolResultCallSubject(k, "c"), TaskSubagentSubject("t"), ScheduleSubject(k, "s"), DeadLetterSubject("a", "b"),
		"im.in....", "agent.ctx.x.01", "agent.in.=", "",
		"a:b:group:c", "a:b:group:c#1", "a:b:group:c#01", "a:b:guild:c#1", ":b:group:c", "a::group:c", "a:b:group:", "a:b:group:#2", "a:b:group",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if k, err := ParseIMInSubject(s); err == nil && IMInSubject(k) != s {
			t.Fatalf("im.in %q -> %v -> %q", s, k, IMInSubject(k))
		}
		if k, err := ParseIMOutSubject(s); err == nil && IMOutSubject(k) != s {
			t.Fatalf("im.out %q", s)
		}
		if k, err := ParseAgentInSubject(s); err == nil && AgentInSubject(k) != s {
			t.Fatalf("agent.in %q -> %q", s, AgentInSubject(k))
		}
		if k, turn, kind, err := ParseAgentEvtSubject(s); err == nil {
			back := AgentEvtSubject(k, kind)
			if turn != "" {
				back = AgentEvtTurnSubject(k, turn, kind)
			}
			if back != s {
				t.Fatalf("agent.evt %q -> %q", s, back)
			}
		}
		if id, err := ParseAgentCtxSubject(s); err == nil && AgentCtxSubject(id) != s {
			t.Fatalf("agent.ctx %q -> %q", s, AgentCtxSubject(id))
		}
		if tool, err := ParseToolCallSubject(s); err == nil && ToolCallSubject(tool) != s {
			t.Fatalf("tool.call %q", s)
		}
		if k, c, err := ParseToolResultSubject(s); err == nil && (c == "" && ToolResultSubject(k) != s || c != "" && ToolResultCallSubject(k, c) != s) {
			t.Fatalf("tool.result %q", s)
		}
		if kind, id, err := ParseTaskSubject(s); err == nil && TaskSubject(kind, id) != s {
			t.Fatalf("task %q", s)
		}
		if k, id, err := ParseScheduleSubject(s); err == nil && ScheduleSubject(k, id) != s {
			t.Fatalf("schedule %q", s)
		}
		if k, err := ParseSessionKey(s); err == nil && k.String() != s {
			t.Fatalf("session key %q -> %q", s, k.String())
		}
		if id, err := ParseSessionID(s); err == nil && id.String() != s {
			t.Fatalf("session id %q -> %q", s, id.String())
		}
		if _, err := ParseSessionID(s); (err == nil) != validSessionID(s) {
			t.Fatalf("session id %q: ParseSessionID error %v, validSessionID %v", s, err, validSessionID(s))
		}
	})
}

// FuzzDecode: arbitrary bytes never panic the decoder, and an accepted event re-marshals.
func FuzzDecode(f *testing.F) {
	data, _ := Marshal(New(goodIM()))
	f.Add(data)
	f.Add([]byte(`{"type":"inbox.command","v":1,"id":"x","time":1,"data":{"name":"r","sender":{"id":"u"}}}`))
	f.Add([]byte(`{"type":"ctx.messages","v":1,"id":"x","time":1,"data":{"messages":[{"role":"user","content":null}]}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := Decode(b)
		if err != nil {
			return
		}
		if _, err := Marshal(ev); err != nil {
			t.Fatalf("decoded event does not marshal: %v\n%s", err, b)
		}
	})
}
