package filetool

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/tools"
)

func TestToolConversionsGood(t *testing.T) {
	cases := []struct {
		name   string
		md     string
		schema string // expected JSON Schema (compared as JSON)
	}{
		{"seed greeting", `---
name: greeting
description: 生成个性化问候语
parameters:
  name:
    type: string
    description: 用户名称
    required: true
---
你好，{{name}}！欢迎使用 Zhin.js 🎉`,
			`{"type":"object","properties":{"name":{"type":"string","description":"用户名称"}},"required":["name"]}`},
		{"no parameters", "---\nname: ping\ndescription: pong\n---\npong",
			`{"type":"object","properties":{}}`},
		{"every supported keyword", `---
name: search_music
description: Search music
parameters:
  keyword: {type: string, required: true, minLength: 1, maxLength: 50}
  limit: {type: integer, default: 5, minimum: 1, maximum: 20}
  score: {type: number, minimum: 0.5}
  source: {type: string, enum: [qq, netease], default: qq}
  lossless: {type: boolean, default: false}
  tags: {type: array, items: {type: string, enum: [pop, rock]}, minItems: 1, maxItems: 3}
  filter:
    type: object
    properties:
      year: {type: integer, required: true}
      artist: string
---
{{keyword}} {{limit}}`,
			`{"type":"object","required":["keyword"],"properties":{
"keyword":{"type":"string","minLength":1,"maxLength":50},
"limit":{"type":"integer","default":5,"minimum":1,"maximum":20},
"score":{"type":"number","minimum":0.5},
"source":{"type":"string","enum":["qq","netease"],"default":"qq"},
"lossless":{"type":"boolean","default":false},
"tags":{"type":"array","items":{"type":"string","enum":["pop","rock"]},"minItems":1,"maxItems":3},
"filter":{"type":"object","properties":{"year":{"type":"integer"},"artist":{"type":"string"}},"required":["year"]}}}`},
		{"json schema form", `---
name: weather
description: Weather
parameters:
  type: object
  properties:
    city: {type: string, description: City}
    days: {type: integer}
  required: [city]
---
{{city}}`,
			`{"type":"object","properties":{"city":{"type":"string","description":"City"},"days":{"type":"integer"}},"required":["city"]}`},
		{"gating fields", "---\nname: kick\ndescription: Kick a member\nplatforms: [icqq]\nscopes: [group]\nrequiredAnyRole: [group_admin, group_owner]\nidempotent: true\nkeywords: [踢]\nparameters:\n  user: {type: string, required: true}\n---\nkick {{ user }}",
			`{"type":"object","properties":{"user":{"type":"string"}},"required":["user"]}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tl, err := ParseTool("tools/x.tool.md", []byte(c.md), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !jsonEqual(t, tl.Parameters, c.schema) {
				t.Errorf("schema\n got %s\nwant %s", tl.Parameters, c.schema)
			}
			if err := tl.Validate(); err != nil {
				t.Error(err)
			}
		})
	}
}

func jsonEqual(t *testing.T, a json.RawMessage, b string) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatalf("bad expectation: %v", err)
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return string(xb) == string(yb)
}

func TestToolConversionsBad(t *testing.T) {
	head := "---\nname: t\ndescription: d\n"
	cases := []struct {
		name, md, field, msg string
	}{
		{"oneOf", head + "parameters:\n  a:\n    oneOf: [{type: string}, {type: integer}]\n---\nx", "parameters.a.oneOf", "unsupported schema keyword"},
		{"$ref", head + "parameters:\n  a:\n    $ref: '#/defs/x'\n---\nx", "parameters.a.$ref", "unsupported schema keyword"},
		{"pattern", head + "parameters:\n  a: {type: string, pattern: '^a'}\n---\nx", "parameters.a.pattern", "unsupported"},
		{"format", head + "parameters:\n  a: {type: string, format: email}\n---\nx", "parameters.a.format", "unsupported"},
		{"unknown type", head + "parameters:\n  a: {type: date}\n---\nx", "parameters.a.type", `unsupported type "date"`},
		{"null type", head + "parameters:\n  a: {type: 'null'}\n---\nx", "parameters.a.type", "unsupported type"},
		{"type list", head + "parameters:\n  a: {type: [string, integer]}\n---\nx", "parameters.a.type", "unsupported type"},
		{"missing type", head + "parameters:\n  a: {description: x}\n---\nx", "parameters.a.type", "is required"},
		{"array without items", head + "parameters:\n  a: {type: array}\n---\nx", "parameters.a.items", "is required"},
		{"nested bad", head + "parameters:\n  a: {type: array, items: {type: object, properties: {b: {type: string, anyOf: []}}}}\n---\nx", "parameters.a.items.properties.b.anyOf", "unsupported"},
		{"enum type mismatch", head + "parameters:\n  a: {type: integer, enum: [1, two]}\n---\nx", "parameters.a.enum[1]", "want an integer"},
		{"enum unquoted yes", head + "parameters:\n  a: {type: string, enum: [a, 1]}\n---\nx", "parameters.a.enum[1]", "want a string"},
		{"default mismatch", head + "parameters:\n  a: {type: boolean, default: maybe}\n---\nx", "parameters.a.default", "want true or false"},
		{"default not in enum", head + "parameters:\n  a: {type: string, enum: [x, y], default: z}\n---\nx", "parameters.a.default", "not one of the enum"},
		{"required not bool", head + "parameters:\n  a: {type: string, required: yes please}\n---\nx", "parameters.a.required", "want true or false"},
		{"items on string", head + "parameters:\n  a: {type: string, items: {type: string}}\n---\nx", "parameters.a.items", "only allowed for type array"},
		{"minimum on string", head + "parameters:\n  a: {type: string, minimum: 1}\n---\nx", "parameters.a.minimum", "only allowed"},
		{"bad param name", head + "parameters:\n  'a b': {type: string}\n---\nx", "parameters.a b", "parameter name"},
		{"schema form not object", head + "parameters:\n  type: array\n---\nx", "parameters.type", "must be object"},
		{"schema form extra key", head + "parameters:\n  type: object\n  oneOf: []\n---\nx", "parameters.oneOf", "unsupported"},
		{"schema form bad required", head + "parameters:\n  type: object\n  properties: {a: {type: string}}\n  required: [b]\n---\nx", "parameters.required", "not a declared property"},
		{"unknown frontmatter key", head + "handlr: ./x\n---\nx", "", "handlr"},
		{"no name", "---\ndescription: d\n---\nx", "name", "is required"},
		{"bad name", "---\nname: 'has space'\ndescription: d\n---\nx", "name", "want 1-64"},
		{"no description", "---\nname: t\n---\nx", "description", "is required"},
		{"unknown role", head + "requiredAnyRole: [admin]\n---\nx", "requiredAnyRole[0]", "unknown role"},
		{"unknown scope", head + "scopes: [guild]\n---\nx", "scopes[0]", "unknown scope"},
		{"undeclared placeholder", head + "parameters:\n  a: string\n---\nhello {{b}}", "body", "{{b}} names no parameter"},
		{"empty body no handler", head + "---\n", "body", "is empty"},
		{"missing handler", head + "handler: ./nope.sh\n---\n", "handler", "no such file"},
		{"no frontmatter", "# just markdown", "", "no YAML frontmatter"},
		{"parameters not a map", head + "parameters: [a, b]\n---\nx", "parameters", "want a mapping"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseTool("tools/bad.tool.md", []byte(c.md), Options{Workspace: t.TempDir()})
			if err == nil {
				t.Fatal("accepted")
			}
			var fe *FieldError
			if !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("err %T %v is not a FieldError", err, err)
			}
			if fe.File != "tools/bad.tool.md" || fe.Field != c.field || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("err = %v (field %q), want field %q and %q", err, fe.Field, c.field, c.msg)
			}
			if !strings.HasPrefix(err.Error(), "tools/bad.tool.md") {
				t.Errorf("error does not start with the file: %v", err)
			}
		})
	}
}

func TestTemplateRender(t *testing.T) {
	tl, err := ParseTool("x.tool.md", []byte("---\nname: t\ndescription: d\nparameters:\n  name: {type: string, required: true}\n  n: {type: integer, default: 3}\n  tags: {type: array, items: {type: string}}\n  opt: string\n---\n你好，{{name}}！n={{n}} tags={{ tags }} opt=[{{opt}}]"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := tl.Run(context.Background(), tools.Call{Args: map[string]any{"name": "小明", "tags": []any{"a", "b"}}})
	if got := r.Text(); got != `你好，小明！n=3 tags=["a","b"] opt=[]` {
		t.Fatalf("rendered %q", got)
	}
}

func TestHandler(t *testing.T) {
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	os.MkdirAll(ws, 0o755)
	os.MkdirAll(filepath.Join(dir, "tools", "echo"), 0o755)
	script := "#!/bin/sh\nread -r line\necho \"args=$line tool=$TOOL_NAME scope=$TOOL_SCOPE pwd=$(pwd)\"\ncase \"$line\" in *fail*) echo boom >&2; exit 4;; *sleep*) sleep 5;; esac\n"
	os.WriteFile(filepath.Join(dir, "tools", "echo", "run.sh"), []byte(script), 0o755)
	os.WriteFile(filepath.Join(dir, "tools", "echo", "echo.tool.md"), []byte("---\nname: echo\ndescription: Echo\nhandler: ./run.sh\ntimeoutMs: 1000\nparameters:\n  text: {type: string, required: true}\n  n: {type: integer, default: 2}\n---\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "tools", "noexec.sh"), []byte(script), 0o644)
	ts, err := LoadTools(filepath.Join(dir, "tools"), Options{Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1 {
		t.Fatalf("%d tools", len(ts))
	}
	env := tools.Env{Scope: tools.ScopeGroup}
	r := ts[0].Run(context.Background(), tools.Call{Args: map[string]any{"text": "hi"}, Env: env})
	realWS, _ := filepath.EvalSymlinks(ws)
	if r.IsError || r.Text() != `args={"n":2,"text":"hi"} tool=echo scope=group pwd=`+realWS && r.Text() != `args={"n":2,"text":"hi"} tool=echo scope=group pwd=`+ws {
		t.Fatalf("%+v %q", r.IsError, r.Text())
	}
	r = ts[0].Run(context.Background(), tools.Call{Args: map[string]any{"text": "fail"}})
	if !r.IsError || !strings.Contains(r.Text(), "status 4") || !strings.Contains(r.Text(), "boom") {
		t.Fatalf("failing handler: %q", r.Text())
	}
	r = ts[0].Run(context.Background(), tools.Call{Args: map[string]any{"text": "sleep"}})
	if !r.IsError || !strings.Contains(r.Text(), "timed out") {
		t.Fatalf("slow handler: %q", r.Text())
	}
	_, err = ParseTool(filepath.Join(dir, "tools", "x.tool.md"), []byte("---\nname: x\ndescription: d\nhandler: ./noexec.sh\n---\n"), Options{Workspace: ws})
	if err == nil || !strings.Contains(err.Error(), "not an executable") {
		t.Fatalf("non-executable handler: %v", err)
	}
}

func TestLoadToolsReportsEveryBadFile(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.tool.md"), []byte("---\nname: a\ndescription: d\nparameters:\n  x: {type: string, pattern: x}\n---\n{{x}}"), 0o644)
	os.WriteFile(filepath.Join(dir, "b.tool.md"), []byte("---\nname: b\ndescription: d\n---\nok"), 0o644)
	os.WriteFile(filepath.Join(dir, "c.tool.md"), []byte("---\nname: b\ndescription: dup\n---\nok"), 0o644)
	os.WriteFile(filepath.Join(dir, "README.md"), []byte("not a tool"), 0o644)
	_, err := LoadTools(dir, Options{})
	if err == nil || !strings.Contains(err.Error(), "a.tool.md:5: parameters.x.pattern") || !strings.Contains(err.Error(), `c.tool.md: name: tool "b" is also defined`) {
		t.Fatalf("err = %v", err)
	}
	if ts, err := LoadTools(filepath.Join(dir, "missing"), Options{}); err != nil || len(ts) != 0 {
		t.Fatalf("missing dir: %v %v", ts, err)
	}
}

func TestAgentPresets(t *testing.T) {
	good := "---\nname: code-reviewer\ndescription: 代码审查专家\ntools: [read_file, grep]\nmodel: gpt-4o\nmaxIterations: 8\n---\n你是一个资深代码审查员，专注于安全和性能问题。\n"
	a, err := ParseAgent("agents/cr.agent.md", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if a.Name != "code-reviewer" || a.Model != "gpt-4o" || a.MaxIterations != 8 || len(a.Tools) != 2 ||
		a.SystemPrompt != "你是一个资深代码审查员，专注于安全和性能问题。" {
		t.Fatalf("%+v", a)
	}
	if err := a.CheckTools(func(n string) bool { return n == "read_file" }); err == nil || !strings.Contains(err.Error(), "unknown tools: grep") {
		t.Fatalf("CheckTools: %v", err)
	}
	bad := []struct{ md, field string }{
		{"---\ndescription: d\n---\nbody", "name"},
		{"---\nname: x\n---\nbody", "description"},
		{"---\nname: x\ndescription: d\nmaxIterations: -1\n---\nbody", "maxIterations"},
		{"---\nname: x\ndescription: d\n---\n", "body"},
		{"---\nname: x\ndescription: d\ntools: ['bad tool']\n---\nbody", "tools[0]"},
		{"---\nname: x\ndescription: d\ntemperature: 2\n---\nbody", ""},
		{"---\nname: x\ndescription: d\nmaxIterations: many\n---\nbody", ""},
	}
	for _, b := range bad {
		_, err := ParseAgent("agents/bad.agent.md", []byte(b.md))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != b.field || fe.File != "agents/bad.agent.md" {
			t.Errorf("%q: err = %v", b.md, err)
		}
	}
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "sub", "cr.agent.md"), []byte(good), 0o644)
	os.WriteFile(filepath.Join(dir, "draw.agent.md"), []byte("---\nname: draw\ndescription: 画图\n---\nYou draw."), 0o644)
	as, err := LoadAgents(dir)
	if err != nil || len(as) != 2 || as[0].Name != "draw" {
		t.Fatalf("LoadAgents: %v %+v", err, as)
	}
}
