package dlq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/dlq"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

// publishLetter dead-letters body (first stored on subject in stream) the way the roles do.
func publishLetter(t *testing.T, js jetstream.JetStream, role, reason, subject, stream string, body []byte, h nats.Header) {
	t.Helper()
	ctx := context.Background()
	dl := events.DeadLetter{Role: role, Reason: reason, Error: "callback answered 400", Subject: subject, Stream: stream,
		Deliveries: 1, Headers: map[string][]string(h)}
	if stream != "" {
		orig := nats.Header{}
		for k, v := range h {
			if k != "Nats-Expected-Last-Subject-Sequence" && k != nats.MsgIdHdr {
				orig[k] = v
			}
		}
		ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: body, Header: orig})
		if err != nil {
			t.Fatal(err)
		}
		dl.Seq = ack.Sequence
	}
	dl.SetBody(body)
	m, err := events.NewMsg(events.DeadLetterSubject(role, reason), events.New(dl, events.WithTurn("turn-1")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
}

func TestListGetRetryDiscardPurge(t *testing.T) {
	srv := natstest.New(t)
	_, js := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sk := events.SessionKey{Platform: "webhook", Bot: "b1", Scope: "private", Scene: "u1"}
	out := events.IMOutSubject(sk)
	h := nats.Header{}
	h.Set(nats.MsgIdHdr, "turn-1/0")
	h.Set(events.HeaderSession, sk.String()+"#1")
	h.Set("Nats-Expected-Last-Subject-Sequence", "0")
	publishLetter(t, js, events.RoleEgress, events.DLQPoison, out, events.StreamIMOut, []byte(`{"part":1}`), h)
	publishLetter(t, js, events.RoleIngest, events.DLQInvalid, "telegram/bot1", "", []byte("not json"), nil)
	publishLetter(t, js, events.RoleEgress, events.DLQMaxDeliveries, out, events.StreamIMOut, []byte(`{"part":2}`), h)

	s, err := dlq.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	all, err := s.List(ctx, dlq.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 {
		t.Fatalf("List: %d letters, want 3: %+v", len(all), all)
	}
	for _, tc := range []struct {
		name string
		f    dlq.Filter
		want int
	}{
		{"role", dlq.Filter{Role: events.RoleEgress}, 2},
		{"reason", dlq.Filter{Reason: events.DLQInvalid}, 1},
		{"role and reason", dlq.Filter{Role: events.RoleEgress, Reason: events.DLQPoison}, 1},
		{"session key", dlq.Filter{Session: sk.String()}, 2},
		{"since the future", dlq.Filter{Since: time.Now().Add(time.Hour)}, 0},
		{"limit", dlq.Filter{Limit: 1}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.List(ctx, tc.f)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.want {
				t.Fatalf("%d letters, want %d: %+v", len(got), tc.want, got)
			}
		})
	}
	newest, _ := s.List(ctx, dlq.Filter{Limit: 1})
	if newest[0].Reason != events.DLQMaxDeliveries {
		t.Fatalf("Limit keeps the newest; got %+v", newest[0])
	}

	l, err := s.Get(ctx, all[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if l.Role != events.RoleEgress || l.Reason != events.DLQPoison || l.Session != sk.String()+"#1" || l.Turn != "turn-1" ||
		l.Subject != out || l.Stream != events.StreamIMOut || string(l.Body) != `{"part":1}` || l.Error != "callback answered 400" {
		t.Fatalf("Get: %+v", l)
	}

	// The ingest letter never was on the bus: nowhere to put it back.
	if _, err := s.Retry(ctx, all[1].ID); !errors.Is(err, dlq.ErrNotRetryable) {
		t.Fatalf("Retry of an ingest letter: %v, want ErrNotRetryable", err)
	}

	// Retry puts the original back on its subject, in its stream, with its headers but a new
	// Nats-Msg-Id (the original's is still inside the dedupe window) and no control headers.
	r, err := s.Retry(ctx, all[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Stream != events.StreamIMOut || r.Subject != out {
		t.Fatalf("Retry: %+v", r)
	}
	st, _ := js.Stream(ctx, events.StreamIMOut)
	m, err := st.GetMsg(ctx, r.Seq)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != `{"part":1}` || m.Header.Get(events.HeaderSession) != sk.String()+"#1" ||
		m.Header.Get("Nats-Expected-Last-Subject-Sequence") != "" || m.Header.Get(nats.MsgIdHdr) != "dlq-retry."+all[0].ID+".turn-1/0" {
		t.Fatalf("retried message: %q %v", m.Data, m.Header)
	}
	if _, err := s.Get(ctx, all[0].ID); !errors.Is(err, dlq.ErrNotFound) {
		t.Fatalf("a retried letter is gone; Get: %v", err)
	}
	if _, err := s.Get(ctx, "x"); !errors.Is(err, dlq.ErrBadID) {
		t.Fatalf("Get(x): %v", err)
	}

	if err := s.Discard(ctx, all[1].ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Discard(ctx, all[1].ID); !errors.Is(err, dlq.ErrNotFound) {
		t.Fatalf("second Discard: %v", err)
	}
	publishLetter(t, js, events.RoleToolWorker, events.DLQUnknownTool, events.ToolCallSubject("nope"), events.StreamToolCalls, []byte(`{}`), nil)
	n, err := s.Purge(ctx, dlq.Filter{Role: events.RoleEgress})
	if err != nil || n != 1 {
		t.Fatalf("Purge egress: %d, %v; want 1", n, err)
	}
	n, err = s.Purge(ctx, dlq.Filter{})
	if err != nil || n != 1 {
		t.Fatalf("Purge all: %d, %v; want 1", n, err)
	}
	if left, _ := s.List(ctx, dlq.Filter{}); len(left) != 0 {
		t.Fatalf("after Purge: %+v", left)
	}
}
