package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

// BenchmarkFindReceipt measures a receipt lookup on an IM_SENT that holds one minute
// (ReceiptSkew) of 1,000 turns/s: 60,000 parts of 200 chats. Layout "batched": their receipts in
// group-committed batches of 5 (the bench's ~0.2–0.4 messages per part), one message per
// receipt bucket in a write; layout "chat": every receipt alone on its chat's subject (before
// issue 40's group commit). "found" looks up a part in the middle of its bucket, "not found" a
// part that has no receipt (the answer that costs most: every message of the chat's subject and
// of the bucket's since the part was stored, then the per-part subject), "alone" a part
// recorded alone on its chat's subject. The figures are per lookup.
func BenchmarkFindReceipt(b *testing.B) {
	for _, layout := range []string{"batched", "chat"} {
		b.Run(layout, func(b *testing.B) { benchFindReceipt(b, layout == "batched") })
	}
}

func benchFindReceipt(b *testing.B, batched bool) {
	const (
		parts = 60_000
		chats = 200
	)
	batch := 5
	if !batched {
		batch = 1
	}
	srv := natstest.New(b, natstest.WithMemoryStorage())
	js, ctx := srv.JS, context.Background()
	key := func(i int) events.SessionKey { return testKey(fmt.Sprintf("g%d", i%chats)) }
	rcpt := func(i int) events.Receipt {
		r := testReceipt(key(i), fmt.Sprintf("t%d-0", i), fmt.Sprintf("p%d", i))
		r.Content = events.Segments{events.TextSeg("Tomorrow in Hangzhou: light rain, 13–19°C, north-east wind. Yes, bring an umbrella.")}
		return r
	}
	var futs []jetstream.PubAckFuture
	var rs []events.Receipt
	var ids []string
	flush := func() {
		bucket, _ := events.ReceiptBucket(ids[0])
		var ev events.Any = events.New(events.ReceiptBatch{Receipts: rs})
		subj := events.IMSentBatchSubject(bucket)
		if !batched {
			ev, subj = events.New(rs[0]), events.IMSentSubject(rs[0].SessionKey())
		}
		m, err := events.NewMsg(subj, ev)
		if err != nil {
			b.Fatal(err)
		}
		for _, id := range ids {
			m.Header.Add(events.HeaderOutID, id)
		}
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			b.Fatal(err)
		}
		futs = append(futs, f)
		rs, ids = nil, nil
	}
	for i := range parts {
		if len(ids) == batch || len(ids) > 0 && i%events.ReceiptBucketTurns == 0 {
			flush()
		}
		if i%(chats*batch) == 0 { // every chat also has some receipts written alone
			alone := rcpt(parts + i)
			publishReceiptMsg(b, js, events.IMSentSubject(alone.SessionKey()), events.New(alone), alone.OutID)
		}
		if i == parts/2+7 {
			continue // the part that was never sent
		}
		rs = append(rs, rcpt(i))
		ids = append(ids, rs[len(rs)-1].OutID)
	}
	flush()
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			b.Fatal(err)
		}
	}
	sent, err := js.Stream(ctx, events.StreamIMSent)
	if err != nil {
		b.Fatal(err)
	}
	since := time.Now().Add(-ReceiptSkew)
	for _, tc := range []struct {
		name string
		i    int
		want bool
	}{
		{"found", parts/2 + 3, true},
		{"not found", parts/2 + 7, false},
		{"alone", parts + chats*batch*10, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			k, id := key(tc.i), fmt.Sprintf("t%d-0", tc.i)
			b.ReportAllocs()
			for b.Loop() {
				_, err := FindReceipt(ctx, js, sent, k, id, since)
				if tc.want != (err == nil) || err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
					b.Fatalf("FindReceipt(%s) = %v", id, err)
				}
			}
		})
	}
}
