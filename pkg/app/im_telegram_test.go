package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im/telegram/telegramtest"
)

const (
	tgToken = "123456:TEST-token"
	tgBotID = 9000
	tgName  = "agentbus_test_bot"
)

// tgScript: echo; "stream" streams slowly (previews); "markup" answers with
// text that is not valid HTML.
func tgScript(r *fakeopenai.Request) fakeopenai.Reply {
	last := r.LastUser()
	switch {
	case strings.Contains(last, "stream"):
		return fakeopenai.Reply{Text: "This answer streams in slowly, word by word, so that the preview has time to grow.", Chunks: 8, ChunkDelay: 400 * time.Millisecond}
	case strings.Contains(last, "markup"):
		return fakeopenai.Reply{Text: "if a < b && c > d then **bold** and `x<y>` <b>not a tag"}
	}
	return fakeopenai.Echo(r)
}

// TestTelegramPolling runs the pipeline against a Bot API fake in long-polling mode for what
// is Telegram's own: a private message answered in HTML that user text cannot break,
// /cmd@bot commands, typing, and a streaming preview edited as the reply grows and finally
// replaced by the formatted reply. What every platform does (group mentions, photos in and
// out, chunking, 429 with retry_after, masters, redelivery) is TestIMConformance's.
func TestTelegramPolling(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline")
	}
	fake := telegramtest.New(t, tgToken, tgBotID, tgName)
	pfake := telegramtest.New(t, tgToken, tgBotID+1, tgName+"_p") // the previewing bot's server
	model := fakeopenai.New(t, tgScript)
	dir := tempDir(t)
	yml := fmt.Sprintf(`
dataDir: %[1]s
nats: {embedded: true, storeDir: %[1]s/nats, listen: "127.0.0.1:0", storage: memory}
im:
  telegram:
    bots:
      - {id: tg1, token: "%[2]s", apiBase: "%[3]s", preview: "off"}
      - {id: tgp, token: "%[2]s", apiBase: "%[5]s", preview: partial, previewIntervalMs: 300}
ai:
  providers:
    fake: {api: openai-completions, baseUrl: "%[4]s", apiKey: test}
  agents:
    zhin: {provider: fake, model: m1}
`, dir, tgToken, fake.URL(), model.BaseURL(), pfake.URL())
	p := startProc(t, yml, app.AllRoles)
	sent := func(n int, chat string) []telegramtest.Call {
		return fake.WaitCalls(n, 90*time.Second, func(c telegramtest.Call) bool {
			return c.Status == 200 && strings.HasPrefix(c.Method, "send") && c.Method != "sendChatAction" && c.Params.Get("chat_id") == chat
		})
	}

	t.Run("private message, HTML that cannot break", func(t *testing.T) {
		fake.AddMessage(fake.Message(1, 41, "private", 41, "some markup please"))
		c := sent(1, "41")[0]
		// It answered, so both bots are connected: /readyz says so.
		report, err := p.Readyz(context.Background(), false)
		if err != nil || !strings.Contains(report, "adapter telegram/tg1: connected") || !strings.Contains(report, "adapter telegram/tgp: connected") {
			t.Fatalf("readyz: %v\n%s", err, report)
		}
		want := "if a &lt; b &amp;&amp; c &gt; d then <b>bold</b> and <code>x&lt;y&gt;</code> &lt;b&gt;not a tag"
		if c.Params.Get("parse_mode") != "HTML" || c.Params.Get("text") != want {
			t.Fatalf("sent %q (parse_mode %q)\nwant %q", c.Params.Get("text"), c.Params.Get("parse_mode"), want)
		}
		if c.Params.Get("reply_to_message_id") != "1" {
			t.Fatalf("not a reply to message 1: %v", c.Params)
		}
	})

	// "@bot /whoami" is TestIMConformance's; /cmd@bot is Telegram's own.
	t.Run("/cmd@bot in a group (issue 37)", func(t *testing.T) {
		before := len(model.Requests())
		m := fake.Message(31, -100600, "supergroup", 46, "/whoami@"+tgName)
		m["entities"] = []any{map[string]any{"type": "bot_command", "offset": 0, "length": len("/whoami@" + tgName)}}
		fake.AddMessage(m)
		if c := sent(1, "-100600")[0]; !strings.HasPrefix(c.Params.Get("text"), "You are 46") {
			t.Fatalf("/whoami@bot answered %q", c.Params.Get("text"))
		}
		// Another bot's command is not this bot's.
		m = fake.Message(32, -100600, "supergroup", 46, "/whoami@otherbot")
		m["entities"] = []any{map[string]any{"type": "bot_command", "offset": 0, "length": len("/whoami@otherbot")}}
		fake.AddMessage(m)
		fake.AddMessage(telegramtest.Mention(fake.Message(33, -100600, "supergroup", 47, "/whoami"), tgName))
		if c := sent(2, "-100600")[1]; !strings.HasPrefix(c.Params.Get("text"), "You are 47") {
			t.Fatalf("after /whoami@otherbot the bot answered %q, want only the next command's answer", c.Params.Get("text"))
		}
		for _, r := range model.Requests()[before:] {
			if last := r.LastUser(); strings.Contains(last, "/whoami") {
				t.Fatalf("a command reached the model as chat: %q", last)
			}
		}
	})

	t.Run("typing while a turn runs, previews off", func(t *testing.T) {
		fake.AddMessage(fake.Message(20, 46, "private", 46, "stream it please"))
		reply := sent(1, "46")[0]
		var typing []telegramtest.Call
		edits := 0
		for _, c := range fake.Calls() {
			switch {
			case c.Params.Get("chat_id") != "46":
			case c.Method == "sendChatAction":
				typing = append(typing, c)
			case c.Method == "editMessageText":
				edits++
			}
		}
		if len(typing) == 0 || typing[0].Params.Get("action") != "typing" || !typing[0].Time.Before(reply.Time) || edits != 0 {
			t.Fatalf("%d typing actions (first %+v) before the reply at %v, %d edits (want none: previews off)", len(typing), typing, reply.Time, edits)
		}
		t.Logf("%d typing actions while the turn ran", len(typing))
	})

	t.Run("preview edited then finalized", func(t *testing.T) {
		pfake.AddMessage(pfake.Message(9, 46, "private", 46, "stream it"))
		final := "This answer streams in slowly, word by word, so that the preview has time to grow."
		edits := pfake.WaitCalls(1, 90*time.Second, func(c telegramtest.Call) bool {
			return c.Method == "editMessageText" && c.Params.Get("chat_id") == "46" && c.Params.Get("text") == final
		})
		var previews, typing, partialEdits int
		for _, c := range pfake.Calls() {
			if c.Params.Get("chat_id") != "46" {
				continue
			}
			switch {
			case c.Method == "sendMessage":
				previews++
			case c.Method == "sendChatAction":
				typing++
			case c.Method == "editMessageText" && strings.HasSuffix(c.Params.Get("text"), " …"):
				partialEdits++
			}
		}
		if previews != 1 || typing == 0 || edits[0].Params.Get("parse_mode") != "HTML" {
			t.Fatalf("previews sent %d (want 1: the final reply edits it), typing %d, final edit %v", previews, typing, edits[0].Params)
		}
		t.Logf("preview: 1 message, %d partial edits, %d typing actions, final edit in HTML", partialEdits, typing)
	})
}

// TestTelegramPollingTakeover runs two ingest replicas polling one bot: only one polls at a
// time; when it is killed, the other takes the long poll over within seconds, and a message
// sent while nobody polled is answered once: Telegram keeps unconfirmed updates.
func TestTelegramPollingTakeover(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three processes")
	}
	fake := telegramtest.New(t, tgToken, tgBotID, tgName)
	model := fakeopenai.New(t, tgScript)
	core, ingest := startTakeoverCore(t, fmt.Sprintf(`
  telegram:
    bots:
      - {id: tg1, token: "%[1]s", apiBase: "%[2]s", preview: "off"}`, tgToken, fake.URL()), model.BaseURL())
	a := ingest("a")
	fake.WaitCalls(1, 60*time.Second, func(c telegramtest.Call) bool { return c.Method == "getUpdates" })
	b := ingest("b")
	_ = b
	fake.AddMessage(fake.Message(1, 71, "private", 71, "before"))
	fake.WaitCalls(1, 90*time.Second, func(c telegramtest.Call) bool { return strings.Contains(c.Params.Get("text"), "echo: before") })
	waitReceipt(t, core, events.SessionKey{Platform: "telegram", Bot: "tg1", Scope: "private", Scene: "71"})

	// Kill the poller (a: it polled first) and send while nobody polls.
	killed := time.Now()
	a.NC.Close()
	fake.AddMessage(fake.Message(2, 71, "private", 71, "during"))
	fake.WaitCalls(1, 90*time.Second, func(c telegramtest.Call) bool { return strings.Contains(c.Params.Get("text"), "echo: during") })
	t.Logf("message sent while the poller was dead answered %v after the kill", time.Since(killed).Round(time.Millisecond))
	fake.AddMessage(fake.Message(3, 71, "private", 71, "after"))
	fake.WaitCalls(1, 90*time.Second, func(c telegramtest.Call) bool { return strings.Contains(c.Params.Get("text"), "echo: after") })
	time.Sleep(2 * time.Second) // a window: a doubled answer would show up now
	for _, text := range []string{"echo: before", "echo: during", "echo: after"} {
		n := 0
		for _, c := range fake.Calls() {
			if c.Method == "sendMessage" && strings.Contains(c.Params.Get("text"), text) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%q sent %d times", text, n)
		}
	}
	// The killed replica's poll may have been cut by the new one (409), but never the other
	// way round for long: b held the lease.
	t.Logf("%d polls, %d terminated by a newer poll", fake.Polls, fake.Conflicts)
}

// TestTelegramWebhook: updates POSTed to /telegram/<bot> with the secret token are answered;
// a wrong secret is refused.
func TestTelegramWebhook(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline")
	}
	fake := telegramtest.New(t, tgToken, tgBotID, tgName)
	model := fakeopenai.New(t, tgScript)
	dir := tempDir(t)
	yml := fmt.Sprintf(`
dataDir: %[1]s
nats: {embedded: true, storeDir: %[1]s/nats, listen: "127.0.0.1:0", storage: memory}
im:
  webhook: {listen: "127.0.0.1:0"}
  telegram:
    bots:
      - {id: tgw, token: "%[2]s", apiBase: "%[3]s", mode: webhook, webhookSecret: s3cret, preview: "off"}
ai:
  providers:
    fake: {api: openai-completions, baseUrl: "%[4]s", apiKey: test}
  agents:
    zhin: {provider: fake, model: m1}
`, dir, tgToken, fake.URL(), model.BaseURL())
	p := startProc(t, yml, app.AllRoles)
	post := func(secret string, update string) int {
		req, _ := http.NewRequest(http.MethodPost, p.WebhookURL+"/telegram/tgw", strings.NewReader(update))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Telegram-Bot-Api-Secret-Token", secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	upd := `{"update_id":5,"message":{"message_id":11,"date":1700000000,"chat":{"id":81,"type":"private"},"from":{"id":81,"is_bot":false,"first_name":"Ann"},"text":"via webhook"}}`
	if code := post("wrong", upd); code != http.StatusUnauthorized {
		t.Fatalf("wrong secret: %d", code)
	}
	if code := post("s3cret", upd); code != http.StatusOK {
		t.Fatalf("update: %d", code)
	}
	c := fake.WaitCalls(1, 90*time.Second, func(c telegramtest.Call) bool { return c.Method == "sendMessage" })[0]
	if c.Params.Get("chat_id") != "81" || !strings.Contains(c.Params.Get("text"), "echo: via webhook") || c.Params.Get("reply_to_message_id") != "11" {
		t.Fatalf("reply = %v", c.Params)
	}
	if code := post("s3cret", `{"update_id":6,"message":{"message_id":12,"date":1,"chat":{"id":81,"type":"weird"},"text":"x"}}`); code != http.StatusOK {
		t.Fatalf("an update that cannot be normalized should be dead-lettered and acknowledged, got %d", code)
	}
	dl := lastDeadLetter(t, p, events.DeadLetterSubject("ingest", events.DLQInvalid))
	if !strings.Contains(dl.Error, "weird") || !strings.Contains(string(dl.JSON), `"message_id":12`) {
		t.Fatalf("dead letter = %+v", dl)
	}
}

// lastDeadLetter returns the last dead letter on subject.
func lastDeadLetter(t *testing.T, p *app.Process, subject string) events.DeadLetter {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := p.JS.Stream(ctx, events.StreamDeadLetters)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatalf("no dead letter on %s: %v", subject, err)
	}
	var ev events.Event[events.DeadLetter]
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		t.Fatal(err)
	}
	return ev.Data
}
