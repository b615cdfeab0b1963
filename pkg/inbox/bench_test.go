package inbox_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/inbox"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

// BenchmarkNextEvent reads a session's next event when the events of 2,000 other sessions lie
// between it and the cursor, as they do when every session takes a turn in between: the chain
// (one get of the subject's last event) against the plain first-at-or-after read.
func BenchmarkNextEvent(b *testing.B) {
	const sessions, rounds = 2000, 3
	ns := natstest.New(b)
	ctx := context.Background()
	p := inbox.NewPublisher(ns.JS)
	cursor := map[string]uint64{} // each subject's event before its last
	last := map[string]uint64{}
	for r := range rounds {
		for i := range sessions {
			subj := subject(i)
			ack, err := p.Publish(ctx, event(subj, fmt.Sprintf("r%d-%d", r, i)))
			if err != nil {
				b.Fatal(err)
			}
			cursor[subj], last[subj] = last[subj], ack.Sequence
		}
	}
	s, err := ns.JS.Stream(ctx, events.StreamSessionIn)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		read func(subj string, from uint64) (*jetstream.RawStreamMsg, error)
	}{
		{"chain", func(subj string, from uint64) (*jetstream.RawStreamMsg, error) {
			return inbox.Next(ctx, ns.JS, s, subj, from, true)
		}},
		{"plain", func(subj string, from uint64) (*jetstream.RawStreamMsg, error) {
			return s.GetMsg(ctx, from+1, jetstream.WithGetMsgSubject(subj))
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				subj := subject(i % sessions)
				m, err := tc.read(subj, cursor[subj])
				if err != nil || m.Sequence != last[subj] {
					b.Fatalf("%s after %d: %v, %v; want %d", subj, cursor[subj], m, err, last[subj])
				}
				i++
			}
		})
	}
}
