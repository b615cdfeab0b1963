package toolworker

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/events"
)

// TestMarkerPurgedWithTheResult: the started marker of a non-idempotent call is purged once
// its result is stored, leaving only a purge marker with a message TTL, so KV tool_markers
// holds keys for calls in flight, not one per call made (issue 41). A duplicate request of the
// call arriving after the purge (another message, marked fresh, so it skips the first look for
// a result) creates the marker anew, finds the result in the look that follows, and does not
// run the tool again.
func TestMarkerPurgedWithTheResult(t *testing.T) {
	srv := newServer(t)
	ctx := context.Background()
	var c counter
	startWorker(t, fastOpts(srv, mustRegistry(t, echoTool(&c)), "w1")) // echo is not idempotent here
	kv, err := srv.JS.KeyValue(ctx, events.BucketToolMarkers)
	if err != nil {
		t.Fatal(err)
	}
	call := newCall("echo", callID("purge"), map[string]any{"text": "once"})
	call.Fresh = true
	publishCall(t, srv.JS, call, "first")
	if r := waitResult(t, srv.JS, testSK, call.CallID); r.Data.IsError {
		t.Fatalf("result = %q", text(r))
	}
	testwait.Eventually(t, 0, func() error {
		_, err := kv.Get(ctx, MarkerKey(call.CallID))
		return testwait.Want(errors.Is(err, jetstream.ErrKeyNotFound), "not yet: the marker purged")
	})
	st, err := srv.JS.Stream(ctx, "KV_"+events.BucketToolMarkers)
	if err != nil {
		t.Fatal(err)
	}
	last, err := st.GetLastMsgForSubject(ctx, "$KV."+events.BucketToolMarkers+"."+MarkerKey(call.CallID))
	if err != nil {
		t.Fatal(err)
	}
	if op, ttl := last.Header.Get("KV-Operation"), last.Header.Get(jetstream.MsgTTLHeader); op != "PURGE" || ttl == "" {
		t.Fatalf("last message on the marker's key: operation %q, TTL %q; want a purge with a TTL", op, ttl)
	}
	if n := st.CachedInfo().State.Msgs; n != 1 {
		t.Fatalf("KV %s holds %d messages, want the purge marker only", events.BucketToolMarkers, n)
	}

	publishCall(t, srv.JS, call, "second") // a new message, outside the dedupe of the first
	calls, err := srv.JS.Stream(ctx, events.StreamToolCalls)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 0, func() error {
		info, err := calls.Info(ctx)
		return testwait.Want(err == nil && info.State.Msgs == 0, "not yet: the duplicate request handled")
	})
	if n := c.get(call.CallID); n != 1 {
		t.Fatalf("executed %d times, want 1", n)
	}
	if n := countResults(t, srv.JS, testSK, call.CallID); n != 1 {
		t.Fatalf("%d results stored, want 1", n)
	}
	testwait.Eventually(t, 0, func() error {
		_, err := kv.Get(ctx, MarkerKey(call.CallID))
		return testwait.Want(errors.Is(err, jetstream.ErrKeyNotFound), "not yet: the duplicate's marker purged")
	})
}

// TestInterruptedCallLeavesNoMarker: a call whose earlier attempt's process is gone is
// answered "interrupted", and that answer purges the earlier attempt's marker too.
func TestInterruptedCallLeavesNoMarker(t *testing.T) {
	srv := newServer(t)
	ctx := context.Background()
	var c counter
	started := make(chan string, 1)
	o := fastOpts(srv, mustRegistry(t, blockingTool("charge", &c, started)), "w2")
	o.DefaultTimeout = time.Minute
	startWorker(t, o)
	kv, err := srv.JS.KeyValue(ctx, events.BucketToolMarkers)
	if err != nil {
		t.Fatal(err)
	}
	call := newCall("charge", callID("gone"), nil)
	now := time.Now()
	m, _ := json.Marshal(marker{Worker: "w1", Instance: "gone-instance", Tool: "charge", StartedAt: now.UnixMilli(), Until: now.Add(time.Minute).UnixMilli()})
	if _, err := kv.Create(ctx, MarkerKey(call.CallID), m); err != nil {
		t.Fatal(err)
	}
	publishCall(t, srv.JS, call, "")
	if r := waitResult(t, srv.JS, testSK, call.CallID); !r.Data.IsError {
		t.Fatalf("result = %q, want interrupted", text(r))
	}
	if n := c.get(call.CallID); n != 0 {
		t.Fatalf("executed %d times, want 0", n)
	}
	testwait.Eventually(t, 0, func() error {
		_, err := kv.Get(ctx, MarkerKey(call.CallID))
		return testwait.Want(errors.Is(err, jetstream.ErrKeyNotFound), "not yet: the earlier attempt's marker purged")
	})
}
