package app_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/pkg/tools"
)

// longSkill writes a skill whose instructions are 3,228 characters and have no quick-actions
// section, into a skills directory of its own, and returns that directory.
func longSkill(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	body := strings.Repeat("Step: read the report carefully and write down every figure it gives.\n", 46) // 70 × 46 = 3220
	body = body + "The end."                                                                              // 3228 characters
	skill := "---\nname: report-digest\ndescription: digest a quarterly report\nkeywords: [report]\n---\n" + body
	if err := os.MkdirAll(filepath.Join(dir, "report-digest"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report-digest", "SKILL.md"), []byte(skill), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// activateScript calls activate_skill for any message mentioning the report and answers with
// the length of the instructions it got back.
func activateScript(r *fakeopenai.Request) fakeopenai.Reply {
	if last := r.Messages[len(r.Messages)-1]; last.Role == "tool" {
		return fakeopenai.Reply{Text: fmt.Sprintf("instructions: %d chars", len([]rune(last.Content)))}
	}
	if strings.Contains(r.LastUser(), "report") {
		return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{ID: fmt.Sprintf("a%d", len(r.Users())), Name: "activate_skill", Arguments: `{"name":"report-digest"}`}}}
	}
	return fakeopenai.Echo(r)
}

// skillResult is the activate_skill result the model got in the chat's last turn.
func skillResult(t *testing.T, pl *pipeline) string {
	t.Helper()
	reqs := pl.model.Requests()
	for i := len(reqs) - 1; i >= 0; i-- {
		ms := reqs[i].Messages
		for j := len(ms) - 1; j >= 0; j-- { // the history holds earlier turns' results too
			if ms[j].Role == "tool" && strings.HasPrefix(ms[j].ToolCallID, "a") {
				return ms[j].Content
			}
		}
	}
	t.Fatal("no model request carries the activate_skill result")
	return ""
}

// The model id reaches the tool worker: a chat switched to qwen3:8b (small by its parameter
// count) gets the small budget of skill instructions (1,500 characters), without any
// modelSizeHint; the same skill for the default model m1 (medium) comes whole; and a
// modelHarness entry for one model sets its own skillInstructionMaxChars.
func TestSkillInstructionsSizedByTheTurnsModel(t *testing.T) {
	dir := longSkill(t)
	pl := newPipeline(t, activateScript, pipelineOpts{agentYAML: fmt.Sprintf(`    skillsDir: %s
    modelHarness:
      models:
        "fake:llama3.1:70b": {skillInstructionMaxChars: 700}
`, dir)})
	pl.waitToolsServed()

	pl.post(private("m1", master, "digest the report please"))
	if got := pl.repliesIn(master, 1)[0].Text(); !strings.HasPrefix(got, "instructions:") {
		t.Fatalf("reply %q", got)
	}
	if res := skillResult(t, pl); !strings.Contains(res, "The end.") || strings.Contains(res, "truncated") {
		t.Errorf("medium model m1: the instructions were cut (%d chars)", len([]rune(res)))
	}

	if got := pl.command(private("m2", master, "/model fake/qwen3:8b"), 2); !strings.Contains(got, "qwen3:8b") {
		t.Fatalf("/model: %q", got)
	}
	pl.post(private("m3", master, "digest the report again"))
	pl.repliesIn(master, 3)
	res := skillResult(t, pl)
	// The result is "# Skill: <name>\n<description>\n\n<instructions>", the instructions cut at 1,500.
	if n := len([]rune(res)); n > 1500+80 || !strings.Contains(res, "truncated") {
		t.Errorf("small model qwen3:8b got %d characters of skill result, want the instructions cut to 1500", n)
	}

	if got := pl.command(private("m4", master, "/model fake/llama3.1:70b"), 4); !strings.Contains(got, "llama3.1:70b") {
		t.Fatalf("/model: %q", got)
	}
	pl.post(private("m5", master, "and the report once more"))
	pl.repliesIn(master, 5)
	if res := skillResult(t, pl); len([]rune(res)) > 700+80 || !strings.Contains(res, "truncated") {
		t.Errorf("modelHarness skillInstructionMaxChars 700: got %d characters: %q", len([]rune(res)), res)
	}
}

// modelHarness maxTools and alwaysTools bound what the turn offers for that model: the
// harness's always-offered tool comes with a message that has nothing to do with it, and a
// quota the resident tools already fill leaves out a tool the message would otherwise get.
func TestModelHarnessToolSelection(t *testing.T) {
	pl := newPipeline(t, fakeopenai.Echo, pipelineOpts{agentYAML: `    modelHarness:
      models:
        "m1": {maxTools: 2, alwaysTools: [chat_history]}
`})
	pl.waitToolsServed()
	pl.post(private("m1", "u1", "please run uname"))
	pl.repliesIn("u1", 1)
	req := pl.model.Requests()[len(pl.model.Requests())-1]
	if !req.HasTool("chat_history") {
		t.Errorf("alwaysTools chat_history not offered: %v", req.Tools)
	}
	if req.HasTool("bash") {
		t.Errorf("maxTools 2: bash offered beyond the quota: %v", req.Tools)
	}
}

// modelHarness toolExecution: sequential runs the calls of one model response one at a
// time; the same two calls under the default (parallel) overlap.
func TestModelHarnessToolExecution(t *testing.T) {
	for _, mode := range []string{"sequential", "parallel"} {
		t.Run(mode, func(t *testing.T) {
			var mu sync.Mutex
			inFlight, maxIn := 0, 0
			page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				inFlight++
				maxIn = max(maxIn, inFlight)
				mu.Unlock()
				// Each fetch takes 1.5 s: parallel ones overlap, sequential ones cannot.
				select {
				case <-time.After(1500 * time.Millisecond):
				case <-r.Context().Done():
				}
				mu.Lock()
				inFlight--
				mu.Unlock()
				w.Header().Set("Content-Type", "text/plain")
				fmt.Fprint(w, "page "+r.URL.Path)
			}))
			defer page.Close()
			script := func(r *fakeopenai.Request) fakeopenai.Reply {
				if _, ok := r.ToolResult("f2"); ok {
					return fakeopenai.Reply{Text: "fetched both"}
				}
				if strings.Contains(r.LastUser(), "fetch") {
					return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{
						{ID: "f1", Name: "web_fetch", Arguments: fmt.Sprintf(`{"url":"%s/a"}`, page.URL)},
						{ID: "f2", Name: "web_fetch", Arguments: fmt.Sprintf(`{"url":"%s/b"}`, page.URL)}}}
				}
				return fakeopenai.Echo(r)
			}
			harness := ""
			if mode == "sequential" {
				harness = "    modelHarness:\n      providerPatterns:\n        \"fa*\": {toolExecution: sequential}\n"
			}
			pl := newPipeline(t, script, pipelineOpts{agentYAML: "    webFetch: {allowPrivate: true}\n" + harness})
			pl.waitToolsServed()
			pl.post(private("m1", "u1", "fetch these two pages"))
			if got := pl.repliesIn("u1", 1)[0].Text(); got != "fetched both" {
				t.Fatalf("reply %q", got)
			}
			mu.Lock()
			defer mu.Unlock()
			want := 1
			if mode == "parallel" {
				want = 2
			}
			if maxIn != want {
				t.Errorf("%s: %d fetches at once, want %d", mode, maxIn, want)
			}
		})
	}
}

// modelHarness thinking sets the thinking level of that model's requests.
func TestModelHarnessThinking(t *testing.T) {
	pl := newPipeline(t, fakeopenai.Echo, pipelineOpts{provider: ", capabilities: {thinking: true}", agentYAML: `    modelHarness:
      models:
        "fake:m1": {thinking: high}
`})
	pl.post(private("m1", "u1", "think hard"))
	pl.repliesIn("u1", 1)
	req := pl.model.Requests()[len(pl.model.Requests())-1]
	if !strings.Contains(string(req.Body), `"reasoning_effort":"high"`) {
		t.Errorf("request body has no reasoning_effort high: %s", req.Body)
	}
}

// An *.agent.md preset's body is the subagent's system prompt, not part of its user message;
// and a drawing task ("画一只猫") without a preset is offered generate_image besides the
// restricted tool set.
func TestSubagentPresetAndDrawingTask(t *testing.T) {
	img, _ := imageServer(t)
	agents := t.TempDir()
	preset := "---\nname: draw\ndescription: draws pictures\ntools: [generate_image]\n---\nYou are the drawing agent: turn every request into one generate_image call.\n"
	if err := os.WriteFile(filepath.Join(agents, "draw.agent.md"), []byte(preset), 0o644); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	sub := map[string]fakeopenai.Request{} // the subagents' first requests, by task
	model := fakeopenai.New(t, func(r *fakeopenai.Request) fakeopenai.Reply {
		if len(r.Messages) > 0 && r.Messages[0].Role == "system" && strings.Contains(r.Messages[0].Content, "background worker agent") {
			mu.Lock()
			if _, seen := sub[r.LastUser()]; !seen {
				sub[r.LastUser()] = *r
			}
			mu.Unlock()
			return fakeopenai.Reply{Text: "drawn"}
		}
		last := r.Messages[len(r.Messages)-1]
		switch {
		case last.Role == "tool":
			return fakeopenai.Reply{Text: "started"}
		case strings.Contains(last.Content, "drawn"):
			return fakeopenai.Reply{Text: "result posted"}
		case strings.Contains(last.Content, "画一只猫"):
			return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{ID: "s1", Name: "spawn_task", Arguments: `{"task":"画一只猫","agent":"draw"}`}}}
		case strings.Contains(last.Content, "画一只狗"):
			return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{ID: "s2", Name: "spawn_task", Arguments: `{"task":"画一只狗"}`}}}
		}
		return fakeopenai.Echo(r)
	})
	cb := newCallback(t)
	pl := newBgPipeline(t, model, cb, bgOpts{agent: fmt.Sprintf("    agentsDir: %s\n    webFetch: {allowPrivate: true}", agents),
		providers: fmt.Sprintf("    img: {driver: openai, apiKey: k, baseUrl: \"%s/v1\"}", img.URL)})
	pl.waitToolsServed()
	pl.post(private("m1", "u1", "画一只猫"))
	pl.post(private("m2", "u2", "画一只狗"))
	for _, u := range []string{"u1", "u2"} {
		got := pl.repliesIn(u, 2)
		if got[0].Text() != "started" && got[1].Text() != "started" {
			t.Errorf("%s: replies %s", u, fmtReplies(got))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	cat, ok := sub["画一只猫"]
	if !ok {
		t.Fatalf("no subagent request has the task alone as its user message: %v", sub)
	}
	if !strings.Contains(cat.Messages[0].Content, "You are the drawing agent") {
		t.Errorf("preset body not in the system prompt: %q", cat.Messages[0].Content)
	}
	if strings.Contains(cat.Text(), "user: You are the drawing agent") || strings.Contains(cat.LastUser(), "drawing agent") {
		t.Errorf("preset body in the user message: %q", cat.LastUser())
	}
	if !cat.HasTool("generate_image") || cat.HasTool("bash") {
		t.Errorf("preset draw: offered %v, want its tools only", cat.Tools)
	}
	dog, ok := sub["画一只狗"]
	if !ok {
		t.Fatalf("no subagent request for the task without a preset: %v", sub)
	}
	if !dog.HasTool("generate_image") || !dog.HasTool("read_file") {
		t.Errorf("drawing task without a preset: offered %v, want generate_image and the restricted set", dog.Tools)
	}
}

// The seed's introspection commands /cmd and /endpoints, and [filter] [page] on /tools,
// through the whole pipeline with the sender's permissions.
func TestIntrospectionCommandsAndPaging(t *testing.T) {
	// Ten more tools than the built-in ones, so that /tools needs two pages.
	var extra []tools.Tool
	for i := range 10 {
		extra = append(extra, tools.MustNew(fmt.Sprintf("extra_%02d", i), "A tool to fill the list.",
			func(context.Context, tools.Call, struct{}) (tools.Result, error) { return tools.TextResult("ok"), nil }))
	}
	pl := newBgPipeline(t, fakeopenai.New(t, fakeopenai.Echo), newCallback(t), bgOpts{extraTools: extra})
	pl.waitToolsServed()
	n := 0
	ask := func(sender, text string) string {
		t.Helper()
		n++
		id := fmt.Sprintf("c%d", n)
		pl.post(private(id, sender, text))
		got, err := pl.cb.waitFor(1, waitMargin, func(r reply) bool { return r.ReplyTo == id })
		if err != nil {
			t.Fatalf("%s %q: %v", sender, text, err)
		}
		return got[0].Text()
	}
	all := ask(master, "/tools")
	if !strings.Contains(all, "(page 1/") || !strings.Contains(all, "More: /tools 2") {
		t.Fatalf("/tools: no paging: %q", all)
	}
	page2 := ask(master, "/tools 2")
	if !strings.Contains(page2, "(page 2/") || strings.Count(page2, "\n- ") == 0 {
		t.Fatalf("/tools 2: %q", page2)
	}
	// The pages together list every tool once.
	listed := map[string]int{}
	for p := 1; ; p++ {
		out := all
		if p > 1 {
			out = ask(master, fmt.Sprintf("/tools %d", p))
		}
		for _, line := range strings.Split(out, "\n")[1:] {
			if name, ok := strings.CutPrefix(line, "- "); ok {
				listed[strings.Fields(name)[0]]++
			}
		}
		if !strings.Contains(out, fmt.Sprintf("More: /tools %d", p+1)) {
			break
		}
	}
	for _, want := range []string{"web_fetch", "bash", "spawn_task", "read_file", "extra_00", "extra_09"} {
		if listed[want] != 1 {
			t.Errorf("/tools pages list %s %d times: %v", want, listed[want], listed)
		}
	}
	if got := ask(master, "/tools web 1"); !strings.Contains(got, "web_fetch") || !strings.Contains(got, `matching "web"`) || strings.Contains(got, "bash") {
		t.Errorf("/tools web 1: %q", got)
	}
	if got := ask("u1", "/cmd"); !strings.Contains(got, "/endpoints") || !strings.Contains(got, "/tools [filter] [page]") || !strings.Contains(got, "commands") {
		t.Errorf("/cmd: %q", got)
	}
	if got := ask("u1", "/cmd model"); !strings.Contains(got, "/model [name]") || strings.Contains(got, "/whoami") {
		t.Errorf("/cmd model: %q", got)
	}
	if got := ask("u1", "/endpoints"); !strings.Contains(got, "masters and trusted users") {
		t.Errorf("/endpoints by a user: %q", got)
	}
	if got := ask(master, "/endpoints"); !strings.Contains(got, "webhook/"+botID+": ") || !strings.Contains(got, "the platform calls ingest") {
		t.Errorf("/endpoints: %q", got)
	}
}

// Audio reaches a model that declares audio input as an OpenAI input_audio part (the
// uploaded bytes, through the media store), besides its text description; the same message
// to a model without audio input stays text only.
func TestAudioReachesAnAudioModel(t *testing.T) {
	wav := append([]byte("RIFF\x24\x00\x00\x00WAVEfmt "), make([]byte, 24)...)
	b64 := base64.StdEncoding.EncodeToString(wav)
	for _, audio := range []bool{true, false} {
		input := "[text]"
		if audio {
			input = "[text, audio]"
		}
		pl := newPipeline(t, fakeopenai.Echo, pipelineOpts{provider: ", models: [{id: m1, input: " + input + "}]"})
		id := fmt.Sprintf("voice-%v", audio)
		pl.postSegments(id, seg("text", "text", "what did I say?"), seg("record", "data", b64, "format", "wav"))
		if _, err := pl.cb.waitFor(1, waitMargin, func(r reply) bool { return r.ReplyTo == id }); err != nil {
			t.Fatal(err)
		}
		req := pl.model.Requests()[len(pl.model.Requests())-1]
		body := string(req.Body)
		has := strings.Contains(body, `"input_audio":{"data":"`+b64+`","format":"wav"}`)
		if has != audio {
			t.Errorf("model input %s: input_audio part sent = %v; body %s", input, has, body)
		}
		if !strings.Contains(req.LastUser(), "[voice message: media://") {
			t.Errorf("model input %s: the description is gone: %q", input, req.LastUser())
		}
	}
}
