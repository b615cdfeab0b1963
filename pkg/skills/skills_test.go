package skills

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/tools"
)

const weather = `---
name: weather
description: 查询城市天气预报
tools: [web_fetch, write_file]
keywords: [天气, weather, forecast]
---
# Weather

Look up the forecast.

## 快速操作
1. 调用 web_fetch 获取数据
2. 调用 write_file 保存结果

## 详细说明
` + "long details\n"

func writeSkill(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name, FileName)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParse(t *testing.T) {
	s, err := Parse("x", []byte(weather))
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "weather" || len(s.Tools) != 2 || len(s.Keywords) != 3 {
		t.Fatalf("%+v", s)
	}
	if s.Intro != "# Weather\n\nLook up the forecast." {
		t.Errorf("intro %q", s.Intro)
	}
	if !strings.HasPrefix(s.QuickActions, "## 快速操作\n1.") || strings.Contains(s.QuickActions, "详细说明") {
		t.Errorf("quick %q", s.QuickActions)
	}
	en, _ := Parse("y", []byte("---\nname: a\ndescription: d\n---\nintro\n## Quick Actions\n- do it\n# Top\nmore"))
	if en.QuickActions != "## Quick Actions\n- do it" {
		t.Errorf("english quick %q", en.QuickActions)
	}
}

func TestParseBad(t *testing.T) {
	cases := map[string]string{
		"no frontmatter":  "# hi",
		"no name":         "---\ndescription: d\n---\n",
		"bad name":        "---\nname: My Skill\ndescription: d\n---\n",
		"no description":  "---\nname: a\n---\n",
		"unknown key":     "---\nname: a\ndescription: d\ntoolz: [x]\n---\n",
		"tools not list":  "---\nname: a\ndescription: d\ntools: {a: 1}\n---\n",
		"empty tool name": "---\nname: a\ndescription: d\ntools: ['']\n---\n",
	}
	for name, in := range cases {
		if _, err := Parse("f.md", []byte(in)); !errors.Is(err, ErrInvalidSkill) || !strings.Contains(err.Error(), "f.md") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

func TestInstructionsBySize(t *testing.T) {
	s, _ := Parse("x", []byte(weather+strings.Repeat("细节", 5000)))
	small := s.Instructions(SizeSmall, 0)
	if strings.Contains(small, "详细说明") || !strings.Contains(small, "快速操作") || !strings.Contains(small, "Look up") {
		t.Errorf("small should be intro + quick actions: %q", small)
	}
	for size, limit := range map[string]int{SizeMedium: 4000, SizeLarge: 8000} {
		if n := len([]rune(s.Instructions(size, 0))); n != limit {
			t.Errorf("%s: %d runes, want %d", size, n, limit)
		}
	}
	if n := len([]rune(s.Instructions(SizeLarge, 100))); n != 100 {
		t.Errorf("override: %d", n)
	}
	noQuick, _ := Parse("x", []byte("---\nname: a\ndescription: d\n---\n"+strings.Repeat("a", 3000)))
	if got := noQuick.Instructions(SizeSmall, 0); len([]rune(got)) != 1500 || !strings.HasSuffix(got, "truncated)") {
		t.Errorf("small without quick actions: %d", len(got))
	}
}

func TestModelSize(t *testing.T) {
	cases := []struct{ id, hint, want string }{
		{"qwen3:8b", "", SizeSmall},
		{"llama3.2:3b", "", SizeSmall},
		{"qwen2.5:0.5b", "", SizeSmall},
		{"gemma3:270m", "", SizeSmall},
		{"qwen3:14b", "", SizeMedium},
		{"qwen3:32b", "", SizeMedium},
		{"llama3.1:32b", "", SizeMedium},
		{"llama-3.1-70b-instruct", "", SizeLarge},
		{"mixtral:8x7b", "", SizeLarge},
		{"gpt-4o", "", SizeLarge},
		{"gpt-4o-mini", "", SizeLarge},
		{"claude-sonnet-4-5", "", SizeLarge},
		{"openrouter/anthropic/claude-3.5-sonnet", "", SizeLarge},
		{"gemini-2.5-flash", "", SizeLarge},
		{"deepseek-chat", "", SizeLarge},
		{"my-local-model", "", SizeMedium},
		{"qwen3:8b", "large", SizeLarge},
		{"gpt-4o", "SMALL", SizeSmall},
		{"gpt-4o", "bogus", SizeLarge},
	}
	for _, c := range cases {
		if got := ModelSize(c.id, c.hint); got != c.want {
			t.Errorf("ModelSize(%q, %q) = %s, want %s", c.id, c.hint, got, c.want)
		}
	}
}

func TestStoreLoadAndHotReload(t *testing.T) {
	dir := t.TempDir()
	writeSkill(t, dir, "weather", weather)
	writeSkill(t, dir, "broken", "---\nname: broken\n---\n")
	writeSkill(t, dir, "misnamed", "---\nname: other\ndescription: d\n---\n")
	st := NewStore(slog.New(slog.DiscardHandler), dir, filepath.Join(dir, "missing"))
	err := st.Load()
	if err == nil || !strings.Contains(err.Error(), "broken") || !strings.Contains(err.Error(), "misnamed") {
		t.Fatalf("Load err = %v", err)
	}
	if got := names(st.List()); got != "weather" {
		t.Fatalf("skills = %s", got)
	}
	changes := make(chan string, 4)
	st.OnChange(func(l []*Skill) { changes <- names(l) })
	if changed, _ := st.Refresh(); changed {
		t.Fatal("Refresh without change reloaded")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go st.Watch(ctx, 10*time.Millisecond)
	writeSkill(t, dir, "broken", "---\nname: broken\ndescription: fixed now\n---\nbody")
	select {
	case got := <-changes:
		if got != "broken weather" {
			t.Fatalf("after fix: %s", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("hot reload did not notice the fixed skill")
	}
	os.RemoveAll(filepath.Join(dir, "weather"))
	select {
	case got := <-changes:
		if got != "broken" {
			t.Fatalf("after delete: %s", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("hot reload did not notice the deletion")
	}
	if _, err := st.Get("weather"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get deleted: %v", err)
	}
}

func names(l []*Skill) string {
	var n []string
	for _, s := range l {
		n = append(n, s.Name)
	}
	return strings.Join(n, " ")
}

func TestSelect(t *testing.T) {
	mk := func(name, desc string, kw ...string) tools.Tool {
		return tools.MustRaw(name, desc, nil, func(context.Context, tools.Call) (tools.Result, error) { return tools.Result{}, nil }, tools.WithKeywords(kw...))
	}
	avail := []tools.Tool{
		mk("ask_user", "Ask the user a question"),
		mk("activate_skill", "Load a skill"),
		mk("web_fetch", "Fetch a web page"),
		mk("write_file", "Write a file"),
		mk("read_file", "Read a file"),
		mk("bash", "Run a shell command", "shell", "命令"),
		mk("music_search", "搜索音乐歌曲", "音乐"),
	}
	w, _ := Parse("w", []byte(weather))
	m, _ := Parse("m", []byte("---\nname: music\ndescription: 音乐播放\ntools: [music_search]\nkeywords: [音乐, 歌]\n---\n"))
	all := []*Skill{m, w}
	cases := []struct {
		msg, skills, tools string
		o                  SelectOptions
	}{
		{"明天北京天气怎么样", "weather", "ask_user activate_skill web_fetch write_file", SelectOptions{Always: []string{"ask_user", "activate_skill"}}},
		{"what's the weather forecast", "weather", "web_fetch write_file", SelectOptions{}},
		// weather scores 4 (keyword + description bigram), music 3 (keyword "歌").
		{"放一首歌，顺便查天气", "weather music", "web_fetch write_file music_search", SelectOptions{}},
		{"放一首歌，顺便查天气", "weather", "web_fetch write_file", SelectOptions{MaxSkills: 1}},
		// a tie keeps the skills' order; music_search also matches on its own keyword.
		{"天气和音乐", "music weather", "ask_user music_search", SelectOptions{MaxTools: 2, Always: []string{"ask_user"}}},
		{"运行一个命令看看", "", "bash", SelectOptions{}},
		{"你好", "", "", SelectOptions{}},
	}
	for _, c := range cases {
		sel := Select(c.msg, all, avail, c.o)
		var tn []string
		for _, tl := range sel.Tools {
			tn = append(tn, tl.Name)
		}
		if got := names(sel.Skills); got != c.skills {
			t.Errorf("%q: skills %q, want %q", c.msg, got, c.skills)
		}
		if got := strings.Join(tn, " "); got != c.tools {
			t.Errorf("%q: tools %q, want %q", c.msg, got, c.tools)
		}
	}
}

func TestPromptSectionAndIterations(t *testing.T) {
	w, _ := Parse("w", []byte(weather))
	got := PromptSection([]*Skill{w})
	if !strings.Contains(got, "- weather: 查询城市天气预报 (tools: web_fetch, write_file)") || !strings.Contains(got, "activate_skill") {
		t.Fatalf("%s", got)
	}
	if PromptSection(nil) != "" {
		t.Fatal("empty selection should render nothing")
	}
	nop := func(context.Context, tools.Call) (tools.Result, error) { return tools.Result{}, nil }
	if n := AdjustMaxIterations(15, []tools.Tool{tools.MustRaw("read_file", "", nil, nop)}); n != 15 {
		t.Fatal(n)
	}
	if n := AdjustMaxIterations(15, []tools.Tool{tools.MustRaw("activate_skill", "", nil, nop)}); n != 18 {
		t.Fatal(n)
	}
}

// Keywords of spaced scripts must start a word; CJK keywords match anywhere.
func TestKeywordIn(t *testing.T) {
	cases := []struct {
		msg, kw string
		want    bool
	}{
		{"please run uname", "run", true},
		{"running late", "run", true},
		{"prune the tree", "run", false},
		{"open https://example.com", "http", true},
		{"see xhttp", "http", false},
		{"prune or run", "run", true}, // a later occurrence at a word start counts
		{"帮我打开这个网页", "网页", true},
		{"上次我们聊了什么", "上次", true},
		{"运行run", "run", true}, // CJK before a Latin word is a boundary
		{"www.example.com", "www.", true},
		{"", "run", false},
	}
	for _, c := range cases {
		if got := keywordIn(c.msg, c.kw); got != c.want {
			t.Errorf("keywordIn(%q, %q) = %v, want %v", c.msg, c.kw, got, c.want)
		}
	}
}

// A tool described in Chinese is found for a Chinese message without any keyword: both sides
// are split into character bigrams.
func TestSelectChineseDescriptionBigrams(t *testing.T) {
	tl := tools.MustRaw("greeting", "生成个性化问候语", nil, func(context.Context, tools.Call) (tools.Result, error) { return tools.Result{}, nil })
	other := tools.MustRaw("music", "搜索音乐", nil, func(context.Context, tools.Call) (tools.Result, error) { return tools.Result{}, nil })
	sel := Select("给我一段个性化的问候", nil, []tools.Tool{tl, other}, SelectOptions{})
	if len(sel.Tools) != 1 || sel.Tools[0].Name != "greeting" {
		t.Fatalf("selected %v, want [greeting]", sel.Tools)
	}
}
