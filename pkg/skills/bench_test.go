package skills

import (
	"context"
	"fmt"
	"testing"

	"github.com/agentbus/agentbus/pkg/tools"
)

func BenchmarkSelect(b *testing.B) {
	var all []*Skill
	for i := range 40 {
		s, err := Parse("x", []byte(fmt.Sprintf("---\nname: skill-%d\ndescription: 技能 %d handles topic%d requests and reports\nkeywords: [kw%d, 关键词%d]\ntools: [tool_%d]\n---\nbody", i, i, i, i, i, i)))
		if err != nil {
			b.Fatal(err)
		}
		all = append(all, s)
	}
	var avail []tools.Tool
	for i := range 60 {
		avail = append(avail, tools.MustRaw(fmt.Sprintf("tool_%d", i), fmt.Sprintf("does thing %d for topic%d", i, i), nil,
			func(context.Context, tools.Call) (tools.Result, error) { return tools.Result{}, nil }))
	}
	msg := "请帮我处理 kw7 的事情，然后看看 topic12 requests 和 关键词3 吧"
	for _, bc := range []struct {
		name   string
		always []string
	}{
		{"always1", []string{"tool_0"}},
		// A turn's shape: the resident tools (prompt.go alwaysTools) plus one recently called.
		{"always5", []string{"tool_0", "tool_1", "tool_2", "tool_3", "tool_4"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sel := Select(msg, all, avail, SelectOptions{Always: bc.always})
				if len(sel.Skills) == 0 || len(sel.Tools) < len(bc.always) {
					b.Fatal("nothing selected")
				}
			}
		})
	}
}

func BenchmarkModelSize(b *testing.B) {
	ids := []string{"qwen3:8b", "gpt-4o", "llama-3.1-70b-instruct", "my-local-model"}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = ModelSize(ids[i%len(ids)], "")
	}
}
