package im_test

import (
	"context"
	"testing"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
	"github.com/agentbus/agentbus/pkg/inbox"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

// TestLastInbound: the last inbound message of a chat is found where ingest stores it since
// issue 40, IM_IN or the session inbox, whichever holds the later one, past inbox events that
// carry no message (followed back along the inbox chain).
func TestLastInbound(t *testing.T) {
	srv := natstest.New(t, natstest.WithMemoryStorage())
	ctx := context.Background()
	msg := func(id string) events.IMMessage {
		return events.IMMessage{Platform: "discord", Bot: "d1", MessageID: id, Scene: events.Scene{Type: "group", ID: "c1"},
			Sender: events.Sender{ID: "u1"}, Content: events.Segments{events.TextSeg("hi " + id)}}
	}
	sk := msg("").SessionKey()
	if _, ok := im.LastInbound(ctx, srv.JS, sk); ok {
		t.Fatal("found a message on an empty bus")
	}
	pub := inbox.NewPublisher(srv.JS)
	steps := []struct {
		name string
		ev   events.Any
		imIn bool
		want string
	}{
		{"ignored, on IM_IN", events.New(msg("100")), true, "100"},
		{"routed, in its inbox event", events.New(events.UserMessage{Message: msg("101")}), false, "101"},
		{"a reminder after it", events.New(events.Scheduled{ScheduleID: "s", Text: "x", CreatedBy: events.Sender{ID: "u1"}}), false, "101"},
		{"an abort after that", events.New(events.Abort{Sender: events.Sender{ID: "u1"}}), false, "101"},
		{"ignored again", events.New(msg("102")), true, "102"},
		{"a listen", events.New(events.Listen{Message: msg("103")}), false, "103"},
	}
	for _, s := range steps {
		subj := events.AgentInSubject(sk)
		if s.imIn {
			subj = events.IMInSubject(sk)
		}
		m, err := events.NewMsg(subj, s.ev)
		if err != nil {
			t.Fatal(err)
		}
		if s.imIn {
			_, err = srv.JS.PublishMsg(ctx, m)
		} else {
			_, err = pub.Publish(ctx, m)
		}
		if err != nil {
			t.Fatal(err)
		}
		got, ok := im.LastInbound(ctx, srv.JS, sk)
		if !ok || got.MessageID != s.want {
			t.Errorf("after %s: LastInbound = %q, %v; want %q", s.name, got.MessageID, ok, s.want)
		}
	}
}
