package toolworker

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
)

// lostAckJS is the bus as a worker connected to a NATS node that dies sees it: the first
// create of each started marker is stored, but its ack never comes back (the caller's request
// times out).
type lostAckJS struct {
	jetstream.JetStream
}

func (j lostAckJS) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	kv, err := j.JetStream.KeyValue(ctx, bucket)
	if err != nil || bucket != events.BucketToolMarkers {
		return kv, err
	}
	return &lostAckKV{KeyValue: kv, seen: map[string]bool{}}, nil
}

type lostAckKV struct {
	jetstream.KeyValue
	mu   sync.Mutex
	seen map[string]bool
}

func (kv *lostAckKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	rev, err := kv.KeyValue.Create(ctx, key, value, opts...)
	kv.mu.Lock()
	first := !kv.seen[key]
	kv.seen[key] = true
	kv.mu.Unlock()
	if err == nil && first {
		return 0, context.DeadlineExceeded // stored; the ack was lost
	}
	return rev, err
}

// A non-idempotent call whose started marker was stored but not acknowledged (issue 37: a
// NATS node killed) runs once, and is not answered "interrupted" by its own attempt that never
// started the tool.
func TestMarkerStoredWithoutAckStillRuns(t *testing.T) {
	srv := newServer(t)
	var c counter
	o := fastOpts(srv, mustRegistry(t, echoTool(&c)), "w1")
	o.JS = lostAckJS{srv.JS}
	startWorker(t, o)
	call := newCall("echo", callID("lostack"), map[string]any{"text": "hi"})
	publishCall(t, srv.JS, call, "")
	r := waitResult(t, srv.JS, testSK, call.CallID)
	if r.Data.IsError || !strings.Contains(text(r), "echo: hi") {
		t.Fatalf("result = %q (error %v), want the tool's answer", text(r), r.Data.IsError)
	}
	if n := c.get(call.CallID); n != 1 {
		t.Fatalf("executed %d times, want 1", n)
	}
}
