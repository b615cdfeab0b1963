package turn

import (
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
)

func TestBuildSystemPrompt(t *testing.T) {
	now := time.Date(2026, 12, 2, 7, 30, 5, 0, time.FixedZone("CET", 3600))
	const ctxPrivate = "\n## Context\n- Platform: webhook, bot: b1\n- Chat: private u1\n- Time: 2026-12-02T06:30:05Z\n"
	const ctxGroup = "\n## Context\n- Platform: qq, bot: b2\n- Chat: group g7\n- Time: 2026-12-02T06:30:05Z\n"
	private := events.IMMessage{Platform: "webhook", Bot: "b1", Scene: events.Scene{Type: events.ScopePrivate, ID: "u1"}}
	group := events.IMMessage{Platform: "qq", Bot: "b2", Scene: events.Scene{Type: events.ScopeGroup, ID: "g7"}}
	tests := []struct {
		name     string
		m        events.IMMessage
		tools    []events.ToolEntry
		skill    string
		sections []Section
		want     string
	}{
		{name: "private, nothing else", m: private, want: promptIntro + ctxPrivate},
		{name: "group", m: group, want: promptIntro + ctxGroup + promptGroup},
		{name: "tools", m: private, tools: []events.ToolEntry{{Name: "ask_user"}, {Name: "bench_echo"}},
			want: promptIntro + ctxPrivate + "\n## Tools\nCall a tool when it helps; never invent results. Available: ask_user, bench_echo.\n"},
		{name: "skill text trimmed", m: private, skill: "  ## Skill\nbody \n",
			want: promptIntro + ctxPrivate + "\n## Skill\nbody\n"},
		{name: "blank skill text still separates", m: private, skill: " ",
			want: promptIntro + ctxPrivate + "\n\n"},
		{name: "sections, blank ones left out", m: group, tools: []events.ToolEntry{{Name: "t"}},
			sections: []Section{{Title: "Profile", Body: " likes tea \n"}, {Title: "Empty", Body: "  "}, {Title: "SOUL.md", Body: "be kind"}},
			want: promptIntro + ctxGroup + promptGroup + "\n## Tools\nCall a tool when it helps; never invent results. Available: t.\n" +
				"\n## Profile\nlikes tea\n\n## SOUL.md\nbe kind\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := buildSystemPrompt(now, tc.m, tc.tools, tc.skill, tc.sections)
			if got != tc.want {
				t.Errorf("got\n%q\nwant\n%q", got, tc.want)
			}
			if !strings.HasPrefix(got, "You are a helpful assistant") {
				t.Errorf("prompt does not start with the identity: %q", got)
			}
		})
	}
}

func BenchmarkBuildSystemPrompt(b *testing.B) {
	now := time.Now()
	m := events.IMMessage{Platform: "webhook", Bot: "bench", Scene: events.Scene{Type: events.ScopePrivate, ID: "u-000123"}}
	tools := []events.ToolEntry{{Name: "ask_user"}, {Name: "activate_skill"}, {Name: "user_profile"}, {Name: "spawn_task"}, {Name: "bench_echo"}}
	b.ReportAllocs()
	for b.Loop() {
		_ = buildSystemPrompt(now, m, tools, "", nil)
	}
}
