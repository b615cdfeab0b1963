package mcpclient

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
	"github.com/agentbus/agentbus/pkg/tools"
	"github.com/agentbus/agentbus/pkg/toolworker"
)

// A server that keeps failing is tried again after RetryInterval, then after twice that, and so
// on up to MaxBackoff; once it answers, its backoff starts over.
func TestReconnectBackoff(t *testing.T) {
	var attempts atomic.Int32
	var fail atomic.Bool
	fail.Store(true)
	now := time.Unix(1000, 0)
	m, _ := New(nil, Options{Log: quiet(), RetryInterval: time.Minute, MaxBackoff: 4 * time.Minute, Now: func() time.Time { return now }})
	m.AddServer("flaky", func() (mcp.Transport, error) {
		attempts.Add(1)
		if fail.Load() {
			return nil, errors.New("connection refused")
		}
		ct, st := mcp.NewInMemoryTransports()
		if _, err := newTestServer().Connect(context.Background(), st, nil); err != nil {
			return nil, err
		}
		return ct, nil
	}, 0)
	defer m.Close()
	ctx := context.Background()
	steps := []struct {
		advance  time.Duration
		attempts int32
	}{
		{0, 1},                 // first try; next after 1m
		{61 * time.Second, 2},  // next after 2m
		{61 * time.Second, 2},  // too early
		{61 * time.Second, 3},  // 2m02s after the second: next after 4m
		{3 * time.Minute, 3},   // too early
		{61 * time.Second, 4},  // 4m01s: capped at MaxBackoff from now on
		{241 * time.Second, 5}, // still 4m, not 8m
	}
	for i, st := range steps {
		now = now.Add(st.advance)
		m.Tools(ctx)
		if got := attempts.Load(); got != st.attempts {
			t.Fatalf("step %d (+%s): %d attempts, want %d", i, st.advance, got, st.attempts)
		}
	}
	fail.Store(false)
	now = now.Add(241 * time.Second)
	if n := len(m.Tools(ctx)); n != 3 {
		t.Fatalf("after recovery %d tools", n)
	}
	m.mu.Lock()
	s := m.servers["flaky"]
	m.mu.Unlock()
	s.mu.Lock()
	f := s.failures
	s.mu.Unlock()
	if f != 0 {
		t.Fatalf("failures after a success = %d", f)
	}
}

// An MCP server that is down when the tool worker starts gets its tools served once it is up,
// without a restart: Sync puts them into the registry, and the tool worker announces them in
// KV tools at its next heartbeat. Tools the servers stop offering are withdrawn.
func TestSyncServesToolsOfALateServer(t *testing.T) {
	ns := natstest.New(t, natstest.WithMemoryStorage())
	var up atomic.Bool
	m, _ := New(nil, Options{Log: quiet(), RetryInterval: 10 * time.Millisecond, RefreshInterval: 50 * time.Millisecond})
	m.AddServer("late", func() (mcp.Transport, error) {
		if !up.Load() {
			return nil, errors.New("connection refused")
		}
		ct, st := mcp.NewInMemoryTransports()
		if _, err := newTestServer().Connect(context.Background(), st, nil); err != nil {
			return nil, err
		}
		return ct, nil
	}, 0)
	defer m.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A tool of a server that no longer offers it (from an earlier listing) is removed.
	old := tools.MustRaw("mcp_late_retired", "gone", nil, func(context.Context, tools.Call) (tools.Result, error) { return tools.Result{}, nil })
	old.Source = "mcp:late"
	builtinTool := tools.MustRaw("echo", "echo", nil, func(context.Context, tools.Call) (tools.Result, error) { return tools.TextResult("e"), nil })
	reg, err := tools.NewRegistry(append(m.Tools(ctx), old, builtinTool)...)
	if err != nil {
		t.Fatal(err)
	}
	h, err := toolworker.Run(ctx, toolworker.Options{NC: ns.NC, JS: ns.JS, Registry: reg, ID: "w1", Log: quiet(),
		HeartbeatEvery: 100 * time.Millisecond, AckWait: time.Second, PollWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Stop(context.Background()) }()
	go m.Sync(ctx, reg)
	kv, err := ns.JS.KeyValue(ctx, events.BucketTools)
	if err != nil {
		t.Fatal(err)
	}
	has := func(name string) bool {
		_, err := kv.Get(ctx, events.EncodeToken(name))
		return err == nil
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		testwait.Eventually(t, 0, func() error { return testwait.Want(cond(), "%s: not yet; registry %v", what, names(reg.List())) })
	}
	waitFor("the retired tool withdrawn", func() bool { return !has("mcp_late_retired") })
	if has("mcp_late_add") || !has("echo") {
		t.Fatalf("before the server is up: add %v, echo %v", has("mcp_late_add"), has("echo"))
	}
	up.Store(true)
	waitFor("the late server's tools announced", func() bool { return has("mcp_late_add") && has("mcp_late_pixel") })
	add, ok := reg.Get("mcp_late_add")
	if !ok {
		t.Fatal("add not in the registry")
	}
	if r := add.Run(ctx, tools.Call{Args: map[string]any{"a": 2, "b": 2}}); r.Text() != "4" {
		t.Fatalf("add: %+v", r)
	}
}

func names(ts []tools.Tool) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Name
	}
	return out
}
