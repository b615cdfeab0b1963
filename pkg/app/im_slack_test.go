package app_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im/slack/slacktest"
)

const (
	slBotToken = "xoxb-test-bot-token"
	slAppToken = "xapp-test-app-token"
	slSecret   = "slack-signing-secret"
	slUser     = "UBOT0001"
)

func slScript(r *fakeopenai.Request) fakeopenai.Reply {
	last := r.LastUser()
	switch {
	case strings.Contains(last, "stream"):
		return fakeopenai.Reply{Text: "This answer streams in slowly, word by word, so that the preview has time to grow.", Chunks: 8, ChunkDelay: 400 * time.Millisecond}
	}
	return fakeopenai.Echo(r)
}

// TestSlackSocketMode runs the pipeline against a Slack fake in Socket Mode: a DM answered
// (and its envelope acknowledged), a channel mention answered in the message's thread (a
// plain channel message not), a message in a thread answered in that thread, and a streaming
// preview updated with chat.update and finally replaced by the reply. Commands, files in
// (url_private with the bot token) and out (the external upload flow), 4,000-character chunks
// and a 429 with Retry-After are TestIMConformance's.
func TestSlackSocketMode(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline")
	}
	fake := slacktest.New(t, slBotToken, slAppToken, slUser, "BBOT")
	pfake := slacktest.New(t, slBotToken, slAppToken, slUser, "BBOT")
	model := fakeopenai.New(t, slScript)
	dir := tempDir(t)
	yml := fmt.Sprintf(`
dataDir: %[1]s
nats: {embedded: true, storeDir: %[1]s/nats, listen: "127.0.0.1:0", storage: memory}
im:
  slack:
    bots:
      - {id: sl1, botToken: "%[2]s", appToken: "%[3]s", apiBase: "%[4]s", preview: "off"}
      - {id: slp, botToken: "%[2]s", appToken: "%[3]s", apiBase: "%[5]s", preview: partial, previewIntervalMs: 300}
ai:
  providers:
    fake: {api: openai-completions, baseUrl: "%[6]s", apiKey: test}
  agents:
    zhin: {provider: fake, model: m1}
`, dir, slBotToken, slAppToken, fake.URL(), pfake.URL(), model.BaseURL())
	p := startProc(t, yml, app.AllRoles)
	fake.WaitSockets(1, 60*time.Second)
	pfake.WaitSockets(1, 60*time.Second)
	posted := func(n int, channel string) []slacktest.Call {
		return fake.WaitCalls(n, 90*time.Second, func(c slacktest.Call) bool {
			return c.Method == "chat.postMessage" && c.Status == 200 && c.Params.Get("channel") == channel
		})
	}

	t.Run("DM answered, envelope acknowledged", func(t *testing.T) {
		env := fake.Push(fake.Message("D500", "im", "U41", "1700000001.000100", "hello <there> & you"))
		c := posted(1, "D500")[0]
		if c.Params.Get("text") != "echo: hello &lt;there&gt; &amp; you" || c.Params.Get("thread_ts") != "" || c.Token != slBotToken {
			t.Fatalf("reply = %v", c.Params)
		}
		testwait.Eventually(t, 0, func() error { return testwait.Want(fake.Acked(env), "envelope %s not acknowledged", env) })
	})

	// A plain channel message left unanswered is TestIMConformance's; threading in channels
	// is Slack's own.
	t.Run("channel mention answered in its thread", func(t *testing.T) {
		fake.Push(fake.Message("C600", "channel", "U44", "1700000003.000100", "<@"+slUser+"> hello bot"))
		c := posted(1, "C600")[0]
		if !strings.HasSuffix(c.Params.Get("text"), "hello bot") || strings.Contains(c.Params.Get("text"), slUser) || c.Params.Get("thread_ts") != "1700000003.000100" {
			t.Fatalf("channel reply = %v", c.Params)
		}
		raw := lastIMIn(t, p, events.SessionKey{Platform: "slack", Bot: "sl1", Scope: "group", Scene: "C600"})
		if !raw.Data.MentionsBot || raw.Data.MessageID != "C600/1700000003.000100" {
			t.Fatalf("mention = %+v", raw.Data)
		}
	})

	t.Run("message in a thread answered in that thread", func(t *testing.T) {
		m := fake.Message("C600", "channel", "U44", "1700000004.000100", "<@"+slUser+"> and in the thread?")
		slacktest.Event(m)["thread_ts"] = "1700000003.000100"
		fake.Push(m)
		c := fake.WaitCalls(1, 90*time.Second, func(c slacktest.Call) bool {
			return c.Method == "chat.postMessage" && strings.Contains(c.Params.Get("text"), "in the thread?")
		})[0]
		if c.Params.Get("thread_ts") != "1700000003.000100" {
			t.Fatalf("thread reply = %v", c.Params)
		}
		raw := lastIMIn(t, p, events.SessionKey{Platform: "slack", Bot: "sl1", Scope: "group", Scene: "C600"})
		if raw.Data.Content[0].Type != events.SegReply || raw.Data.Content[0].ReplyID() != "C600/1700000003.000100" {
			t.Fatalf("thread not normalized: %+v", raw.Data.Content)
		}
	})

	t.Run("preview updated then finalized", func(t *testing.T) {
		pfake.Push(pfake.Message("D900", "im", "U47", "1700000009.000100", "stream it"))
		final := "This answer streams in slowly, word by word, so that the preview has time to grow."
		pfake.WaitCalls(1, 90*time.Second, func(c slacktest.Call) bool {
			return c.Method == "chat.update" && c.Params.Get("channel") == "D900" && c.Params.Get("text") == final
		})
		var posts, partial int
		for _, c := range pfake.Calls() {
			if c.Params.Get("channel") != "D900" {
				continue
			}
			switch {
			case c.Method == "chat.postMessage":
				posts++
			case c.Method == "chat.update" && strings.HasSuffix(c.Params.Get("text"), " …"):
				partial++
			}
		}
		if posts != 1 {
			t.Fatalf("%d messages posted (want 1: the final reply updates the preview)", posts)
		}
		t.Logf("preview: 1 message, %d partial updates, final chat.update", partial)
	})
}

// TestSlackEventsAPI: signed event_callbacks POSTed to /slack/<bot> are answered; a bad
// signature is refused; url_verification is answered with its challenge; an event that
// cannot be normalized is dead-lettered and acknowledged.
func TestSlackEventsAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline")
	}
	fake := slacktest.New(t, slBotToken, slAppToken, slUser, "BBOT")
	model := fakeopenai.New(t, slScript)
	dir := tempDir(t)
	yml := fmt.Sprintf(`
dataDir: %[1]s
nats: {embedded: true, storeDir: %[1]s/nats, listen: "127.0.0.1:0", storage: memory}
im:
  webhook: {listen: "127.0.0.1:0"}
  slack:
    bots:
      - {id: slw, botToken: "%[2]s", mode: events, signingSecret: "%[3]s", apiBase: "%[4]s", preview: "off"}
ai:
  providers:
    fake: {api: openai-completions, baseUrl: "%[5]s", apiKey: test}
  agents:
    zhin: {provider: fake, model: m1}
`, dir, slBotToken, slSecret, fake.URL(), model.BaseURL())
	p := startProc(t, yml, app.AllRoles)
	post := func(secret string, body []byte) (int, string) {
		ts, sig := slacktest.Sign(secret, body, time.Now())
		req, _ := http.NewRequest(http.MethodPost, p.WebhookURL+"/slack/slw", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Slack-Request-Timestamp", ts)
		req.Header.Set("X-Slack-Signature", sig)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post(slSecret, []byte(`{"type":"url_verification","token":"x","challenge":"ch4ll3nge"}`)); code != 200 || body != "ch4ll3nge" {
		t.Fatalf("url_verification: %d %q", code, body)
	}
	ev, _ := json.Marshal(fake.Message("C610", "channel", "U81", "1700000010.000100", "<@"+slUser+"> via events"))
	if code, _ := post("wrong-secret", ev); code != http.StatusUnauthorized {
		t.Fatalf("bad signature: %d", code)
	}
	if code, _ := post(slSecret, ev); code != 200 {
		t.Fatalf("event: %d", code)
	}
	c := fake.WaitCalls(1, 90*time.Second, func(c slacktest.Call) bool { return c.Method == "chat.postMessage" })[0]
	if c.Params.Get("channel") != "C610" || !strings.HasSuffix(c.Params.Get("text"), "] via events") || c.Params.Get("thread_ts") != "1700000010.000100" {
		t.Fatalf("reply = %v", c.Params)
	}
	bad, _ := json.Marshal(fake.Message("C610", "weird", "U81", "1700000011.000100", "x"))
	if code, _ := post(slSecret, bad); code != 200 {
		t.Fatalf("an event that cannot be normalized should be dead-lettered and acknowledged, got %d", code)
	}
	dl := lastDeadLetter(t, p, events.DeadLetterSubject("ingest", events.DLQInvalid))
	if !strings.Contains(dl.Error, "weird") || !strings.Contains(string(dl.JSON), "1700000011.000100") {
		t.Fatalf("dead letter = %+v", dl)
	}
}

// TestSlackSocketTakeover: two ingest replicas, one socket; when the holder loses the bus the
// other opens the socket and answers. Nothing is lost across the gap: an envelope the dying
// holder received but could not ingest is left unacknowledged, and one sent while no socket
// was open (Socket Mode is held down meanwhile, so the gap is certain) finds none; Slack
// retries both (the fake on Slack's schedule, compressed) and the new holder answers each
// once. An envelope Slack sends again after it was acknowledged is dropped by IM_IN's dedupe.
func TestSlackSocketTakeover(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three processes")
	}
	fake := slacktest.New(t, slBotToken, slAppToken, slUser, "BBOT")
	fake.SetRetries(3*time.Second, 0, 10*time.Second, 20*time.Second, 30*time.Second)
	model := fakeopenai.New(t, slScript)
	_, ingest := startTakeoverCore(t, fmt.Sprintf(`
  slack:
    bots:
      - {id: sl1, botToken: "%[1]s", appToken: "%[2]s", apiBase: "%[3]s", preview: "off"}`, slBotToken, slAppToken, fake.URL()), model.BaseURL())
	a := ingest("a")
	fake.WaitSockets(1, 60*time.Second)
	ingest("b")
	time.Sleep(3 * time.Second) // a window: b competes for the lease and must not connect
	if n := fake.OpenSockets(); n != 1 {
		t.Fatalf("%d sockets open with two ingest replicas, want 1", n)
	}
	answered := func(text string) {
		t.Helper()
		fake.WaitCalls(1, 120*time.Second, func(c slacktest.Call) bool { return c.Params.Get("text") == text })
	}
	before := fake.Message("D510", "im", "U71", "1700000020.000100", "before")
	fake.Push(before)
	answered("echo: before")

	killed := time.Now()
	fake.SetSocketsDown(true)
	a.NC.Close()
	// The holder still has its socket for a moment but can no longer publish: it must not ack.
	dying := fake.Push(fake.Message("D510", "im", "U71", "1700000021.000100", "while dying"))
	testwait.Eventually(t, waitMargin, func() error {
		return testwait.Want(fake.OpenSockets() == 0, "the dead holder's socket stayed open: %+v", fake.Sockets())
	})
	gap := fake.Push(fake.Message("D510", "im", "U71", "1700000022.000100", "during the gap"))
	time.Sleep(2 * time.Second) // the gap lasts: b's attempts to open a socket are refused meanwhile
	fake.SetSocketsDown(false)
	fake.WaitSockets(1, 60*time.Second)
	t.Logf("socket taken over %v after the holder lost the bus", time.Since(killed).Round(time.Millisecond))
	fake.Push(before) // a redelivery of an acknowledged envelope: dropped by IM_IN's dedupe
	fake.Push(fake.Message("D510", "im", "U71", "1700000023.000100", "after"))
	for _, text := range []string{"echo: while dying", "echo: during the gap", "echo: after"} {
		answered(text)
	}
	time.Sleep(2 * time.Second) // a window: a doubled answer would show up now
	for _, text := range []string{"echo: before", "echo: while dying", "echo: during the gap", "echo: after"} {
		n := 0
		for _, c := range fake.Calls() {
			if c.Method == "chat.postMessage" && c.Params.Get("text") == text {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%q sent %d times", text, n)
		}
	}
	if !fake.Acked(dying) || !fake.Acked(gap) {
		t.Errorf("envelopes not acknowledged in the end: dying %v, gap %v", fake.Acked(dying), fake.Acked(gap))
	}
	t.Logf("deliveries: dying envelope %d, gap envelope %d", fake.Deliveries(dying), fake.Deliveries(gap))
}
