package natsutil_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

// TestFastPublishResendsUnanswered stands in for a stream whose leader is being elected (its
// replicas take a publish and drop it without a word): a responder on the subject that ignores
// the first request and acks the next as a stream does. A publish with a Nats-Msg-Id is sent
// again and acknowledged within the caller's deadline; one without an id is sent once.
func TestFastPublishResendsUnanswered(t *testing.T) {
	srv := natstest.New(t, natstest.WithoutProvision())
	var got atomic.Int32
	sub, err := srv.NC.Subscribe("elect.>", func(m *nats.Msg) {
		if got.Add(1) == 1 {
			return // dropped, as a replica without a leader does
		}
		_ = m.Respond([]byte(`{"stream":"ELECT","seq":7}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := srv.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	fast := natsutil.FastPublish(srv.JS, 0)

	m := nats.NewMsg("elect.with-id")
	m.Header.Set(nats.MsgIdHdr, "id-1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ack, err := fast.PublishMsg(ctx, m)
	if err != nil {
		t.Fatalf("publish with an id: %v (sent %d times)", err, got.Load())
	}
	if ack.Stream != "ELECT" || ack.Sequence != 7 || got.Load() != 2 {
		t.Fatalf("ack %+v after %d sends, want ELECT/7 after 2", ack, got.Load())
	}

	got.Store(0)
	sub2, err := srv.NC.Subscribe("silent.>", func(*nats.Msg) { got.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub2.Unsubscribe()
	if err := srv.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	_, err = fast.PublishMsg(ctx2, nats.NewMsg("silent.no-id"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("publish without an id to a silent subject: %v, want the caller's deadline", err)
	}
	if n := got.Load(); n != 1 {
		t.Fatalf("a publish without an id was sent %d times, want 1", n)
	}
}
