package events

import (
	"errors"
	"testing"
)

func TestWakeRoundTrip(t *testing.T) {
	a := SessionKey{Platform: "tg", Bot: "b1", Scope: "group", Scene: "x.y z"}
	b := SessionKey{Platform: "qq", Bot: "b2", Scope: "private", Scene: "42"}
	cases := []struct {
		name string
		body []byte
		ack  string
		want []WakeEntry
	}{
		{"single ring form, ack in the header", WakeBody(a, 7), "$JS.ACK.a.b.1.7.7.1.0", []WakeEntry{{Session: a, Seq: 7, Ack: "$JS.ACK.a.b.1.7.7.1.0"}}},
		{"batch", AppendWake(AppendWake(nil, WakeEntry{Session: a, Seq: 1, Ack: "ack1"}), WakeEntry{Session: b, Seq: 2, Ack: "ack2"}),
			"", []WakeEntry{{Session: a, Seq: 1, Ack: "ack1"}, {Session: b, Seq: 2, Ack: "ack2"}}},
		{"batch entry without ack", AppendWake(nil, WakeEntry{Session: b, Seq: 3}), "", []WakeEntry{{Session: b, Seq: 3}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseWake(c.body, c.ack)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(c.want) {
				t.Fatalf("got %d entries %+v, want %+v", len(got), got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Errorf("entry %d: %+v, want %+v", i, got[i], c.want[i])
				}
			}
		})
	}
	for _, bad := range []string{"nospace\n", "tok notanumber ack\n", a.Token() + " 1\n" + "garbage\n"} {
		if _, err := ParseWake([]byte(bad), ""); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseWake(%q): %v, want ErrInvalid", bad, err)
		}
	}
}
