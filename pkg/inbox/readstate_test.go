package inbox_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/inbox"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

// deliveries publishes n events on one inbox subject and returns their deliveries from a
// consumer of the real SESSION_IN stream, by stream sequence.
func deliveries(t *testing.T, n int) map[uint64]jetstream.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ns := natstest.New(t, natstest.WithMemoryStorage())
	for i := range n {
		if _, err := ns.JS.PublishMsg(ctx, event(subject(1), "e"+string(rune('a'+i)))); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := ns.JS.CreateConsumer(ctx, events.StreamSessionIn, jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(n, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64]jetstream.Msg{}
	for m := range batch.Messages() {
		meta, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		out[meta.Sequence.Stream] = m
	}
	if len(out) != n {
		t.Fatalf("%d deliveries, want %d", len(out), n)
	}
	return out
}

// A ReadState holds deliveries until the cursor has passed them and nothing needs them, says
// whether anything past the cursor is known, finds the first held event in a range, and
// hands back what it holds when it closes.
func TestReadState(t *testing.T) {
	ds := deliveries(t, 3) // sequences 1, 2, 3
	r := inbox.NewReadState()
	if r.Behind() || !r.Empty() {
		t.Fatal("a new read state is behind or holds something")
	}
	for _, seq := range []uint64{3, 1} {
		if !r.Hold(seq, ds[seq]) {
			t.Fatalf("Hold(%d) refused while open", seq)
		}
	}
	if !r.Know(2) || r.Know(0) {
		t.Fatal("Know: want 2 noted and 0 (not past the cursor) refused")
	}
	if !r.Behind() {
		t.Fatal("held deliveries past the cursor: want behind")
	}
	if seq, m, ok := r.Between(0, 10); !ok || seq != 1 || m != ds[1] {
		t.Fatalf("Between(0, 10) = %d, %v, %v; want the delivery of 1", seq, m, ok)
	}
	if seq, _, ok := r.Between(1, 3); ok {
		t.Fatalf("Between(1, 3) = %d; want none (2 is only known, 3 is the limit)", seq)
	}

	r.Pass(2)
	if r.Cursor() != 2 {
		t.Fatalf("cursor %d, want 2", r.Cursor())
	}
	r.Pass(1) // the cursor never goes back
	var acked []uint64
	ack := func(m jetstream.Msg) {
		meta, _ := m.Metadata()
		acked = append(acked, meta.Sequence.Stream)
		if err := m.Ack(); err != nil {
			t.Error(err)
		}
	}
	r.AckPassed(func(seq uint64) bool { return seq == 1 }, ack) // a turn still needs 1
	if len(acked) != 0 {
		t.Fatalf("acked %v while 1 is needed and 3 is past the cursor", acked)
	}
	r.AckPassed(func(uint64) bool { return false }, ack)
	if !slices.Equal(acked, []uint64{1}) {
		t.Fatalf("acked %v, want [1]", acked)
	}
	if !r.Behind() { // 3 is held past the cursor; the rung 2 is passed and forgotten
		t.Fatal("3 is held past the cursor: want behind")
	}
	r.Pass(3)
	if r.Behind() {
		t.Fatal("nothing past the cursor: want not behind")
	}
	held := r.Close()
	if len(held) != 1 || held[3][0] != ds[3] {
		t.Fatalf("Close returned %v, want the delivery of 3", held)
	}
	if r.Hold(4, ds[1]) || r.Know(4) {
		t.Fatal("a closed read state took a delivery or a ring")
	}
}
