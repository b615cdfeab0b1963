package matrix_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
	"github.com/agentbus/agentbus/pkg/im/matrix"
	"github.com/agentbus/agentbus/pkg/im/matrix/matrixtest"
	"github.com/agentbus/agentbus/pkg/ingest"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

// TestMentionCommands (issue 37): a command typed after a mention of the bot in a room is the
// command, whether the mention is a pill in formatted_body or the bot's name typed as text
// ("Bot: /whoami", as clients without pills write it): the room's messages go from the fake
// homeserver through the adapter into the real ingest, whose decision is the command.
func TestMentionCommands(t *testing.T) {
	fake := matrixtest.New(t, fakeBot, fakeToken)
	const room = "!cmds:fake.test"
	fake.Join(room, fakeBot, "Bot")
	fake.Join(room, fakeAnn, "Ann")
	fake.Join(room, fakeCarol, "Carol")
	srv := natstest.New(t, natstest.WithMemoryStorage())
	_, js := srv.Connect(t)
	ctx, cancel := context.WithCancel(context.Background())
	ing := ingest.New(js, ingest.Options{})
	var mu sync.Mutex
	decisions := map[string]ingest.Decision{}
	sink := im.SinkFunc(func(ctx context.Context, m *events.IMMessage) error {
		res, err := ing.Ingest(ctx, m)
		if err == nil {
			mu.Lock()
			decisions[m.MessageID] = res.Decision
			mu.Unlock()
		}
		return err
	})
	in, err := matrix.NewInbound(matrix.InboundOptions{Bot: config.MatrixBot{ID: "m1", Homeserver: fake.URL(), UserID: fakeBot, AccessToken: fakeToken},
		Sink: sink, JS: js, Owner: "t", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = in.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	kv, _ := js.KeyValue(ctx, events.BucketLeases)
	testwait.Eventually(t, 0, func() error {
		_, err := kv.Get(ctx, matrix.SyncKey("m1"))
		return testwait.Want(err == nil, "no sync token stored for m1: %v", err)
	})

	tests := []struct {
		name    string
		content map[string]any
		command string // "" = not a command
		text    string // what the model would read
	}{
		{"pill then command", map[string]any{"msgtype": "m.text", "body": "Bot: /whoami", "format": "org.matrix.custom.html",
			"formatted_body": `<a href="https://matrix.to/#/` + fakeBot + `">Bot</a>: /whoami`}, "whoami", ""},
		{"name typed as text then command", map[string]any{"msgtype": "m.text", "body": "Bot: /whoami"}, "whoami", ""},
		{"user id typed then command", map[string]any{"msgtype": "m.text", "body": fakeBot + " /help"}, "help", ""},
		{"name typed then chat", map[string]any{"msgtype": "m.text", "body": "bot, what time is it?"}, "", "what time is it?"},
		{"a word that starts like the name", map[string]any{"msgtype": "m.text", "body": "Botany /whoami"}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := fake.Message(room, fakeAnn, tt.content)
			var d ingest.Decision
			testwait.Eventually(t, 0, func() error {
				mu.Lock()
				defer mu.Unlock()
				var ok bool
				d, ok = decisions[id]
				return testwait.Want(ok, "no ingest decision on message %s", id)
			})
			switch {
			case tt.command != "":
				if !d.Has(ingest.RouteCommand) || d.Command.Name != tt.command {
					t.Fatalf("decision %+v, want the command %s", d, tt.command)
				}
			case d.Has(ingest.RouteCommand):
				t.Fatalf("decision %+v, want no command", d)
			}
			if tt.text != "" && (!d.Has(ingest.RouteAI) || d.Text != tt.text) {
				t.Fatalf("decision %+v, want a turn on %q", d, tt.text)
			}
		})
	}
}
