package events

import (
	"errors"
	"strings"
	"testing"
)

var testKeys = []SessionKey{
	{Platform: "qq", Bot: "10001", Scope: ScopeGroup, Scene: "123456"},
	{Platform: "webhook", Bot: "demo", Scope: ScopePrivate, Scene: "alice@example.com"},
	{Platform: "discord", Bot: "b.1", Scope: ScopeChannel, Scene: "guild:chan#general"},
	{Platform: "tg", Bot: "bot", Scope: ScopeGroup, Scene: "a b*>c.d"},
	{Platform: "wx", Bot: "机器人", Scope: ScopePrivate, Scene: "用户"},
}

func TestSessionKeyRoundTrip(t *testing.T) {
	for _, k := range testKeys {
		got, err := ParseSessionKey(k.String())
		if err != nil || got != k {
			t.Errorf("ParseSessionKey(%q) = %+v, %v", k.String(), got, err)
		}
		got, err = ParseSessionKeyToken(k.Token())
		if err != nil || got != k {
			t.Errorf("ParseSessionKeyToken(%q) = %+v, %v", k.Token(), got, err)
		}
		if !subjectSafeKVKey(k.Token()) {
			t.Errorf("token %q of %v is not subject/KV safe", k.Token(), k)
		}
		for _, epoch := range []uint64{0, 1, 42} {
			id := NewSessionID(k, epoch)
			got, err := ParseSessionID(id.String())
			if err != nil || got != id {
				t.Errorf("ParseSessionID(%q) = %+v, %v", id.String(), got, err)
			}
		}
	}
}

// Token is a one-pass EncodeToken(String()); the subjects and KV keys already stored depend on
// it producing exactly that.
func TestSessionKeyTokenIsEncodedString(t *testing.T) {
	keys := append([]SessionKey{{}, {Platform: "p", Bot: "b", Scope: ScopeGroup, Scene: ""}, {Scene: "=3A:=="}}, testKeys...)
	for _, k := range keys {
		if got, want := k.Token(), EncodeToken(k.String()); got != want {
			t.Errorf("%+v: Token() = %q, EncodeToken(String()) = %q", k, got, want)
		}
	}
}

// The session subjects, built in one allocation (SessionKey.subject), are exactly their
// DESIGN.md §3 shapes: streams, consumers and permissions filter on them.
func TestSessionSubjectsExact(t *testing.T) {
	for _, k := range testKeys {
		tok := k.Token()
		id := NewSessionID(k, 7)
		for got, want := range map[string]string{
			AgentInSubject(k):                            "agent.in." + tok,
			AgentLiveSubject(k):                          "agent.live." + tok,
			ScheduleSubject(k, "daily standup"):          "schedule." + tok + "." + EncodeToken("daily standup"),
			AgentEvtSubject(k, "message_end"):            "agent.evt." + tok + ".message_end",
			AgentEvtTurnSubject(k, "t.1", "message_end"): "agent.evt." + tok + "." + EncodeToken("t.1") + ".message_end",
			AgentEvtTurnFilter(k, "t.1"):                 "agent.evt." + tok + "." + EncodeToken("t.1") + ".*",
			AgentEvtSessionFilter(k):                     "agent.evt." + tok + ".>",
			AgentCtxSubject(id):                          "agent.ctx." + tok + ".7",
			ToolResultSubject(k):                         "tool.result." + tok,
			ToolResultCallSubject(k, "call_1.x"):         "tool.result." + tok + "." + EncodeToken("call_1.x"),
			ToolResultLegacySessionFilter(k):             "tool.result." + tok + ".*",
		} {
			if got != want {
				t.Errorf("%+v: got %q, want %q", k, got, want)
			}
		}
	}
}

func BenchmarkSessionKeyToken(b *testing.B) {
	k := SessionKey{Platform: "webhook", Bot: "bench", Scope: ScopePrivate, Scene: "u-000123"}
	b.ReportAllocs()
	for b.Loop() {
		_ = k.Token()
	}
}

func TestSessionKeyInvalid(t *testing.T) {
	tests := []struct{ in, reason string }{
		{"qq:1:group", "want platform:botId:scope:sceneId"},
		{":1:group:2", "platform is required"},
		{"qq::group:2", "bot is required"},
		{"qq:1:guild:2", `scope "guild" must be private, group or channel`},
		{"qq:1:group:", "scene is required"},
	}
	for _, tt := range tests {
		_, err := ParseSessionKey(tt.in)
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.reason) {
			t.Errorf("ParseSessionKey(%q) = %v; want ErrInvalid with %q", tt.in, err, tt.reason)
		}
	}
	if err := (SessionKey{Platform: "a:b", Bot: "x", Scope: ScopeGroup, Scene: "s"}).Validate(); err == nil ||
		!strings.Contains(err.Error(), "platform") {
		t.Errorf("platform with ':' accepted: %v", err)
	}
	for _, s := range []string{"qq:1:group:2#0", "qq:1:group:2#01"} {
		// Non-canonical epochs are read as part of a bare key's scene, never as an epoch.
		id, err := ParseSessionID(s)
		if err != nil || id.Epoch != 0 {
			t.Errorf("ParseSessionID(%q) = %+v, %v; want bare key", s, id, err)
		}
	}
}

func TestSubjectsRoundTrip(t *testing.T) {
	for _, k := range testKeys {
		for name, c := range map[string]struct {
			build func(SessionKey) string
			parse func(string) (SessionKey, error)
		}{
			"im.in":      {IMInSubject, ParseIMInSubject},
			"im.out":     {IMOutSubject, ParseIMOutSubject},
			"im.sent":    {IMSentSubject, ParseIMSentSubject},
			"agent.in":   {AgentInSubject, ParseAgentInSubject},
			"agent.live": {AgentLiveSubject, ParseAgentLiveSubject},
		} {
			subj := c.build(k)
			checkSubject(t, subj)
			got, err := c.parse(subj)
			if err != nil || got != k {
				t.Errorf("%s: parse(%q) = %+v, %v; want %+v", name, subj, got, err, k)
			}
		}
		if subj := AgentInSubject(k); subj != "agent.in."+k.Token() {
			t.Errorf("agent.in subject %q", subj)
		}

		subj := AgentEvtTurnSubject(k, "turn.1", EvtKindMessageEnd)
		checkSubject(t, subj)
		gk, turn, kind, err := ParseAgentEvtSubject(subj)
		if err != nil || gk != k || turn != "turn.1" || kind != EvtKindMessageEnd {
			t.Errorf("ParseAgentEvtSubject(%q) = %v %q %q %v", subj, gk, turn, kind, err)
		}

		id := NewSessionID(k, 7)
		subj = AgentCtxSubject(id)
		checkSubject(t, subj)
		if gid, err := ParseAgentCtxSubject(subj); err != nil || gid != id {
			t.Errorf("ParseAgentCtxSubject(%q) = %v, %v", subj, gid, err)
		}

		subj = ToolResultCallSubject(k, "call_1.x")
		checkSubject(t, subj)
		if gk, call, err := ParseToolResultSubject(subj); err != nil || gk != k || call != "call_1.x" {
			t.Errorf("ParseToolResultSubject(%q) = %v %q %v", subj, gk, call, err)
		}
		subj = ToolResultSubject(k)
		checkSubject(t, subj)
		if gk, call, err := ParseToolResultSubject(subj); err != nil || gk != k || call != "" {
			t.Errorf("ParseToolResultSubject(%q) = %v %q %v", subj, gk, call, err)
		}

		subj = ScheduleSubject(k, "daily standup")
		checkSubject(t, subj)
		if gk, sid, err := ParseScheduleSubject(subj); err != nil || gk != k || sid != "daily standup" {
			t.Errorf("ParseScheduleSubject(%q) = %v %q %v", subj, gk, sid, err)
		}
	}

	if tool, err := ParseToolCallSubject(ToolCallSubject("web.search")); err != nil || tool != "web.search" {
		t.Errorf("tool call round trip: %q %v", tool, err)
	}
	for _, kind := range []string{TaskKindSubagent, TaskKindDeferred} {
		subj := TaskSubject(kind, "t1")
		if k, id, err := ParseTaskSubject(subj); err != nil || k != kind || id != "t1" {
			t.Errorf("ParseTaskSubject(%q) = %q %q %v", subj, k, id, err)
		}
	}
	if TaskSubagentSubject("x") != "task.subagent.x" || TaskDeferredSubject("x") != "task.deferred.x" {
		t.Error("task subject builders")
	}
	if r, why, err := ParseDeadLetterSubject(DeadLetterSubject(RoleEgress, DLQPoison)); err != nil || r != RoleEgress || why != DLQPoison {
		t.Errorf("dead letter round trip: %q %q %v", r, why, err)
	}
}

func TestExactSubjects(t *testing.T) {
	k := SessionKey{Platform: "qq", Bot: "10001", Scope: ScopeGroup, Scene: "123"}
	tests := map[string]string{
		IMInSubject(k):                               "im.in.qq.10001.group.123",
		IMOutSubject(k):                              "im.out.qq.10001.group.123",
		IMSentSubject(k):                             "im.sent.qq.10001.group.123",
		IMSentPartSubject(k, "T1-0"):                 "im.sent.qq.10001.group.123.T1-0",
		IMSentPartSubject(k, "task-a.b-1"):           "im.sent.qq.10001.group.123.task-a=2Eb-1",
		AgentInSubject(k):                            "agent.in.qq=3A10001=3Agroup=3A123",
		AgentEvtSubject(k, "turn_started"):           "agent.evt.qq=3A10001=3Agroup=3A123.turn_started",
		AgentEvtTurnSubject(k, "T1", "turn_started"): "agent.evt.qq=3A10001=3Agroup=3A123.T1.turn_started",
		AgentEvtTurnFilter(k, "T1"):                  "agent.evt.qq=3A10001=3Agroup=3A123.T1.*",
		AgentEvtSessionFilter(k):                     "agent.evt.qq=3A10001=3Agroup=3A123.>",
		AgentCtxSubject(NewSessionID(k, 3)):          "agent.ctx.qq=3A10001=3Agroup=3A123.3",
		ToolCallSubject("bash"):                      "tool.call.bash",
		ToolResultSubject(k):                         "tool.result.qq=3A10001=3Agroup=3A123",
		ToolResultCallSubject(k, "c1"):               "tool.result.qq=3A10001=3Agroup=3A123.c1",
		ToolResultLegacySessionFilter(k):             "tool.result.qq=3A10001=3Agroup=3A123.*",
		ScheduleSubject(k, "s1"):                     "schedule.qq=3A10001=3Agroup=3A123.s1",
		AgentLiveSubject(k):                          "agent.live.qq=3A10001=3Agroup=3A123",
		DeadLetterSubject("egress", "poison"):        "dlq.egress.poison",
	}
	for got, want := range tests {
		if got != want {
			t.Errorf("subject %q, want %q", got, want)
		}
	}
}

func TestParseSubjectErrors(t *testing.T) {
	tests := []struct {
		name, subj, reason string
		parse              func(string) error
	}{
		{"wrong prefix", "im.out.qq.1.group.2", "want prefix im.in.", func(s string) error { _, err := ParseIMInSubject(s); return err }},
		{"too few", "im.in.qq.1.group", "want 4 tokens", func(s string) error { _, err := ParseIMInSubject(s); return err }},
		{"bad scope", "im.in.qq.1.guild.2", "must be private, group or channel", func(s string) error { _, err := ParseIMInSubject(s); return err }},
		{"bad token", "im.in.qq.1.group.=zz", "upper-case hex", func(s string) error { _, err := ParseIMInSubject(s); return err }},
		{"bad sk", "agent.in.notakey", "want platform:botId:scope:sceneId", func(s string) error { _, err := ParseAgentInSubject(s); return err }},
		{"bad epoch", "agent.ctx.qq=3A1=3Agroup=3A2.0", "epoch", func(s string) error { _, err := ParseAgentCtxSubject(s); return err }},
		{"bad task kind", "task.other.1", "task kind", func(s string) error { _, _, err := ParseTaskSubject(s); return err }},
	}
	for _, tt := range tests {
		err := tt.parse(tt.subj)
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.reason) {
			t.Errorf("%s: parse(%q) = %v; want ErrInvalid with %q", tt.name, tt.subj, err, tt.reason)
		}
	}
}

func checkSubject(t *testing.T, subj string) {
	t.Helper()
	for _, tok := range strings.Split(subj, ".") {
		if tok == "" || strings.ContainsAny(tok, "*> \t\r\n") {
			t.Errorf("subject %q has bad token %q", subj, tok)
		}
	}
}

func BenchmarkAgentInSubject(b *testing.B) {
	k := testKeys[0]
	b.ReportAllocs()
	for b.Loop() {
		_ = AgentInSubject(k)
	}
}

func TestIMSentPartSubject(t *testing.T) {
	k := SessionKey{Platform: "qq", Bot: "10001", Scope: ScopeGroup, Scene: "a.b:c"}
	tests := []struct {
		name, subj, wantOut string
		wantErr             bool
	}{
		{"part", IMSentPartSubject(k, "T1-0"), "T1-0", false},
		{"out id with dots", IMSentPartSubject(k, "refusal-in-webhook_b1.x"), "refusal-in-webhook_b1.x", false},
		{"older receipt: no out id", IMSentSubject(k), "", false},
		{"bad out token", IMSentSubject(k) + ".a=2e", "", true},
		{"too many tokens", IMSentPartSubject(k, "x") + ".y", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gk, out, err := ParseIMSentPartSubject(tt.subj)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseIMSentPartSubject(%q) = %v %q, want an error", tt.subj, gk, out)
				}
				return
			}
			if err != nil || gk != k || out != tt.wantOut {
				t.Fatalf("ParseIMSentPartSubject(%q) = %v %q %v, want %v %q", tt.subj, gk, out, err, k, tt.wantOut)
			}
			if sk, err := ParseIMSentSubject(tt.subj); err != nil || sk != k {
				t.Errorf("ParseIMSentSubject(%q) = %v %v", tt.subj, sk, err)
			}
		})
	}
}

func BenchmarkSessionIDString(b *testing.B) {
	id := NewSessionID(SessionKey{Platform: "webhook", Bot: "bench", Scope: ScopePrivate, Scene: "sabd99645355f7-123"}, 3)
	b.ReportAllocs()
	for b.Loop() {
		if id.String() == "" {
			b.Fatal("empty")
		}
	}
}
