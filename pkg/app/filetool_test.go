package app_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/internal/fakeopenai"
)

// A *.tool.md with a handler loads (it runs in ai.agent.workspace, which always has a value)
// and runs through a tool worker: the handler reads the arguments as JSON on stdin, and its
// stdout is the result the model sees.
func TestFileToolWithHandler(t *testing.T) {
	dir := t.TempDir()
	toolMD := `---
name: greeting
description: 生成个性化问候语
keywords: [问候, greet]
parameters:
  name:
    type: string
    description: 用户名称
    required: true
handler: ./greet.sh
---
`
	script := "#!/bin/sh\nread -r args\necho \"handler got $args in $(basename \"$PWD\")\"\n"
	if err := os.WriteFile(filepath.Join(dir, "greeting.tool.md"), []byte(toolMD), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "greet.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	pl := newPipeline(t, func(r *fakeopenai.Request) fakeopenai.Reply {
		if res, ok := r.ToolResult("call_g"); ok {
			return fakeopenai.Reply{Text: "tool said: " + res}
		}
		if r.HasTool("greeting") {
			return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{ID: "call_g", Name: "greeting", Arguments: `{"name":"Ann"}`}}}
		}
		return fakeopenai.Reply{Text: "greeting not offered"}
	}, pipelineOpts{agentYAML: "    toolsDir: " + dir + "\n"})
	pl.waitToolsServed()
	pl.post(private("m1", "u1", "请给 Ann 一个问候"))
	got := pl.repliesIn("u1", 1)[0].Text()
	if !strings.Contains(got, `handler got {"name":"Ann"} in workspace`) {
		t.Fatalf("reply = %q", got)
	}
}
