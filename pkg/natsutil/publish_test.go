package natsutil_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

// TestFastPublish publishes the same messages through nats.go's PublishMsg and through
// FastPublish and checks that both answer alike: acks, duplicates, the server's errors (as
// *jetstream.APIError), no stream, counter acks (the encoding/json fallback).
func TestFastPublish(t *testing.T) {
	srv := natstest.New(t, natstest.WithoutProvision())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, cfg := range []jetstream.StreamConfig{
		{Name: "PLAIN_A", Subjects: []string{"a.>"}},
		{Name: "PLAIN_B", Subjects: []string{"b.>"}},
		{Name: "COUNT_A", Subjects: []string{"ca.>"}, AllowMsgCounter: true},
		{Name: "COUNT_B", Subjects: []string{"cb.>"}, AllowMsgCounter: true},
	} {
		if _, err := srv.JS.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	fast := natsutil.FastPublish(srv.JS, 0)
	msg := func(subj string, hdr ...string) *nats.Msg {
		m := nats.NewMsg(subj)
		m.Data = []byte("x")
		for i := 0; i+1 < len(hdr); i += 2 {
			m.Header.Set(hdr[i], hdr[i+1])
		}
		return m
	}
	cases := []struct {
		name string
		// subject under a. (nats.go) and b. (fast) or ca./cb., so both see the same stream state
		prefix string
		hdr    []string
		rest   string
	}{
		{"stored", "", nil, "x.1"},
		{"stored again", "", nil, "x.2"},
		{"with a msg id", "", []string{jetstream.MsgIDHeader, "id-1"}, "x.3"},
		{"duplicate msg id", "", []string{jetstream.MsgIDHeader, "id-1"}, "x.3"},
		{"wrong expected last sequence", "", []string{jetstream.ExpectedLastSeqHeader, "1"}, "x.4"},
		{"wrong expected stream", "", []string{jetstream.ExpectedStreamHeader, "NOPE"}, "x.5"},
		{"counter", "c", []string{"Nats-Incr", "5"}, "n"},
		{"counter again", "c", []string{"Nats-Incr", "-2"}, "n"},
		{"counter without increment", "c", nil, "n"},
		{"no stream", "z", nil, "x.6"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want, werr := srv.JS.PublishMsg(ctx, msg(tc.prefix+"a."+tc.rest, tc.hdr...))
			got, gerr := fast.PublishMsg(ctx, msg(tc.prefix+"b."+tc.rest, tc.hdr...))
			if (werr == nil) != (gerr == nil) {
				t.Fatalf("nats.go: %v; FastPublish: %v", werr, gerr)
			}
			if werr != nil {
				var wa, ga *jetstream.APIError
				switch {
				case errors.As(werr, &wa) != errors.As(gerr, &ga):
					t.Fatalf("nats.go: %v; FastPublish: %v", werr, gerr)
				case wa != nil && (wa.ErrorCode != ga.ErrorCode || wa.Code != ga.Code):
					t.Fatalf("nats.go: %+v; FastPublish: %+v", wa, ga)
				case errors.Is(werr, jetstream.ErrNoStreamResponse) != errors.Is(gerr, jetstream.ErrNoStreamResponse):
					t.Fatalf("nats.go: %v; FastPublish: %v", werr, gerr)
				}
				return
			}
			if got.Sequence != want.Sequence || got.Duplicate != want.Duplicate || got.Value != want.Value || got.Domain != want.Domain ||
				got.Stream[len(got.Stream)-1] != 'B' || want.Stream[len(want.Stream)-1] != 'A' {
				t.Fatalf("nats.go: %+v; FastPublish: %+v", want, got)
			}
		})
	}
	// With options it is nats.go's own call.
	if ack, err := fast.PublishMsg(ctx, msg("b.x.7"), jetstream.WithExpectStream("PLAIN_B")); err != nil || ack.Stream != "PLAIN_B" {
		t.Fatalf("with an option: %+v, %v", ack, err)
	}
	// A cancelled context fails the publish.
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if _, err := fast.PublishMsg(cctx, msg("b.x.8")); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

// TestExpectLastSubjectSeq checks that the header set by ExpectLastSubjectSeq, published
// through FastPublish without options, is refused and accepted exactly where nats.go's
// WithExpectLastSequencePerSubject is, with the same server error.
func TestExpectLastSubjectSeq(t *testing.T) {
	srv := natstest.New(t, natstest.WithoutProvision())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := srv.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "SEQ", Subjects: []string{"a.>", "b.>"}}); err != nil {
		t.Fatal(err)
	}
	fast := natsutil.FastPublish(srv.JS, 0)
	var lastA, lastB uint64 // each subject's last sequence so far
	for _, tc := range []struct {
		name   string
		expect func(last uint64) uint64
	}{
		{"first, expecting none", func(uint64) uint64 { return 0 }},
		{"expecting none again", func(uint64) uint64 { return 0 }},
		{"expecting the last", func(last uint64) uint64 { return last }},
		{"expecting an older one", func(last uint64) uint64 { return last - 1 }},
		{"expecting a later one", func(last uint64) uint64 { return last + 100 }},
		{"expecting the last again", func(last uint64) uint64 { return last }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, werr := srv.JS.PublishMsg(ctx, &nats.Msg{Subject: "a.x", Data: []byte("x")},
				jetstream.WithExpectLastSequencePerSubject(tc.expect(lastA)))
			m := &nats.Msg{Subject: "b.x", Data: []byte("x")}
			natsutil.ExpectLastSubjectSeq(m, tc.expect(lastB))
			got, gerr := fast.PublishMsg(ctx, m)
			if (werr == nil) != (gerr == nil) {
				t.Fatalf("nats.go: %v; ExpectLastSubjectSeq: %v", werr, gerr)
			}
			if werr != nil {
				var wa, ga *jetstream.APIError
				if !errors.As(werr, &wa) || !errors.As(gerr, &ga) || wa.ErrorCode != ga.ErrorCode {
					t.Fatalf("nats.go: %v; ExpectLastSubjectSeq: %v", werr, gerr)
				}
				return
			}
			lastA, lastB = want.Sequence, got.Sequence
		})
	}
	if lastA == 0 || lastB == 0 {
		t.Fatal("nothing was stored")
	}
}

// BenchmarkPublish is the figure behind FastPublish: one synchronous publish with its ack,
// through nats.go's PublishMsg and through FastPublish, on one embedded server (allocs/op is
// the part that decides; ns/op is mostly the round trip).
func BenchmarkPublish(b *testing.B) {
	srv := natstest.New(b, natstest.WithoutProvision())
	ctx := context.Background()
	if _, err := srv.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "BENCH", Subjects: []string{"bench.>"}}); err != nil {
		b.Fatal(err)
	}
	fast := natsutil.FastPublish(srv.JS, 0)
	for _, bc := range []struct {
		name  string
		js    jetstream.JetStream
		msgID bool          // with a Nats-Msg-Id: the publish may be sent again (requestAck)
		limit time.Duration // the caller's deadline (0: ctx without one)
	}{
		{"nats.go", srv.JS, false, 0}, {"FastPublish", fast, false, 0},
		// What the pipeline's publishes look like: an id, and a caller's deadline of 5 s
		// (toolbus, egress, the turn worker) or 1 s (the tool worker's attempt beat).
		{"FastPublish/msgid/5s", fast, true, 5 * time.Second}, {"FastPublish/msgid/1s", fast, true, time.Second},
	} {
		b.Run(bc.name, func(b *testing.B) {
			m := nats.NewMsg("bench." + strings.ReplaceAll(bc.name, "/", "_"))
			m.Data = make([]byte, 512)
			if bc.msgID {
				m.Header.Set(nats.MsgIdHdr, "bench-1") // stored once, then acked as a duplicate
			}
			b.ReportAllocs()
			for b.Loop() {
				pctx, cancel := ctx, context.CancelFunc(func() {})
				if bc.limit > 0 {
					pctx, cancel = context.WithTimeout(ctx, bc.limit)
				}
				_, err := bc.js.PublishMsg(pctx, m)
				cancel()
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAwaitAck is an async publish awaited at once, as the turn worker awaits its batch of
// appends: the ack is usually still in flight, so AwaitAck arms its timer.
func BenchmarkAwaitAck(b *testing.B) {
	srv := natstest.New(b, natstest.WithoutProvision())
	ctx := context.Background()
	if _, err := srv.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "BENCH", Subjects: []string{"bench.>"}}); err != nil {
		b.Fatal(err)
	}
	m := nats.NewMsg("bench.async")
	m.Data = make([]byte, 512)
	b.ReportAllocs()
	for b.Loop() {
		f, err := srv.JS.PublishMsgAsync(m)
		if err != nil {
			b.Fatal(err)
		}
		if err := natsutil.AwaitAck(ctx, f, time.Now().Add(5*time.Second)); err != nil {
			b.Fatal(err)
		}
	}
}
