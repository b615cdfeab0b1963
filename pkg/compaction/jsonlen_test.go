package compaction

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/agentbus/agentbus/pkg/llm"
)

func TestJSONLen(t *testing.T) {
	type custom struct {
		A string `json:"a"`
		B []int  `json:"b,omitempty"`
	}
	var nilMap map[string]any
	tests := []struct {
		name string
		v    any
	}{
		{"nil", nil},
		{"nil map", nilMap},
		{"empty map", map[string]any{}},
		{"nil slice", []any(nil)},
		{"empty slice", []any{}},
		{"ascii", "hello world"},
		{"escapes", "a\"b\\c\nd\re\tf\bg\fh"},
		{"control", "\x00\x01\x1f"},
		{"html", "<a href=\"x\">&amp;</a>"},
		{"utf8", "中文 ünïcødé 🎉"},
		{"line separators", "a\u2028b\u2029c"},
		{"invalid utf8", "a\xffb\xc3"},
		{"true", true},
		{"false", false},
		{"ints", []any{0, -1, 42, int64(math.MaxInt64), int32(math.MinInt32)}},
		{"floats", []any{0.0, 1.5, -2.25, 1e20, 1e21, 1e-6, 1e-7, 123456789.125, math.MaxFloat64, math.SmallestNonzeroFloat64, -0.0}},
		{"float32", []any{float32(1.1), float32(1e-7), float32(3e38), float32(123456789), float32(1e10)}},
		{"number", json.Number("12.50")},
		{"empty number", json.Number("")},
		{"nested", map[string]any{"path": "/tmp/x", "n": 3.0, "opts": map[string]any{"deep": []any{"a", nil, true, map[string]any{}}}, "k<&>": "v"}},
		{"custom struct", map[string]any{"c": custom{A: "x", B: []int{1, 2}}}},
		{"raw message", map[string]any{"r": json.RawMessage(`{"a": 1}`)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want, err := json.Marshal(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := jsonLen(tc.v)
			if !ok || got != len(want) {
				t.Fatalf("jsonLen = %d, %v; json.Marshal wrote %d bytes: %s", got, ok, len(want), want)
			}
		})
	}
	for _, bad := range []any{math.NaN(), math.Inf(1), map[string]any{"x": []any{math.Inf(-1)}}, json.Number("1x")} {
		if _, ok := jsonLen(bad); ok {
			t.Errorf("jsonLen(%v) ok, json.Marshal fails", bad)
		}
	}
}

func BenchmarkEstimateTokens(b *testing.B) {
	m := llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{
		llm.Text("let me look"),
		llm.ToolCall("call_1", "read_file", map[string]any{"path": "/work/notes/today.md", "offset": 120.0, "limit": 40.0}),
	}}
	b.ReportAllocs()
	for b.Loop() {
		EstimateTokens(&m)
	}
}
