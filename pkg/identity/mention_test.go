package identity

import (
	"testing"

	"github.com/agentbus/agentbus/pkg/events"
)

func TestStripBotMention(t *testing.T) {
	m := &events.IMMessage{Bot: "b1", Content: events.Segments{events.AtSeg("b1", "zhin")}}
	cases := []struct{ in, want string }{
		{"@zhin hello", "hello"},
		{"hello @zhin, how are you", "hello , how are you"},
		{"@b1 hi", "hi"},
		{"@zhinbot is someone else", "@zhinbot is someone else"},
		{"mail me at a@b.c", "mail me at a@b.c"},
		{"no mention", "no mention"},
	}
	for _, c := range cases {
		if got := StripBotMention(c.in, m); got != c.want {
			t.Errorf("StripBotMention(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
