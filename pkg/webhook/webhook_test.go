package webhook

import (
	"errors"
	"testing"
)

func TestParseInbound(t *testing.T) {
	const ok = `{"id":"m1","scene":{"type":"group","id":"g1"},"sender":{"id":"u1"},"content":[{"type":"text","data":{"text":"hi"}}]}`
	cases := []struct {
		name string
		body string
		ok   bool
	}{
		{"valid", ok, true},
		{"valid with trailing whitespace", ok + " \n", true},
		{"stray ]", ok + "]", false},
		{"stray }", ok + "}", false},
		{"second object", ok + ok, false},
		{"trailing garbage", ok + "x", false},
		{"array", "[" + ok + "]", false},
		{"empty", "", false},
		{"null", "null", false},
		{"missing ids", `{"scene":{"type":"group"},"content":[{"type":"text"}]}`, false},
		{"bad scene type", `{"id":"m1","scene":{"type":"room","id":"g1"},"sender":{"id":"u1"},"content":[{"type":"text"}]}`, false},
		{"empty content", `{"id":"m1","scene":{"type":"group","id":"g1"},"sender":{"id":"u1"},"content":[]}`, false},
		{"untyped segment", `{"id":"m1","scene":{"type":"group","id":"g1"},"sender":{"id":"u1"},"content":[{"data":{}}]}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in, err := ParseInbound([]byte(c.body))
			switch {
			case c.ok && err != nil:
				t.Fatalf("ParseInbound: %v", err)
			case !c.ok && !errors.Is(err, ErrMalformed):
				t.Fatalf("ParseInbound = %+v, %v; want ErrMalformed", in, err)
			}
		})
	}
}
