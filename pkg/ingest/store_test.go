package ingest

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

// TestIngestStoresEachMessageOnce (issue 40): a message is stored once on the bus, inside the
// inbox events that carry it when it reaches its session, on IM_IN when none does; a repeat
// of its platform message id is dropped by the stream that holds it and reported as a
// duplicate.
func TestIngestStoresEachMessageOnce(t *testing.T) {
	ns := natstest.New(t, natstest.WithMemoryStorage())
	in := New(ns.JS, Options{Trigger: Trigger{Masters: []string{"boss"}}})
	ctx := context.Background()
	cases := []struct {
		name, id, scope, sender, text string
		mention                       bool
		imIn                          bool     // stored on IM_IN
		inbox                         []string // the inbox events, in order
	}{
		{"private message", "p1", "private", "u1", "hello", false, false, []string{events.TypeUserMessage}},
		{"group mention", "g1", "group", "u1", "hello", true, false, []string{events.TypeUserMessage}},
		{"group chatter", "g2", "group", "u1", "just chatting", false, false, []string{events.TypeListen}},
		{"command", "c1", "private", "u1", "/help", false, false, []string{events.TypeCommand}},
		{"steer", "s1", "private", "boss", "/steer shorter", false, false, []string{events.TypeSteer}},
		{"ignored prefix", "i1", "private", "u1", "!nothing", false, true, nil},
		{"refused command", "r1", "private", "u1", "/steer shorter", false, true, nil},
		{"cancel (its abort carries no message)", "a1", "private", "boss", "/cancel", false, true, []string{events.TypeAbort}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := func() *events.IMMessage {
				segs := events.Segments{events.TextSeg(tc.text)}
				if tc.mention {
					segs = append(events.Segments{events.AtSeg("b1", "bot")}, segs...)
				}
				return &events.IMMessage{Platform: "webhook", Bot: "b1", MessageID: tc.id, Scene: events.Scene{Type: tc.scope, ID: "s-" + tc.id},
					Sender: events.Sender{ID: tc.sender, Name: "N"}, Content: segs}
			}
			res, err := in.Ingest(ctx, m())
			if err != nil || res.Duplicate {
				t.Fatalf("Ingest = %+v, %v", res, err)
			}
			sk := m().SessionKey()
			check := func() {
				t.Helper()
				var got []string
				for _, raw := range stored(t, ns.JS, events.StreamSessionIn, events.AgentInSubject(sk)) {
					got = append(got, raw.Header.Get(events.HeaderType))
					ev, err := events.DecodeMsg(&nats.Msg{Subject: raw.Subject, Header: raw.Header, Data: raw.Data})
					if err != nil {
						t.Fatal(err)
					}
					if msg, ok := events.InboundMessage(ev); ok && (msg.MessageID != tc.id || msg.Content.PlainText() == "") {
						t.Errorf("inbox event carries %+v", msg)
					}
				}
				if len(got) != len(tc.inbox) || len(got) > 0 && got[0] != tc.inbox[0] {
					t.Errorf("inbox events %v, want %v", got, tc.inbox)
				}
				if n := len(stored(t, ns.JS, events.StreamIMIn, events.IMInSubject(sk))); n != map[bool]int{true: 1}[tc.imIn] {
					t.Errorf("IM_IN holds %d copies, want it to hold one: %v", n, tc.imIn)
				}
			}
			check()
			res, err = in.Ingest(ctx, m()) // a retry, a replayed webhook
			if err != nil || !res.Duplicate {
				t.Fatalf("again: Ingest = %+v, %v; want a duplicate", res, err)
			}
			check()
		})
	}
}

// stored returns the messages stream holds on subj.
func stored(t *testing.T, js jetstream.JetStream, stream, subj string) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := uint64(1); ; {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
		seq = m.Sequence + 1
	}
}
