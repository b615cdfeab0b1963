package llm

import (
	"encoding/json"
	"errors"
	"github.com/agentbus/agentbus/internal/cputime"
	"reflect"
	"strings"
	"testing"
)

const bashSchema = `{
  "type": "object",
  "properties": {
    "command": {"type": "string", "minLength": 1},
    "timeout": {"type": "integer", "minimum": 1, "default": 30},
    "verbose": {"type": "boolean"},
    "ratio":   {"type": "number"},
    "mode":    {"type": "string", "enum": ["fast", "safe"]},
    "tags":    {"type": "array", "items": {"type": "string"}},
    "env":     {"type": "object", "additionalProperties": {"type": "string"}},
    "files":   {"type": "array", "items": {"$ref": "#/$defs/file"}},
    "note":    {"anyOf": [{"type": "string"}, {"type": "null"}]}
  },
  "required": ["command"],
  "additionalProperties": false,
  "$defs": {"file": {"type": "object", "properties": {"path": {"type": "string"}, "size": {"type": "integer"}}, "required": ["path"]}}
}`

func args(s string) map[string]any {
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		panic(err)
	}
	return m
}

func TestValidateArguments(t *testing.T) {
	tool := &Tool{Name: "bash", Parameters: json.RawMessage(bashSchema)}
	tests := []struct {
		name   string
		in     string
		want   string   // expected output (JSON), when valid
		errHas []string // substrings of the error, when invalid
	}{
		{"valid with default", `{"command":"ls"}`, `{"command":"ls","timeout":30}`, nil},
		{"explicit timeout kept", `{"command":"ls","timeout":5}`, `{"command":"ls","timeout":5}`, nil},
		{"string to integer", `{"command":"ls","timeout":"5"}`, `{"command":"ls","timeout":5}`, nil},
		{"string to number", `{"command":"ls","ratio":" 0.5 ","timeout":1}`, `{"command":"ls","ratio":0.5,"timeout":1}`, nil},
		{"string to boolean", `{"command":"ls","verbose":"true","timeout":1}`, `{"command":"ls","verbose":true,"timeout":1}`, nil},
		{"number to boolean", `{"command":"ls","verbose":0,"timeout":1}`, `{"command":"ls","verbose":false,"timeout":1}`, nil},
		{"number to string", `{"command":42,"timeout":1}`, `{"command":"42","timeout":1}`, nil},
		{"scalar to array", `{"command":"ls","tags":"x","timeout":1}`, `{"command":"ls","tags":["x"],"timeout":1}`, nil},
		{"scalar to array with item coercion", `{"command":"ls","tags":7,"timeout":1}`, `{"command":"ls","tags":["7"],"timeout":1}`, nil},
		{"json string to array", `{"command":"ls","tags":"[\"a\",\"b\"]","timeout":1}`, `{"command":"ls","tags":["a","b"],"timeout":1}`, nil},
		{"json string to object", `{"command":"ls","env":"{\"A\":\"1\"}","timeout":1}`, `{"command":"ls","env":{"A":"1"},"timeout":1}`, nil},
		{"single-element array to scalar", `{"command":["ls"],"timeout":1}`, `{"command":"ls","timeout":1}`, nil},
		{"nested via ref", `{"command":"ls","files":[{"path":"a","size":"3"}],"timeout":1}`, `{"command":"ls","files":[{"path":"a","size":3}],"timeout":1}`, nil},
		{"additionalProperties schema coerces", `{"command":"ls","env":{"N":5},"timeout":1}`, `{"command":"ls","env":{"N":"5"},"timeout":1}`, nil},
		{"anyOf union", `{"command":"ls","note":null,"timeout":1}`, `{"command":"ls","note":null,"timeout":1}`, nil},

		{"missing required", `{}`, "", []string{`tool "bash"`, "command: required property is missing", "Received arguments:\n{}"}},
		{"uncoercible integer", `{"command":"ls","timeout":"soon"}`, "", []string{`timeout: must be integer, got string "soon"`, `"timeout": "soon"`}},
		{"fraction for integer", `{"command":"ls","timeout":1.5}`, "", []string{"timeout: must be integer, got number 1.5"}},
		{"nested path", `{"command":"ls","files":[{"path":"a"},{"size":1}]}`, "", []string{"files[1].path: required property is missing"}},
		{"nested type", `{"command":"ls","files":[{"path":{"x":1}}]}`, "", []string{"files[0].path: must be string, got object"}},
		{"several issues at once", `{"command":{},"timeout":"x"}`, "", []string{"command: must be string", "timeout: must be integer"}},
		{"enum (library)", `{"command":"ls","mode":"slow"}`, "", []string{"mode: enum"}},
		{"minimum (library)", `{"command":"ls","timeout":0}`, "", []string{"timeout: minimum"}},
		{"minLength (library)", `{"command":""}`, "", []string{"command: minLength"}},
		{"additional property (library)", `{"command":"ls","rm":"-rf"}`, "", []string{"(root): unexpected additional properties", `"rm"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := args(tt.in)
			before, _ := json.Marshal(in)
			got, err := ValidateArguments(tool, in)
			after, _ := json.Marshal(in)
			if string(before) != string(after) {
				t.Fatalf("input mutated: %s -> %s", before, after)
			}
			if tt.errHas != nil {
				if err == nil {
					t.Fatalf("want error, got %v", got)
				}
				if !errors.Is(err, ErrInvalidArguments) {
					t.Fatalf("not ErrInvalidArguments: %v", err)
				}
				for _, s := range tt.errHas {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error lacks %q:\n%s", s, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !reflect.DeepEqual(got, args(tt.want)) {
				g, _ := json.Marshal(got)
				t.Fatalf("got %s want %s", g, tt.want)
			}
		})
	}
}

func TestValidateArgumentsEdges(t *testing.T) {
	// No schema: anything goes; nil args become {}.
	got, err := ValidateArguments(&Tool{Name: "t"}, nil)
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("%v %v", got, err)
	}
	// Unchanged arguments are returned as is (no copy).
	tool := &Tool{Name: "t", Parameters: json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"}}}`)}
	in := map[string]any{"a": "x"}
	got, err = ValidateArguments(tool, in)
	if err != nil || reflect.ValueOf(got).Pointer() != reflect.ValueOf(in).Pointer() {
		t.Fatalf("copied or failed: %v", err)
	}
	// A broken schema is a clear error naming the tool, not a panic.
	for _, p := range []string{`{"type": 5}`, `not json`, `{"$ref": "http://example.com/remote.json"}`,
		// In-place reference cycles would recurse forever inside the validator.
		`{"$ref": "#"}`, `{"anyOf": [{"$ref": "#"}]}`,
		`{"allOf": [{"$ref": "#/$defs/a"}], "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"not": {"$ref": "#/$defs/a"}}}}`,
		`{"properties": {"x": {"$anchor": "x", "allOf": [{"$ref": "#x"}]}}}`} {
		_, err := ValidateArguments(&Tool{Name: "broken", Parameters: json.RawMessage(p)}, map[string]any{})
		if err == nil || !strings.Contains(err.Error(), "broken") {
			t.Errorf("schema %s: %v", p, err)
		}
	}
	// Recursive schemas that descend into the value are fine.
	tree := &Tool{Name: "tree", Parameters: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"},"children":{"type":"array","items":{"$ref":"#"}}}}`)}
	got, err = ValidateArguments(tree, args(`{"name":"a","children":[{"name":"b","children":[{"name":7}]}]}`))
	if err != nil || got["children"].([]any)[0].(map[string]any)["children"].([]any)[0].(map[string]any)["name"] != "7" {
		t.Fatalf("tree: %v %v", got, err)
	}
	// Old drafts are validated rather than refused.
	old := &Tool{Name: "old", Parameters: json.RawMessage(`{"$schema":"http://json-schema.org/draft-04/schema#","type":"object","properties":{"n":{"type":"integer"}}}`)}
	if got, err := ValidateArguments(old, map[string]any{"n": "3"}); err != nil || got["n"] != 3.0 {
		t.Fatalf("draft-04: %v %v", got, err)
	}
	// ValidateToolCall: unknown tool.
	_, err = ValidateToolCall([]Tool{*tool}, ToolCall("c", "nope", nil))
	if !errors.Is(err, ErrToolNotFound) {
		t.Fatalf("unknown tool: %v", err)
	}
	if got, err := ValidateToolCall([]Tool{*tool}, ToolCall("c", "t", map[string]any{"a": 1.0})); err != nil || got["a"] != "1" {
		t.Fatalf("%v %v", got, err)
	}
}

func TestSchemaFor(t *testing.T) {
	type params struct {
		Command string `json:"command" jsonschema:"the shell command"`
		Timeout int    `json:"timeout,omitempty"`
	}
	raw, err := SchemaFor[params]()
	if err != nil {
		t.Fatal(err)
	}
	tool := &Tool{Name: "bash", Parameters: raw}
	got, err := ValidateArguments(tool, map[string]any{"command": "ls", "timeout": "9"})
	if err != nil || got["timeout"] != 9.0 {
		t.Fatalf("%s: %v %v", raw, got, err)
	}
	if _, err := ValidateArguments(tool, map[string]any{}); err == nil {
		t.Fatalf("command should be required by %s", raw)
	}
	if !strings.Contains(string(MustSchemaFor[params]()), "the shell command") {
		t.Fatal("description lost")
	}
	if _, err := SchemaFor[chan int](); err == nil {
		t.Fatal("chan should not have a schema")
	}
}

var sinkValidated map[string]any

func BenchmarkValidateArguments(b *testing.B) {
	tool := &Tool{Name: "bash", Parameters: json.RawMessage(bashSchema)}
	b.Run("valid", func(b *testing.B) {
		in := args(`{"command":"ls -la","timeout":10,"verbose":true}`)
		b.ReportAllocs()
		cpu := cputime.Process()
		for b.Loop() {
			sinkValidated, _ = ValidateArguments(tool, in)
		}
		cputime.Report(b, cpu)
	})
	b.Run("coerce", func(b *testing.B) {
		in := args(`{"command":"ls -la","timeout":"10","verbose":"true"}`)
		b.ReportAllocs()
		cpu := cputime.Process()
		for b.Loop() {
			sinkValidated, _ = ValidateArguments(tool, in)
		}
		cputime.Report(b, cpu)
	})
	b.Run("with-default", func(b *testing.B) {
		in := args(`{"command":"ls -la"}`)
		b.ReportAllocs()
		cpu := cputime.Process()
		for b.Loop() {
			sinkValidated, _ = ValidateArguments(tool, in)
		}
		cputime.Report(b, cpu)
	})
	// For reference: the library's Validate alone on the same schema and arguments.
	b.Run("library-validate-only", func(b *testing.B) {
		cs, err := compileSchema(tool.Parameters)
		if err != nil {
			b.Fatal(err)
		}
		in := args(`{"command":"ls -la","timeout":10,"verbose":true}`)
		b.ReportAllocs()
		cpu := cputime.Process()
		for b.Loop() {
			_ = cs.resolved.Validate(in)
		}
		cputime.Report(b, cpu)
	})
	simple := &Tool{Name: "read", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)}
	b.Run("simple", func(b *testing.B) {
		in := args(`{"path":"/etc/hosts"}`)
		b.ReportAllocs()
		cpu := cputime.Process()
		for b.Loop() {
			sinkValidated, _ = ValidateArguments(simple, in)
		}
		cputime.Report(b, cpu)
	})
}

// FuzzValidateArguments: any schema and any arguments give a result or an error, never a panic,
// and a successful result validates again unchanged (coercion reaches a fixed point).
func FuzzValidateArguments(f *testing.F) {
	f.Add(bashSchema, `{"command":"ls","timeout":"5"}`)
	f.Add(`{"type":"object","properties":{"a":{"type":["integer","null"]},"b":{"type":"array","items":{"type":"boolean"}}}}`, `{"a":"","b":"true"}`)
	f.Add(`{"type":"object","properties":{"o":{"type":"object","properties":{"x":{"default":{"y":1}}}}}}`, `{"o":{}}`)
	f.Add(`{"$ref":"#"}`, `{}`)
	f.Fuzz(func(t *testing.T, schema, in string) {
		var m map[string]any
		if json.Unmarshal([]byte(in), &m) != nil {
			m = ParsePartialJSON(in)
		}
		tool := &Tool{Name: "fuzz", Parameters: json.RawMessage(schema)}
		out, err := ValidateArguments(tool, m)
		if err != nil {
			return
		}
		if out == nil {
			t.Fatal("nil result without error")
		}
		again, err := ValidateArguments(tool, out)
		if err != nil {
			t.Fatalf("result %v of %s does not validate again: %v", out, in, err)
		}
		a, _ := json.Marshal(again)
		o, _ := json.Marshal(out)
		if string(a) != string(o) {
			t.Fatalf("not a fixed point: %s -> %s", o, a)
		}
	})
}
