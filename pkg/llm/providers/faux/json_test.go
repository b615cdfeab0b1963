package faux

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
)

func TestMarshalArgs(t *testing.T) {
	tests := []map[string]any{
		nil,
		{},
		{"a": "x\"y\\z\n\t\r\x01 é 😀", "b": 1.5, "c": -3e21, "d": 1e-9, "e": true, "f": nil},
		{"nested": map[string]any{"list": []any{1.0, "two", false, map[string]any{}}}, "s": []string{"a", "b"}},
		{"int": 7, "i64": int64(-9)},
		{"bad": "\xff\xfe"},
		{"struct": struct{ A int }{1}},
	}
	for _, args := range tests {
		got := marshalArgs(args)
		var back, want map[string]any
		if err := json.Unmarshal([]byte(got), &back); err != nil {
			t.Fatalf("marshalArgs(%v) = %s: invalid JSON: %v", args, got, err)
		}
		j, _ := json.Marshal(args)
		if args == nil {
			j = []byte("{}")
		}
		_ = json.Unmarshal(j, &want)
		if !reflect.DeepEqual(back, want) {
			t.Fatalf("marshalArgs(%v) = %s, encoding/json gives %s", args, got, j)
		}
	}
	if got := marshalArgs(map[string]any{"x": math.NaN()}); got != "{}" {
		t.Fatalf("NaN: %s", got)
	}
}
