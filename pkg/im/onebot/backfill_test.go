package onebot_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
	"github.com/agentbus/agentbus/pkg/im/onebot"
	"github.com/agentbus/agentbus/pkg/im/onebot/onebottest"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

// TestBackfillHistory: a holder handles a message and stops; messages sent while nobody is
// connected are fetched by the next holder through the history extension, or, when the
// implementation lacks it (1404), are missed while live messages still flow.
func TestBackfillHistory(t *testing.T) {
	tests := []struct {
		name    string
		history bool
		want    []string
	}{
		{"history supported", true, []string{"4001", "4002", "4003", "4004"}},
		{"history unsupported", false, []string{"4001", "4004"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := natstest.New(t, natstest.WithMemoryStorage())
			nc, js := srv.Connect(t)
			const self = 10001
			fake := onebottest.New(t, "tok", self)
			fake.SetHistorySupported(tt.history)
			var mu sync.Mutex
			var got []string
			// IM_IN drops a message id it has (Nats-Msg-Id); a message that came both through the
			// backfill and live is offered twice and kept once.
			sink := im.SinkFunc(func(_ context.Context, m *events.IMMessage) error {
				mu.Lock()
				defer mu.Unlock()
				if !slices.Contains(got, m.MessageID) {
					got = append(got, m.MessageID)
				}
				return nil
			})
			seen := func() []string {
				mu.Lock()
				defer mu.Unlock()
				return slices.Clone(got)
			}
			waitFor := func(id string) {
				t.Helper()
				testwait.Eventually(t, 0, func() error {
					return testwait.Want(slices.Contains(seen(), id), "message %s not ingested; got %v", id, seen())
				})
			}
			run := func(owner string) (stop func()) {
				in, err := onebot.NewInbound(onebot.InboundOptions{Bot: config.OneBotBot{ID: "qq1", SelfID: "10001", Mode: onebot.ModeWS,
					APIBase: fake.WSURL(), AccessToken: "tok"}, Sink: sink, NC: nc, JS: js, Owner: owner, TTL: 2 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { defer close(done); _ = in.Run(ctx) }()
				return func() { cancel(); <-done }
			}
			stop := run("a")
			conn := fake.WaitConn(30 * time.Second)
			fake.Push(fake.PrivateMessage(4001, 61, []map[string]any{onebottest.Text("before")}))
			waitFor("4001")
			stop()
			testwait.Eventually(t, 0, func() error {
				return testwait.Want(len(fake.Conns()) == 0, "%d connections left after stop", len(fake.Conns()))
			})
			fake.Push(fake.PrivateMessage(4002, 61, []map[string]any{onebottest.Text("gap one")}))
			fake.Push(fake.PrivateMessage(4003, 61, []map[string]any{onebottest.Text("gap two")}))
			stop = run("b")
			defer stop()
			fake.WaitConn(30*time.Second, conn)
			fake.Push(fake.PrivateMessage(4004, 61, []map[string]any{onebottest.Text("after")}))
			waitFor("4004")
			calls := fake.WaitCalls(1, 30*time.Second, func(c onebottest.Call) bool { return c.Action == "get_friend_msg_history" })
			if g := seen(); !slices.Equal(g, tt.want) {
				t.Fatalf("ingested %v, want %v (history calls %d)", g, tt.want, len(calls))
			}
		})
	}
}
