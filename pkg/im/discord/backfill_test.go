package discord_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
	"github.com/agentbus/agentbus/pkg/im/discord"
	"github.com/agentbus/agentbus/pkg/im/discord/discordtest"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

// TestBackfillPages: a holder handles one message and stops; 250 messages (one of them the
// bot's own) are sent while no session is open; the next holder ingests the 249 from other
// users through three pages of GET messages, oldest first, before a live message that follows.
func TestBackfillPages(t *testing.T) {
	srv := natstest.New(t, natstest.WithMemoryStorage())
	_, js := srv.Connect(t)
	const token, botID = "tok", "900"
	fake := discordtest.New(t, token, botID, "bot")
	var mu sync.Mutex
	var got []string
	sink := im.SinkFunc(func(_ context.Context, m *events.IMMessage) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, m.MessageID)
		return nil
	})
	seen := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
	waitFor := func(n int) {
		t.Helper()
		testwait.Eventually(t, 0, func() error {
			return testwait.Want(len(seen()) >= n, "%d messages ingested, want %d", len(seen()), n)
		})
	}
	run := func(owner string) (stop func()) {
		in, err := discord.NewInbound(discord.InboundOptions{Bot: config.DiscordBot{ID: "dc1", Token: token, APIBase: fake.URL()},
			Sink: sink, JS: js, Owner: owner, TTL: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = in.Run(ctx) }()
		return func() { cancel(); <-done }
	}
	const first = 1300000000000000100
	id := func(i int) string { return strconv.Itoa(first + i) }

	stop := run("a")
	fake.WaitSessions(1, 30*time.Second)
	fake.Dispatch(fake.Message(id(0), "510", "", "71", "before"))
	waitFor(1)
	stop() // a clean stop flushes the cursor and releases the lease
	fake.WaitSessions(0, 30*time.Second)

	for i := 1; i <= 250; i++ {
		m := fake.Message(id(i), "510", "", "71", fmt.Sprint("gap ", i))
		if i == 120 {
			m["author"] = map[string]any{"id": botID, "username": "bot", "bot": true}
		}
		fake.Dispatch(m)
	}
	stop = run("b")
	defer stop()
	waitFor(250)
	fake.Dispatch(fake.Message(id(251), "510", "", "71", "after"))
	waitFor(251)

	want := []string{id(0)}
	for i := 1; i <= 251; i++ {
		if i != 120 {
			want = append(want, id(i))
		}
	}
	if g := seen(); !slices.Equal(g, want) {
		t.Fatalf("ingested %d messages %v...%v, want %d in order", len(g), g[:min(3, len(g))], g[max(0, len(g)-3):], len(want))
	}
	var pages []string
	for _, c := range fake.Calls() {
		if c.Route == "getMessages" {
			pages = append(pages, fmt.Sprint(c.Body["after"]))
		}
	}
	if len(pages) != 3 || pages[0] != id(0) || pages[1] != id(100) || pages[2] != id(200) {
		t.Fatalf("pages after %v, want after %s, %s, %s", pages, id(0), id(100), id(200))
	}
}
