package natsutil_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

// TestGetMsg checks that the direct-then-leader read and the leader read answer every query
// shape the same way, headers included, and say jetstream.ErrMsgNotFound for what is not there.
func TestGetMsg(t *testing.T) {
	srv := natstest.New(t, natstest.WithoutProvision())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := srv.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "GETS", Subjects: []string{"g.>"}, AllowDirect: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, subj := range []string{"g.a", "g.b", "g.a", "g.b"} {
		m := nats.NewMsg(subj)
		m.Data = []byte{byte('0' + i + 1)}
		m.Header.Set("X-N", string(m.Data))
		if _, err := srv.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name    string
		q       natsutil.MsgQuery
		wantSeq uint64 // 0: not found
	}{
		{"by sequence", natsutil.MsgQuery{Seq: 2}, 2},
		{"next on subject from a sequence of another subject", natsutil.MsgQuery{Seq: 2, NextFor: "g.a"}, 3},
		{"next on subject at its own sequence", natsutil.MsgQuery{Seq: 3, NextFor: "g.a"}, 3},
		{"last on subject", natsutil.MsgQuery{LastFor: "g.b"}, 4},
		{"past the end", natsutil.MsgQuery{Seq: 4, NextFor: "g.a"}, 0},
		{"no such sequence", natsutil.MsgQuery{Seq: 99}, 0},
		{"no such subject", natsutil.MsgQuery{LastFor: "g.c"}, 0},
	}
	reads := map[string]func(natsutil.MsgQuery) (*jetstream.RawStreamMsg, error){
		"GetMsg": func(q natsutil.MsgQuery) (*jetstream.RawStreamMsg, error) { return natsutil.GetMsg(ctx, srv.JS, s, q) },
		"LeaderGetMsg": func(q natsutil.MsgQuery) (*jetstream.RawStreamMsg, error) {
			return natsutil.LeaderGetMsg(ctx, srv.JS, "GETS", q)
		},
		"ConsistentGetMsg": func(q natsutil.MsgQuery) (*jetstream.RawStreamMsg, error) {
			return natsutil.ConsistentGetMsg(ctx, srv.JS, s, q)
		},
	}
	for rname, read := range reads {
		for _, c := range cases {
			t.Run(rname+"/"+c.name, func(t *testing.T) {
				m, err := read(c.q)
				if c.wantSeq == 0 {
					if !errors.Is(err, jetstream.ErrMsgNotFound) {
						t.Fatalf("got %v, %v; want ErrMsgNotFound", m, err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if m.Sequence != c.wantSeq || string(m.Data) != string(rune('0'+c.wantSeq)) || m.Header.Get("X-N") != string(m.Data) {
					t.Fatalf("got seq %d data %q header %q, want seq %d", m.Sequence, m.Data, m.Header.Get("X-N"), c.wantSeq)
				}
				if m.Time.IsZero() || m.Subject == "" {
					t.Fatalf("no time or subject: %+v", m)
				}
			})
		}
	}
	if _, err := natsutil.LeaderGetMsg(ctx, srv.JS, "NO_SUCH_STREAM", natsutil.MsgQuery{Seq: 1}); err == nil || errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("missing stream: %v, want an error other than not found", err)
	}
}

// TestConsistentGetMsgOneReplica checks that on a stream with one replica ConsistentGetMsg and
// GetMsg answer with direct gets only, "not found" included: no JetStream API request (the
// server's api.total stays put), since the one server is the leader.
func TestConsistentGetMsgOneReplica(t *testing.T) {
	srv := natstest.New(t, natstest.WithoutProvision())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := srv.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "ONE", Subjects: []string{"o.>"}, AllowDirect: true, Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.JS.Publish(ctx, "o.a", []byte("x")); err != nil {
		t.Fatal(err)
	}
	apiTotal := func() uint64 {
		jsz, err := srv.Embedded.Server().Jsz(nil)
		if err != nil {
			t.Fatal(err)
		}
		return jsz.API.Total
	}
	before := apiTotal()
	cases := []struct {
		name  string
		read  func() (*jetstream.RawStreamMsg, error)
		found bool
	}{
		{"consistent last", func() (*jetstream.RawStreamMsg, error) {
			return natsutil.ConsistentGetMsg(ctx, srv.JS, s, natsutil.MsgQuery{LastFor: "o.a"})
		}, true},
		{"consistent last, none", func() (*jetstream.RawStreamMsg, error) {
			return natsutil.ConsistentGetMsg(ctx, srv.JS, s, natsutil.MsgQuery{LastFor: "o.b"})
		}, false},
		{"consistent next, none", func() (*jetstream.RawStreamMsg, error) {
			return natsutil.ConsistentGetMsg(ctx, srv.JS, s, natsutil.MsgQuery{Seq: 2, NextFor: "o.a"})
		}, false},
		{"GetMsg sequence, none", func() (*jetstream.RawStreamMsg, error) {
			return natsutil.GetMsg(ctx, srv.JS, s, natsutil.MsgQuery{Seq: 7})
		}, false},
	}
	for _, c := range cases {
		m, err := c.read()
		switch {
		case c.found && (err != nil || m.Sequence != 1):
			t.Errorf("%s: got %v, %v; want seq 1", c.name, m, err)
		case !c.found && !errors.Is(err, jetstream.ErrMsgNotFound):
			t.Errorf("%s: got %v, %v; want ErrMsgNotFound", c.name, m, err)
		}
	}
	if after := apiTotal(); after != before {
		t.Fatalf("JetStream API requests went from %d to %d; want direct gets only", before, after)
	}
}

// TestLeaderGetMsgAsksAgainWhenUnanswered: a stream without a leader (its raft group electing
// one after a node died) leaves STREAM.MSG.GET unanswered. LeaderGetMsg asks again within its
// ctx, so the read is answered soon after a leader is back instead of at the caller's deadline.
// The "leader" here answers on a JetStream context with its own API prefix: it ignores the
// first two requests, as a leaderless stream does, and serves the third.
func TestLeaderGetMsgAsksAgainWhenUnanswered(t *testing.T) {
	srv := natstest.New(t, natstest.WithoutProvision())
	nc, _ := srv.Connect(t)
	js, err := jetstream.NewWithAPIPrefix(nc, "fakeapi")
	if err != nil {
		t.Fatal(err)
	}
	var requests atomic.Int32
	sub, err := srv.NC.Subscribe("fakeapi.STREAM.MSG.GET.S", func(m *nats.Msg) {
		if requests.Add(1) < 3 {
			return
		}
		_ = m.Respond([]byte(`{"type":"io.nats.jetstream.api.v1.stream_msg_get_response","message":{"subject":"s.a","seq":7,"data":"aGk=","time":"2026-12-03T10:00:00Z"}}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := srv.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	// Three attempts fit in the deadline with a wide margin for a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := natsutil.LeaderGetMsg(ctx, js, "S", natsutil.MsgQuery{LastFor: "s.a"})
	if err != nil {
		t.Fatalf("get: %v (after %d requests)", err, requests.Load())
	}
	if m.Sequence != 7 || string(m.Data) != "hi" || requests.Load() != 3 {
		t.Fatalf("got seq %d data %q after %d requests", m.Sequence, m.Data, requests.Load())
	}

	// Unanswered for the whole ctx: the caller's deadline ends it.
	requests.Store(-1 << 30)
	short, cancel2 := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel2()
	if _, err := natsutil.LeaderGetMsg(short, js, "S", natsutil.MsgQuery{LastFor: "s.a"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unanswered get: %v, want the deadline", err)
	}
}
