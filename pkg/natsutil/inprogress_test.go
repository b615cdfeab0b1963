package natsutil_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

// A delivery held for several AckWaits is not redelivered while registered, and is once it is
// removed without an ack.
func TestInProgressKeepsDeliveries(t *testing.T) {
	ctx := context.Background()
	ns := natstest.New(t, natstest.WithMemoryStorage())
	if _, err := ns.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "WORK", Subjects: []string{"work"}}); err != nil {
		t.Fatal(err)
	}
	const ackWait = 300 * time.Millisecond
	cons, err := ns.JS.CreateOrUpdateConsumer(ctx, "WORK", jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ns.JS.Publish(ctx, "work", []byte("job")); err != nil {
		t.Fatal(err)
	}
	next := func(wait time.Duration) jetstream.Msg {
		b, err := cons.Fetch(1, jetstream.FetchMaxWait(wait))
		if err != nil {
			t.Fatal(err)
		}
		for m := range b.Messages() {
			return m
		}
		return nil
	}
	m := next(time.Second)
	if m == nil {
		t.Fatal("no delivery")
	}
	p := natsutil.NewInProgress(ackWait / 3)
	defer p.Close()
	p.Add(m)
	if again := next(4 * ackWait); again != nil {
		t.Fatal("redelivered while in progress")
	}
	p.Remove(m)
	again := next(4 * ackWait)
	if again == nil {
		t.Fatal("not redelivered after Remove without an ack")
	}
	if md, _ := again.Metadata(); md.NumDelivered != 2 {
		t.Fatalf("delivered %d times, want 2", md.NumDelivered)
	}
	p.Close()
	p.Close() // twice is fine
}
