package natsutil

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

func TestParsePubAck(t *testing.T) {
	cases := []struct {
		in   string
		want *jetstream.PubAck // nil: left to encoding/json
	}{
		{`{"stream":"IM_IN","seq":42}`, &jetstream.PubAck{Stream: "IM_IN", Sequence: 42}},
		{`{"stream":"S","domain":"hub","seq":7}`, &jetstream.PubAck{Stream: "S", Domain: "hub", Sequence: 7}},
		{`{"stream":"S","seq":3,"duplicate": true}`, &jetstream.PubAck{Stream: "S", Sequence: 3, Duplicate: true}},
		{`{"stream":"S","seq":3,"duplicate":true}`, &jetstream.PubAck{Stream: "S", Sequence: 3, Duplicate: true}},
		{`{"stream":"S","seq":18446744073709551615}`, &jetstream.PubAck{Stream: "S", Sequence: 18446744073709551615}},
		{`{"stream":"S","seq":18446744073709551616}`, nil}, // overflow
		{`{"stream":"S","seq":}`, nil},
		{`{"stream":"S","seq":1,"val":"5"}`, nil},
		{`{"stream":"S","seq":1,"duplicate": true,"batch":"b","count":2}`, nil},
		{`{"stream":"S\"x","seq":1}`, nil},
		{`{"stream":"","seq":1}`, nil},
		{`{"error":{"code":503,"err_code":10039,"description":"jetstream not enabled"}}`, nil},
		{`{"stream":"S","seq":1} `, nil},
		{``, nil},
	}
	for _, tc := range cases {
		got, ok := parsePubAck([]byte(tc.in))
		switch {
		case tc.want == nil && ok:
			t.Errorf("%s: parsed as %+v, want it left to encoding/json", tc.in, got)
		case tc.want != nil && (!ok || *got != *tc.want):
			t.Errorf("%s: %+v, %v; want %+v", tc.in, got, ok, tc.want)
		}
		// Whatever the fast path says, decodePubAck agrees with a plain decode.
		if ok {
			if slow, err := decodeSlow([]byte(tc.in)); err != nil || *slow != *got {
				t.Errorf("%s: fast %+v, encoding/json %+v, %v", tc.in, got, slow, err)
			}
		}
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = parsePubAck([]byte(`{"stream":"IM_IN","seq":42}`)) }); n > 1 {
		t.Errorf("parsePubAck allocates %v times, want at most 1 (the ack; the stream name is interned)", n)
	}
}

// decodeSlow is decodePubAck without the fast path.
func decodeSlow(b []byte) (*jetstream.PubAck, error) {
	return decodePubAck(append([]byte(" "), b...)) // a leading space is valid JSON the fast path refuses
}
