package app_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
	"github.com/agentbus/agentbus/pkg/im/discord/discordtest"
)

const (
	dcToken = "TEST.discord.token"
	dcBotID = "1100000000000000001"
	dcName  = "agentbus-test"
)

// dcScript: echo; "stream" streams slowly (previews).
func dcScript(r *fakeopenai.Request) fakeopenai.Reply {
	last := r.LastUser()
	switch {
	case strings.Contains(last, "stream"):
		return fakeopenai.Reply{Text: "This answer streams in slowly, word by word, so that the preview has time to grow.", Chunks: 8, ChunkDelay: 400 * time.Millisecond}
	}
	return fakeopenai.Echo(r)
}

func dcConfig(dir, fakeURL, previewURL, modelURL string) string {
	return fmt.Sprintf(`
dataDir: %[1]s
nats: {embedded: true, storeDir: %[1]s/nats, listen: "127.0.0.1:0", storage: memory}
im:
  discord:
    bots:
      - {id: dc1, token: "%[2]s", apiBase: "%[3]s", preview: "off"}
      - {id: dcp, token: "%[2]s", apiBase: "%[4]s", preview: partial, previewIntervalMs: 300}
ai:
  providers:
    fake: {api: openai-completions, baseUrl: "%[5]s", apiKey: test}
  agents:
    zhin: {provider: fake, model: m1}
`, dir, dcToken, fakeURL, previewURL, modelURL)
}

// TestDiscordGateway runs the pipeline against a Discord fake (REST + gateway WebSocket) for
// what is Discord's own: the gateway intents, the bot's mention stripped, replies to the bot
// addressing it, a bad message dead-lettered, and a streaming preview with typing, edited as
// the reply grows and finally replaced. DMs, commands, attachments in and out, chunking, 429
// with retry_after, masters and redelivery are TestIMConformance's.
func TestDiscordGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline")
	}
	fake := discordtest.New(t, dcToken, dcBotID, dcName)
	pfake := discordtest.New(t, dcToken, "1100000000000000002", dcName+"-p")
	model := fakeopenai.New(t, dcScript)
	dir := tempDir(t)
	p := startProc(t, dcConfig(dir, fake.URL(), pfake.URL(), model.BaseURL()), app.AllRoles)
	fake.WaitSessions(1, 60*time.Second)
	pfake.WaitSessions(1, 60*time.Second)
	if s := fake.Sessions()[0]; s.Intents&discordtest.IntentMessageContent == 0 || s.Intents&discordtest.IntentGuildMessages == 0 || s.Intents&discordtest.IntentDirectMessages == 0 {
		t.Fatalf("identified with intents %b", s.Intents)
	}
	sent := func(n int, channel string) []discordtest.Call {
		return fake.WaitCalls(n, 90*time.Second, func(c discordtest.Call) bool {
			return c.Status == 200 && c.Route == "createMessage" && c.Channel == channel
		})
	}

	t.Run("typing while a turn runs, previews off", func(t *testing.T) {
		fake.Dispatch(fake.Message("2010", "520", "", "42", "stream it please"))
		reply := sent(1, "520")[0]
		var typing []discordtest.Call
		edits := 0
		for _, c := range fake.Calls() {
			switch {
			case c.Channel != "520":
			case c.Route == "typing":
				typing = append(typing, c)
			case c.Route == "editMessage":
				edits++
			}
		}
		if len(typing) == 0 || !typing[0].Time.Before(reply.Time) || edits != 0 {
			t.Fatalf("%d typing triggers before the reply at %v, %d edits (want none: previews off)", len(typing), reply.Time, edits)
		}
		t.Logf("%d typing triggers while the turn ran", len(typing))
	})

	// A mention answered and a plain message not are TestIMConformance's; Discord's own is the
	// <@id> in the text, which ingest strips, and a reply to the bot, which addresses it.
	t.Run("mention stripped; a reply to the bot threads and addresses it", func(t *testing.T) {
		fake.Dispatch(fake.Mention(fake.Message("2003", "600", "900", "44", "hello bot")))
		bot := sent(1, "600")[0]
		if !strings.Contains(bot.Content(), "hello bot") || strings.Contains(bot.Content(), "<@"+dcBotID+">") || bot.ReplyTo() != "2003" {
			t.Fatalf("channel reply = %+v", bot)
		}
		raw := lastIMIn(t, p, events.SessionKey{Platform: "discord", Bot: "dc1", Scope: "group", Scene: "600"})
		if !raw.Data.MentionsBot || raw.Data.Content.PlainText() != "hello bot" {
			t.Fatalf("mention not recognised or not stripped: %+v", raw.Data)
		}
		m := fake.Message("2004", "600", "900", "43", "and what about this")
		m["type"] = 19
		m["message_reference"] = map[string]any{"message_id": bot.Message, "channel_id": "600", "guild_id": "900"}
		m["referenced_message"] = map[string]any{"id": bot.Message, "channel_id": "600", "content": bot.Content(),
			"author": map[string]any{"id": dcBotID, "username": dcName, "bot": true}}
		fake.Dispatch(m)
		c := fake.WaitCalls(1, 90*time.Second, func(c discordtest.Call) bool { return c.Route == "createMessage" && c.ReplyTo() == "2004" })[0]
		if !strings.Contains(c.Content(), "and what about this") {
			t.Fatalf("reply = %+v", c)
		}
		raw = lastIMIn(t, p, events.SessionKey{Platform: "discord", Bot: "dc1", Scope: "group", Scene: "600"})
		if !raw.Data.MentionsBot || raw.Data.Content[0].Type != events.SegReply || raw.Data.Content[0].ReplyID() != bot.Message {
			t.Fatalf("reply not normalized: %+v", raw.Data)
		}
	})

	t.Run("a message that cannot be normalized is dead-lettered", func(t *testing.T) {
		m := fake.Message("2005", "", "", "43", "no channel")
		fake.Dispatch(m)
		testwait.Eventually(t, waitMargin, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s, err := p.JS.Stream(ctx, events.StreamDeadLetters)
			if err != nil {
				return err
			}
			_, err = s.GetLastMsgForSubject(ctx, events.DeadLetterSubject("ingest", events.DLQInvalid))
			return err
		})
		dl := lastDeadLetter(t, p, events.DeadLetterSubject("ingest", events.DLQInvalid))
		if !strings.Contains(dl.Error, "channel_id") || !strings.Contains(string(dl.JSON), `"2005"`) || dl.Subject != "discord/dc1" {
			t.Fatalf("dead letter = %+v", dl)
		}
	})

	t.Run("preview edited then finalized", func(t *testing.T) {
		pfake.Dispatch(pfake.Message("2009", "900", "", "47", "stream it"))
		final := "This answer streams in slowly, word by word, so that the preview has time to grow."
		pfake.WaitCalls(1, 90*time.Second, func(c discordtest.Call) bool {
			return c.Route == "editMessage" && c.Channel == "900" && c.Content() == final
		})
		var previews, typing, partialEdits int
		for _, c := range pfake.Calls() {
			if c.Channel != "900" {
				continue
			}
			switch {
			case c.Route == "createMessage":
				previews++
			case c.Route == "typing":
				typing++
			case c.Route == "editMessage" && strings.HasSuffix(c.Content(), " …"):
				partialEdits++
			}
		}
		if previews != 1 || typing == 0 {
			t.Fatalf("messages created %d (want 1: the final reply edits the preview), typing %d", previews, typing)
		}
		t.Logf("preview: 1 message, %d partial edits, %d typing triggers", partialEdits, typing)
	})
}

// TestDiscordGatewayTakeover runs two ingest replicas for one bot: only one holds the
// gateway session; when its bus connection dies, the other opens the gateway within seconds
// and answers. Messages sent while no session was open (the gateway is held down meanwhile, so
// the gap is certain) are backfilled through GET /channels/{id}/messages after the last
// message each channel had, in a DM and in a guild channel; a message that the new session
// also receives live is answered once.
func TestDiscordGatewayTakeover(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three processes")
	}
	fake := discordtest.New(t, dcToken, dcBotID, dcName)
	model := fakeopenai.New(t, dcScript)
	core, ingest := startTakeoverCore(t, fmt.Sprintf(`
  discord:
    bots:
      - {id: dc1, token: "%[1]s", apiBase: "%[2]s", preview: "off"}`, dcToken, fake.URL()), model.BaseURL())
	a := ingest("a")
	fake.WaitSessions(1, 60*time.Second)
	ingest("b")
	time.Sleep(3 * time.Second) // a window: b competes for the lease and must not connect
	if n := fake.OpenSessions(); n != 1 {
		t.Fatalf("%d gateway sessions open with two ingest replicas, want 1", n)
	}
	answered := func(text string) {
		t.Helper()
		fake.WaitCalls(1, 90*time.Second, func(c discordtest.Call) bool { return strings.Contains(c.Content(), text) })
	}
	fake.Dispatch(fake.Message("2101", "510", "", "71", "before"))
	fake.Dispatch(fake.Message("2102", "610", "900", "72", "chatter in the channel")) // not addressed: listened to
	answered("echo: before")
	waitIMIn(t, core, events.SessionKey{Platform: "discord", Bot: "dc1", Scope: "group", Scene: "610"}, "2102")
	time.Sleep(2 * time.Second) // the holder flushes its cursors once a second

	// Kill the holder; keep the gateway down until its session is gone, and send meanwhile.
	killed := time.Now()
	fake.SetGatewayDown(true)
	a.NC.Close() // a's lease can no longer be renewed: it closes the gateway, b takes it
	testwait.Eventually(t, waitMargin, func() error {
		return testwait.Want(fake.OpenSessions() == 0, "the dead holder's session stayed open: %+v", fake.Sessions())
	})
	during := []map[string]any{
		fake.Message("2103", "510", "", "71", "during one"),
		fake.Message("2104", "510", "", "71", "during two"),
		fake.Mention(fake.Message("2105", "610", "900", "72", "during in the channel")),
	}
	for _, m := range during {
		if n := fake.Dispatch(m); n != 0 {
			t.Fatalf("dispatched to %d sessions during the gap", n)
		}
	}
	time.Sleep(2 * time.Second) // the gap lasts: the new holder's connection attempts are refused meanwhile
	fake.SetGatewayDown(false)
	fake.WaitSessions(1, 60*time.Second)
	t.Logf("gateway taken over %v after the holder lost the bus", time.Since(killed).Round(time.Millisecond))
	fake.Dispatch(during[1]) // Discord would not, but a message seen both ways must count once
	for _, text := range []string{"echo: during one", "echo: during two", "during in the channel"} {
		answered(text)
	}
	fake.Dispatch(fake.Message("2106", "510", "", "71", "after"))
	answered("echo: after")
	time.Sleep(2 * time.Second) // a window: a doubled answer would show up now
	for _, text := range []string{"echo: before", "echo: during one", "echo: during two", "during in the channel", "echo: after"} {
		n := 0
		for _, c := range fake.Calls() {
			if c.Route == "createMessage" && strings.Contains(c.Content(), text) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%q sent %d times", text, n)
		}
	}
	var fetched []string
	for _, c := range fake.Calls() {
		if c.Route == "getMessages" {
			fetched = append(fetched, c.Channel+" after "+fmt.Sprint(c.Body["after"]))
		}
	}
	if !slices.Contains(fetched, "510 after 2101") || !slices.Contains(fetched, "610 after 2102") {
		t.Fatalf("backfill requests %q, want 510 after 2101 and 610 after 2102", fetched)
	}
	raw := lastIMIn(t, core, events.SessionKey{Platform: "discord", Bot: "dc1", Scope: "group", Scene: "610"})
	if raw.Data.MessageID != "2105" || !raw.Data.MentionsBot || raw.Data.Scene.Type != "group" {
		t.Fatalf("backfilled channel message = %+v", raw.Data)
	}
	t.Logf("backfill requests: %q", fetched)
}

// waitIMIn waits until the last inbound message of sk on the bus (im.LastInbound) is message id.
func waitIMIn(t *testing.T, p *app.Process, sk events.SessionKey, id string) {
	t.Helper()
	testwait.Eventually(t, waitMargin, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m, _ := im.LastInbound(ctx, p.JS, sk)
		return testwait.Want(m.MessageID == id, "the last inbound message of %s is %q, want %q", sk, m.MessageID, id)
	})
}
