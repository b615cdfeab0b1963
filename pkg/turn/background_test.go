package turn

import (
	"fmt"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/skills"
	"github.com/agentbus/agentbus/pkg/toolbus/toolbustest"
)

func TestBackgroundSelection(t *testing.T) {
	cat := toolbustest.BackgroundCatalog(t)
	user := events.IMMessage{Platform: "webhook", Scene: events.Scene{Type: "private", ID: "u"}, Sender: events.Sender{ID: "u"}}
	store := skills.NewStore(nil)
	tests := []struct {
		name       string
		toolSearch bool
		skills     *skills.Store
		text       string
		want       string // names, in order
		note       bool
	}{
		{"toolSearch keeps the orchestration tools", true, nil, "draw a cat", "[tool_search run_deferred_task spawn_task ask_user]", true},
		{"toolSearch plus a trigger keyword", true, nil, "10分钟后提醒我喝水", "[schedule_followup tool_search run_deferred_task spawn_task ask_user]", true},
		{"no selection offers everything", false, nil, "hello", "[ask_user generate_image run_deferred_task schedule_followup spawn_task tool_search user_profile web_fetch]", false},
		{"skills selection without a keyword leaves the reminder out", false, store, "hello", "[ask_user spawn_task user_profile]", false},
		{"a keyword offers the reminder tool", false, store, "过一会跟进一下", "[ask_user spawn_task user_profile schedule_followup]", false},
		{"English keyword", false, store, "remind me at 5", "[ask_user spawn_task user_profile schedule_followup]", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &Worker{tools: cat, opts: Options{ToolSearch: tt.toolSearch, Skills: tt.skills}}
			entries, agent, note := w.selectTools(user, []llm.Message{llm.UserText(tt.text, 1)}, nil)
			if got := names(entries); got != tt.want {
				t.Fatalf("offered %s, want %s", got, tt.want)
			}
			if len(agent) != len(entries) {
				t.Fatalf("%d loop tools for %d entries", len(agent), len(entries))
			}
			if got := strings.Contains(note, "Tools on workers"); got != tt.note {
				t.Fatalf("orchestration note present = %v, want %v (%q)", got, tt.note, note)
			}
		})
	}
}

func TestChatText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"Generated 1 image. Include the line below:\n![a cat](media://abc.png)", "![a cat](media://abc.png)"},
		{"plain result", "plain result"},
	} {
		if got := chatText(c.in, false); got != c.want {
			t.Errorf("chatText(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func names(es []events.ToolEntry) string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Name
	}
	return fmt.Sprint(out)
}
