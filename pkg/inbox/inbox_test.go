package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/inbox"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

// buses are a single server and a 3-node cluster with R3 streams: the server reports a refused
// expectation differently on each (10071, 10164), and a replicated stream also refuses one
// while another write to the subject is in flight.
func buses(t *testing.T) []struct {
	name string
	js   jetstream.JetStream
} {
	t.Helper()
	single := natstest.New(t)
	out := []struct {
		name string
		js   jetstream.JetStream
	}{{"one server", single.JS}}
	if testing.Short() {
		return out
	}
	cluster := natstest.NewCluster(t, 3)
	_, cjs := cluster.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	spec := events.DefaultSpec()
	spec.Replicas = 3
	if err := natsutil.Provision(ctx, cjs, spec); err != nil {
		t.Fatal(err)
	}
	return append(out, struct {
		name string
		js   jetstream.JetStream
	}{"cluster R3", cjs})
}

func subject(i int) string {
	return events.AgentInSubject(events.SessionKey{Platform: "webhook", Bot: "b", Scope: "private", Scene: "u" + strconv.Itoa(i)})
}

func event(subj, id string) *nats.Msg {
	m := nats.NewMsg(subj)
	m.Header.Set(jetstream.MsgIDHeader, id)
	m.Data = []byte(`{"type":"inbox.user_message","id":"` + id + `"}`)
	return m
}

// checkReads compares Next, confirmed and not, from every cursor of every subject with the
// plain read it replaces, and checks the stored chain: each chained event names the one before
// it on its subject (or one removed since, named in removed).
func checkReads(t *testing.T, ctx context.Context, js jetstream.JetStream, subjects []string, removed ...uint64) {
	t.Helper()
	s, err := js.Stream(ctx, events.StreamSessionIn)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, subj := range subjects {
		prev := uint64(0)
		for from := uint64(0); from <= info.State.LastSeq; from++ {
			want, werr := natsutil.ConsistentGetMsg(ctx, js, s, natsutil.MsgQuery{Seq: from + 1, NextFor: subj})
			for _, confirmed := range []bool{true, false} {
				got, gerr := inbox.Next(ctx, js, s, subj, from, confirmed)
				switch {
				case werr != nil || gerr != nil:
					if !errors.Is(werr, jetstream.ErrMsgNotFound) || !errors.Is(gerr, jetstream.ErrMsgNotFound) {
						t.Fatalf("%s after %d (confirmed %v): got err %v, the plain read %v", subj, from, confirmed, gerr, werr)
					}
				case got.Sequence != want.Sequence:
					t.Fatalf("%s after %d (confirmed %v): got %d, the plain read %d", subj, from, confirmed, got.Sequence, want.Sequence)
				}
			}
			if werr == nil && want.Sequence == from+1 {
				if p, ok := inbox.Prev(want.Header); ok && p != prev && !slices.Contains(removed, p) {
					t.Fatalf("%s: event %d names %d as its predecessor, the log has %d", subj, want.Sequence, p, prev)
				}
				prev = want.Sequence
			}
		}
	}
}

// TestChainOfInterleavedSessions publishes interleaved events of several sessions, some
// chained by two Publishers (two ingest replicas), some plain (a third party), some repeated
// (a retried webhook), one removed by hand (as a stream limit would): every read from every
// cursor gives what the plain read gives.
func TestChainOfInterleavedSessions(t *testing.T) {
	for _, bus := range buses(t) {
		t.Run(bus.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			// SESSION_IN denies message deletes (no role may erase an inbox, and the server never
			// allows them again); this test stands in for a stream limit with one, so it uses a
			// SESSION_IN that allows them.
			allowDeletes(t, ctx, bus.js)
			a, b := inbox.NewPublisher(bus.js), inbox.NewPublisher(bus.js)
			subjects := []string{subject(1), subject(2), subject(3)}
			var removed uint64
			for i := range 40 {
				subj := subjects[i%len(subjects)]
				id := fmt.Sprintf("e%d", i)
				var ack *jetstream.PubAck
				var err error
				switch {
				case i%7 == 3:
					ack, err = bus.js.PublishMsg(ctx, event(subj, id)) // unchained
				case i%2 == 0:
					ack, err = a.Publish(ctx, event(subj, id))
				default:
					ack, err = b.Publish(ctx, event(subj, id))
				}
				if err != nil {
					t.Fatalf("publish %s: %v", id, err)
				}
				if i%5 == 4 { // the same event again, through the other publisher
					dup, err := a.Publish(ctx, event(subj, id))
					if err != nil || !dup.Duplicate || dup.Sequence != ack.Sequence {
						t.Fatalf("repeat of %s: %+v, %v; want a duplicate of %d", id, dup, err, ack.Sequence)
					}
				}
				if i == 20 {
					removed = ack.Sequence
				}
			}
			s, err := bus.js.Stream(ctx, events.StreamSessionIn)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.DeleteMsg(ctx, removed); err != nil {
				t.Fatal(err)
			}
			checkReads(t, ctx, bus.js, subjects, removed)
		})
	}
}

// TestConcurrentWritersOfOneSession: writers in several processes publish to one session at
// once. Every event is stored exactly once and the chain names each predecessor.
func TestConcurrentWritersOfOneSession(t *testing.T) {
	for _, bus := range buses(t) {
		t.Run(bus.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			subj := subject(9)
			const writers, each = 4, 15
			var wg sync.WaitGroup
			errs := make(chan error, writers*each)
			for w := range writers {
				p := inbox.NewPublisher(bus.js)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range each {
						if _, err := p.Publish(ctx, event(subj, fmt.Sprintf("w%d-%d", w, i))); err != nil {
							errs <- err
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			s, err := bus.js.Stream(ctx, events.StreamSessionIn)
			if err != nil {
				t.Fatal(err)
			}
			info, err := s.Info(ctx, jetstream.WithSubjectFilter(subj))
			if err != nil {
				t.Fatal(err)
			}
			if n := info.State.Subjects[subj]; n != writers*each {
				t.Fatalf("%d events stored, want %d", n, writers*each)
			}
			checkReads(t, ctx, bus.js, []string{subj})
		})
	}
}

// TestForgedPredecessor: a client with publish rights on the inbox tries to make readers skip
// an event. A wrong predecessor is refused by the server; one that names another subject's
// sequence is stored but not believed.
func TestForgedPredecessor(t *testing.T) {
	ns := natstest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	subj := subject(1)
	p := inbox.NewPublisher(ns.JS)
	first, err := p.Publish(ctx, event(subj, "real-1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish(ctx, event(subj, "real-2")); err != nil {
		t.Fatal(err)
	}
	forged := event(subj, "forged")
	natsutil.ExpectLastSubjectSeq(forged, first.Sequence) // "nothing after real-1"
	if _, err := ns.JS.PublishMsg(ctx, forged); err == nil {
		t.Fatal("the server stored an event with a wrong predecessor")
	}
	other, err := ns.JS.PublishMsg(ctx, event(subject(2), "other"))
	if err != nil {
		t.Fatal(err)
	}
	sideways := event(subj, "sideways")
	natsutil.ExpectLastSubjectSeq(sideways, other.Sequence)
	sideways.Header.Set("Nats-Expected-Last-Subject-Sequence-Subject", subject(2))
	if _, err := ns.JS.PublishMsg(ctx, sideways); err != nil {
		t.Fatal(err)
	}
	checkReads(t, ctx, ns.JS, []string{subj, subject(2)})
}

func TestPrev(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    nats.Header
		seq  uint64
		ok   bool
	}{
		{"none", nats.Header{}, 0, false},
		{"first", nats.Header{jetstream.ExpectedLastSubjSeqHeader: {"0"}}, 0, true},
		{"chained", nats.Header{jetstream.ExpectedLastSubjSeqHeader: {"42"}}, 42, true},
		{"garbage", nats.Header{jetstream.ExpectedLastSubjSeqHeader: {"4x"}}, 0, false},
		{"negative", nats.Header{jetstream.ExpectedLastSubjSeqHeader: {"-1"}}, 0, false},
		{"twice", nats.Header{jetstream.ExpectedLastSubjSeqHeader: {"1", "2"}}, 0, false},
		{"other subject", nats.Header{jetstream.ExpectedLastSubjSeqHeader: {"7"}, "Nats-Expected-Last-Subject-Sequence-Subject": {"agent.in.x"}}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seq, ok := inbox.Prev(tc.h)
			if seq != tc.seq || ok != tc.ok {
				t.Fatalf("Prev = %d, %v; want %d, %v", seq, ok, tc.seq, tc.ok)
			}
		})
	}
}

// TestRefusalNamesTheLast: a publish with a stale expectation is refused with the subject's
// real last sequence, which the Publisher retries on without a read, on one server and on a
// cluster's leader.
func TestRefusalNamesTheLast(t *testing.T) {
	for _, bus := range buses(t) {
		t.Run(bus.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			subj := subject(5)
			var last uint64
			for i := range 3 {
				ack, err := bus.js.PublishMsg(ctx, event(subj, fmt.Sprintf("x%d", i)))
				if err != nil {
					t.Fatal(err)
				}
				last = ack.Sequence
			}
			stale := event(subj, "stale")
			natsutil.ExpectLastSubjectSeq(stale, last-1)
			_, err := bus.js.PublishMsg(ctx, stale)
			if seq, ok := inbox.LastFromRefusal(err); !ok || seq != last {
				t.Fatalf("refusal %v names %d (%v), want %d", err, seq, ok, last)
			}
		})
	}
}

// allowDeletes recreates SESSION_IN, empty, as its spec says but allowing message deletes.
func allowDeletes(t *testing.T, ctx context.Context, js jetstream.JetStream) {
	t.Helper()
	s, err := js.Stream(ctx, events.StreamSessionIn)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.DenyDelete = false
	if err := js.DeleteStream(ctx, events.StreamSessionIn); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
}
