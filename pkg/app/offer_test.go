package app_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/internal/fakeopenai"
)

// The seed's example requests, in Chinese and English, get the tool they need offered to the
// model (the two-level selection ranks the registry's keywords, which the tool workers now
// announce), and the selection still leaves out what the message has nothing to do with.
func TestSeedRequestsOfferTheirTool(t *testing.T) {
	pl := newPipeline(t, fakeopenai.Echo, pipelineOpts{})
	pl.waitToolsServed()
	cases := []struct {
		text    string
		want    string
		notWant string // a tool the message has nothing to do with ("" = none checked)
		sender  string // "" = a user of its own
	}{
		{"帮我打开这个网页 https://example.com/news", "web_fetch", "bash", ""},
		{"上次我们聊了什么天气", "chat_history", "web_fetch", ""},
		{"帮我在后台做一个长时间的调研", "spawn_task", "bash", ""},
		{"please run uname", "bash", "chat_history", ""},
		{"summarize https://example.com/post", "web_fetch", "bash", ""},
		{"我们之前说过这件事吗", "chat_history", "bash", ""},
		{"帮我执行一下 ls 命令", "bash", "chat_history", ""},
		{"读取文件 README.md", "read_file", "chat_history", ""},
		{"从 https://example.com/skill.md 安装技能", "install_skill", "bash", master}, // install_skill is for masters and trusted users
		{"what did we talk about last time?", "chat_history", "bash", ""},
		{"run this research in the background", "spawn_task", "chat_history", ""},
		{"hello there", "ask_user", "bash", ""}, // resident tools come whatever the message
	}
	for i, tc := range cases {
		before := len(pl.model.Requests())
		user := fmt.Sprintf("u%d", i)
		if tc.sender != "" {
			user = tc.sender
		}
		pl.post(private(fmt.Sprintf("m%d", i), user, tc.text))
		pl.repliesIn(user, 1)
		reqs := pl.model.Requests()[before:]
		var req *fakeopenai.Request
		for j := range reqs {
			if reqs[j].LastUser() != "" && strings.Contains(reqs[j].LastUser(), tc.text) {
				req = &reqs[j]
			}
		}
		if req == nil {
			t.Errorf("%q: no model request carries the message", tc.text)
			continue
		}
		if !req.HasTool(tc.want) {
			t.Errorf("%q: %s not offered; offered %v", tc.text, tc.want, req.Tools)
		}
		if tc.notWant != "" && req.HasTool(tc.notWant) {
			t.Errorf("%q: %s offered although unrelated; offered %v", tc.text, tc.notWant, req.Tools)
		}
		if !slices.Contains(req.Tools, "spawn_task") {
			t.Errorf("%q: spawn_task (resident) not offered; offered %v", tc.text, req.Tools)
		}
	}
}
