package toolworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/loop"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
	"github.com/agentbus/agentbus/pkg/store"
	"github.com/agentbus/agentbus/pkg/tools"
)

var testSK = events.SessionKey{Platform: "webhook", Bot: "b1", Scope: events.ScopeGroup, Scene: "g1"}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newServer(t testing.TB) *natstest.Server {
	t.Helper()
	return natstest.New(t, natstest.WithMemoryStorage())
}

// fastOpts are worker options scaled down for tests.
func fastOpts(srv *natstest.Server, reg *tools.Registry, id string) Options {
	return Options{NC: srv.NC, JS: srv.JS, Registry: reg, ID: id, Log: quietLog(), Concurrency: 4,
		HeartbeatEvery: 200 * time.Millisecond, AckWait: time.Second, PollWait: 300 * time.Millisecond,
		DefaultTimeout: 5 * time.Second, InterruptGrace: 50 * time.Millisecond}
}

func startWorker(t testing.TB, o Options) *Handle {
	t.Helper()
	h, err := Run(context.Background(), o)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Cleanup(func() { mustStop(t, h) })
	return h
}

func mustRegistry(t testing.TB, ts ...tools.Tool) *tools.Registry {
	t.Helper()
	r, err := tools.NewRegistry(ts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// counter counts executions per call id.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) add(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[id]++
}

func (c *counter) get(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[id]
}

func (c *counter) total() (calls, runs int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, v := range c.n {
		calls++
		runs += v
	}
	return
}

func echoTool(c *counter, opts ...tools.Option) tools.Tool {
	return tools.MustRaw("echo", "echoes text",
		json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
		func(ctx context.Context, call tools.Call) (tools.Result, error) {
			if c != nil {
				c.add(call.ID)
			}
			s, _ := call.Args["text"].(string)
			return tools.TextResult("echo: " + s), nil
		}, opts...)
}

func newCall(tool, callID string, args map[string]any) events.ToolCall {
	if args == nil {
		args = map[string]any{}
	}
	return events.ToolCall{CallID: callID, Tool: tool, Args: args, SessionKey: testSK, Turn: "t1",
		Caller: events.Caller{Platform: testSK.Platform, Bot: testSK.Bot, Scope: testSK.Scope, SenderID: "u1", Roles: []string{"user"}}}
}

var traceID = "0af7651916cd43dd8448eb211c80319c"

// publishCall publishes tc like the turn worker does; msgID overrides the Nats-Msg-Id when set.
func publishCall(t testing.TB, js jetstream.JetStream, tc events.ToolCall, msgID string) {
	t.Helper()
	ev := events.New(tc, events.WithSession(events.NewSessionID(tc.SessionKey, 1).String()), events.WithTurn(tc.Turn), events.WithTrace(traceID))
	m, err := events.NewMsg(events.ToolCallSubject(tc.Tool), ev)
	if err != nil {
		t.Fatal(err)
	}
	if msgID != "" {
		m.Header.Set(nats.MsgIdHdr, msgID)
	}
	if _, err := js.PublishMsg(context.Background(), m); err != nil {
		t.Fatalf("publish call: %v", err)
	}
}

func publishRaw(t testing.TB, js jetstream.JetStream, subj string, data []byte) {
	t.Helper()
	if _, err := js.Publish(context.Background(), subj, data); err != nil {
		t.Fatal(err)
	}
}

// waitResult polls TOOL_RESULTS for the call's result (on its session's subject).
func waitResult(t testing.TB, js jetstream.JetStream, sk events.SessionKey, callID string) *events.Event[events.ToolResult] {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, events.StreamToolResults)
	if err != nil {
		t.Fatal(err)
	}
	var ev events.Event[events.ToolResult]
	testwait.Eventually(t, 0, func() error {
		raw, err := store.FindToolResult(ctx, js, st, sk, callID, time.Time{})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("no result for call %s", callID)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := events.UnmarshalMsg(&nats.Msg{Data: raw.Data, Header: raw.Header}, &ev); err != nil {
			t.Fatalf("decode result: %v", err)
		}
		if ev.Data.CallID != callID {
			t.Fatalf("result of %s found for call %s", ev.Data.CallID, callID)
		}
		return nil
	})
	return &ev
}

// countResults is how many messages TOOL_RESULTS holds for the call: those on its session's
// subject whose HeaderCallID names it.
func countResults(t testing.TB, js jetstream.JetStream, sk events.SessionKey, callID string) int {
	t.Helper()
	n := 0
	err := store.Scan(context.Background(), js, events.StreamToolResults, events.ToolResultSubject(sk), 1, time.Time{}, func(m *jetstream.RawStreamMsg) bool {
		if m.Header.Get(events.HeaderCallID) == callID {
			n++
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitDrained waits until the tool's consumer has nothing pending or unacked.
func waitDrained(t testing.TB, js jetstream.JetStream, tool string) {
	t.Helper()
	testwait.Eventually(t, 0, func() error {
		c, err := js.Consumer(context.Background(), events.StreamToolCalls, ConsumerName(tool))
		if err != nil {
			return fmt.Errorf("consumer of %s: %w", tool, err)
		}
		info, err := c.Info(context.Background())
		if err != nil {
			return fmt.Errorf("consumer of %s: %w", tool, err)
		}
		return testwait.Want(info.NumPending == 0 && info.NumAckPending == 0,
			"consumer of %s not drained: %d pending, %d unacked", tool, info.NumPending, info.NumAckPending)
	})
}

func text(r *events.Event[events.ToolResult]) string {
	s := ""
	for _, c := range r.Data.Content {
		s += c.Text
	}
	return s
}

var seq atomic.Int64

func callID(prefix string) string {
	return prefix + "-" + time.Now().Format("150405") + "-" + itoa(seq.Add(1))
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func toLoop(r *events.Event[events.ToolResult]) loop.ToolResult {
	return loop.ToolResult{Content: r.Data.Content, Details: r.Data.Details, IsError: r.Data.IsError}
}

// mustStop stops a worker within a margin that survives a loaded machine.
func mustStop(t testing.TB, h *Handle) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := h.Stop(ctx); err != nil {
		t.Errorf("stop worker: %v", err)
	}
}
