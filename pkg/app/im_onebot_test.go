package app_test

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
	"github.com/agentbus/agentbus/pkg/im/onebot/onebottest"
)

const (
	obSelf   = 10001 // the bot's QQ number
	obToken  = "ob-access-token"
	obMaster = 777
)

// startProc starts one agentbus process from yml with the given roles; it stops at cleanup.
func startProc(t *testing.T, yml string, roles app.Roles) *app.Process {
	t.Helper()
	cfg, err := config.Parse([]byte(yml))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, yml)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p, err := app.Start(ctx, cfg, app.Options{Roles: roles, Out: io.Discard, Log: testLogger(), NoProbe: true})
	if err != nil {
		cancel()
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		stopping.Add(1)
		go func() {
			defer stopping.Done()
			_ = p.Stop(context.Background())
			cancel()
		}()
	})
	return p
}

func tempDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "agentbus-im-")
	if err != nil {
		t.Fatal(err)
	}
	dirsMu.Lock()
	dirs = append(dirs, dir)
	dirsMu.Unlock()
	return dir
}

func pngBytes(t *testing.T) []byte {
	img := image.NewRGBA(image.Rect(0, 0, 4, 4))
	img.Set(1, 1, color.RGBA{R: 255, A: 255})
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// obScript answers like echo.
func obScript(r *fakeopenai.Request) fakeopenai.Reply { return fakeopenai.Echo(r) }

// TestOneBotForwardWebSocket runs the whole pipeline against a OneBot v11 implementation that
// agentbus dials (forward WebSocket) for what is OneBot's own: a group admin's role reaches
// IM_IN and lets them run /reset in the group. Replies quoting the message, mentions,
// commands, images (fetched from the implementation's loopback address, the URL kept as
// sourceUrl), the chunk limit, masters and redelivered events are TestIMConformance's
// (pkg/im/onebot/onebottest.Conformance).
func TestOneBotForwardWebSocket(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline")
	}
	fake := onebottest.New(t, obToken, obSelf)
	model := fakeopenai.New(t, obScript)
	dir := tempDir(t)
	yml := fmt.Sprintf(`
dataDir: %[1]s
nats: {embedded: true, storeDir: %[1]s/nats, listen: "127.0.0.1:0", storage: memory}
im:
  onebot:
    bots:
      - id: qq1
        selfId: "%[2]d"
        mode: ws
        apiBase: %[3]s
        accessToken: %[4]s
        masters: ["%[5]d"]
        chunkLimit: 1000
ai:
  providers:
    fake: {api: openai-completions, baseUrl: "%[6]s", apiKey: test}
  agents:
    zhin: {provider: fake, model: m1}
`, dir, obSelf, fake.WSURL(), obToken, obMaster, model.BaseURL())
	p := startProc(t, yml, app.AllRoles)
	fake.WaitConn(60 * time.Second)

	sends := func(n int, scene string) []onebottest.Call {
		return fake.WaitCalls(n, 90*time.Second, func(c onebottest.Call) bool {
			if c.Action != "send_msg" {
				return false
			}
			return fmt.Sprint(c.Params["user_id"]) == scene || fmt.Sprint(c.Params["group_id"]) == scene
		})
	}

	// OneBot's own: the sender's group role (admin) reaches IM_IN and lets a group admin run
	// a moderator command; a member may not.
	t.Run("group admin may /reset, a member may not", func(t *testing.T) {
		before := len(model.Requests())
		fake.Push(fake.GroupMessage(1010, 5557, 47, "admin", []map[string]any{onebottest.At(obSelf), onebottest.Text(" /reset")}))
		if c := sends(1, "5557")[0]; !strings.Contains(c.Text(), "Session reset") {
			t.Fatalf("@bot /reset by a group admin answered %q, want the reset command's answer", c.Text())
		}
		raw := lastIMIn(t, p, events.SessionKey{Platform: "onebot", Bot: "qq1", Scope: "group", Scene: "5557"})
		if !raw.Data.Sender.HasRole("group_admin") || !raw.Data.MentionsBot {
			t.Fatalf("im.in sender = %+v mentionsBot=%v", raw.Data.Sender, raw.Data.MentionsBot)
		}
		fake.Push(fake.GroupMessage(1011, 5557, 48, "member", []map[string]any{onebottest.At(obSelf), onebottest.Text(" /reset")}))
		if c := sends(2, "5557")[1]; strings.Contains(c.Text(), "Session reset") || !strings.Contains(c.Text(), "/reset in a group is for") {
			t.Fatalf("@bot /reset by a member answered %q, want a refusal", c.Text())
		}
		for _, r := range model.Requests()[before:] {
			if last := r.LastUser(); strings.Contains(last, "/reset") {
				t.Fatalf("a command reached the model as chat: %q", last)
			}
		}
	})
}

// lastIMIn returns the last inbound message of session sk as the bus stores it (im.LastInbound:
// IM_IN, or inside its inbox event on SESSION_IN since issue 40).
func lastIMIn(t *testing.T, p *app.Process, sk events.SessionKey) *events.Event[events.IMMessage] {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		m, ok := im.LastInbound(ctx, p.JS, sk)
		cancel()
		if ok {
			return &events.Event[events.IMMessage]{Data: m}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no inbound message of %s on the bus", sk)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestOneBotHTTPAndReverse covers the two modes where the implementation reaches agentbus:
// HTTP (events POSTed to /onebot/<bot>, replies POSTed to apiBase/send_msg, a 429 with
// Retry-After honoured and the part delivered after it) and the reverse WebSocket (the
// implementation dials /onebot/<bot>/ws; egress's send_msg is relayed to the ingest replica
// holding that socket).
func TestOneBotHTTPAndReverse(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline")
	}
	httpImpl := onebottest.New(t, obToken, obSelf)
	revImpl := onebottest.New(t, obToken, obSelf+1)
	model := fakeopenai.New(t, obScript)
	dir := tempDir(t)
	yml := fmt.Sprintf(`
dataDir: %[1]s
nats: {embedded: true, storeDir: %[1]s/nats, listen: "127.0.0.1:0", storage: memory}
im:
  webhook: {listen: "127.0.0.1:0"}
  onebot:
    bots:
      - {id: qqhttp, selfId: "%[2]d", mode: http, apiBase: "%[3]s", accessToken: %[4]s}
      - {id: qqrev, selfId: "%[5]d", mode: ws-reverse, accessToken: %[4]s}
ai:
  providers:
    fake: {api: openai-completions, baseUrl: "%[6]s", apiKey: test}
  agents:
    zhin: {provider: fake, model: m1}
`, dir, obSelf, httpImpl.HTTPURL(), obToken, obSelf+1, model.BaseURL())
	p := startProc(t, yml, app.AllRoles)
	if p.WebhookURL == "" {
		t.Fatal("no HTTP listener for the OneBot endpoints")
	}

	t.Run("http: event POST in, 429 honoured, reply out", func(t *testing.T) {
		httpImpl.FailNext("1", 429)
		code, err := httpImpl.Post(p.WebhookURL+"/onebot/qqhttp", httpImpl.PrivateMessage(2001, 51, []map[string]any{onebottest.Text("over http")}))
		if err != nil || code != 204 {
			t.Fatalf("event POST: %d %v", code, err)
		}
		calls := httpImpl.WaitCalls(2, 90*time.Second, func(c onebottest.Call) bool { return c.Action == "send_msg" })
		if calls[0].Params["failedWith"] != 429 || !strings.Contains(calls[1].Text(), "echo: over http") {
			t.Fatalf("calls = %+v", calls)
		}
		t.Logf("retried %v after the 429 (Retry-After: 1)", calls[1].Time.Sub(calls[0].Time).Round(time.Millisecond))
	})

	t.Run("http: bad event dead-lettered", func(t *testing.T) {
		code, err := httpImpl.Post(p.WebhookURL+"/onebot/qqhttp", map[string]any{"post_type": "message", "message_type": "guild", "message_id": 2009, "user_id": 1, "message": "x"})
		if err != nil || code != 204 {
			t.Fatalf("event POST: %d %v", code, err)
		}
		dl := lastDeadLetter(t, p, events.DeadLetterSubject("ingest", events.DLQInvalid))
		if !strings.Contains(dl.Error, "guild") || !strings.Contains(string(dl.JSON), "2009") {
			t.Fatalf("dead letter = %+v", dl)
		}
	})

	t.Run("http: wrong token refused", func(t *testing.T) {
		bad := onebottest.New(t, "wrong", obSelf)
		code, _ := bad.Post(p.WebhookURL+"/onebot/qqhttp", bad.PrivateMessage(2002, 52, []map[string]any{onebottest.Text("x")}))
		if code != 401 {
			t.Fatalf("status %d, want 401", code)
		}
	})

	t.Run("reverse WebSocket: relayed reply", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ws := "ws" + strings.TrimPrefix(p.WebhookURL, "http") + "/onebot/qqrev/ws"
		if err := revImpl.DialReverse(ctx, ws); err != nil {
			t.Fatal(err)
		}
		revImpl.Push(revImpl.GroupMessage(2003, 6666, 53, "owner", []map[string]any{onebottest.At(obSelf + 1), onebottest.Text(" via reverse")}))
		c := revImpl.WaitCalls(1, 90*time.Second, func(c onebottest.Call) bool { return c.Action == "send_msg" })[0]
		if c.Via != "ws-reverse" || !strings.Contains(c.Text(), "via reverse") {
			t.Fatalf("call = %+v", c)
		}
		raw := lastIMIn(t, p, events.SessionKey{Platform: "onebot", Bot: "qqrev", Scope: "group", Scene: "6666"})
		if !raw.Data.Sender.HasRole("group_owner") {
			t.Fatalf("owner role missing: %+v", raw.Data.Sender)
		}
	})
}

// TestOneBotConnectionTakeover runs two ingest replicas against one forward-WebSocket bot:
// exactly one holds the connection; when it is killed (its bus connection cut, so it cannot
// release its lease), the other connects within seconds, and messages are answered through
// it, once each. Messages sent while nobody was connected (the implementation refuses clients
// meanwhile, so the gap is certain) are fetched with get_friend_msg_history /
// get_group_msg_history after the last message each scene had, skipping the bot's own; one
// that also arrives live is answered once.
func TestOneBotConnectionTakeover(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three processes")
	}
	fake := onebottest.New(t, obToken, obSelf)
	model := fakeopenai.New(t, obScript)
	core, ingest := startTakeoverCore(t, fmt.Sprintf(`
  onebot:
    bots:
      - {id: qq1, selfId: "%[1]d", mode: ws, apiBase: "%[2]s", accessToken: %[3]s}`, obSelf, fake.WSURL(), obToken), model.BaseURL())
	a := ingest("a")
	first := fake.WaitConn(60 * time.Second)
	b := ingest("b")
	_ = b
	time.Sleep(3 * time.Second) // b competes for the lease and must not connect
	if n := len(fake.Conns()); n != 1 {
		t.Fatalf("%d connections open with two ingest replicas, want 1", n)
	}
	answered := func(text string) onebottest.Call {
		t.Helper()
		return fake.WaitCalls(1, 90*time.Second, func(c onebottest.Call) bool { return strings.Contains(c.Text(), text) })[0]
	}
	fake.Push(fake.PrivateMessage(3001, 61, []map[string]any{onebottest.Text("before")}))
	fake.Push(fake.GroupMessage(3002, 7001, 62, "member", []map[string]any{onebottest.Text("chatter in the group")}))
	answered("echo: before")
	// Kill only once egress has its receipt: a holder killed between the platform taking a
	// message and the answer reaching egress is the one at-least-once window (see im.Ledger).
	waitReceipt(t, core, events.SessionKey{Platform: "onebot", Bot: "qq1", Scope: "private", Scene: "61"})
	waitIMIn(t, core, events.SessionKey{Platform: "onebot", Bot: "qq1", Scope: "group", Scene: "7001"}, "3002")
	time.Sleep(2 * time.Second) // the holder flushes its cursors once a second

	// Kill the holder: which replica holds it is decided by the lease; a connected first, so
	// it is a. Cutting its bus connection stops it renewing; the implementation refuses
	// clients until a has closed its socket and messages were sent.
	killed := time.Now()
	fake.SetDown(true)
	a.NC.Close()
	testwait.Eventually(t, waitMargin, func() error {
		return testwait.Want(len(fake.Conns()) == 0, "the dead holder's connection stayed open")
	})
	during := []map[string]any{
		fake.PrivateMessage(3003, 61, []map[string]any{onebottest.Text("during one")}),
		fake.PrivateMessage(3004, 61, []map[string]any{onebottest.Text("during two")}),
		fake.GroupMessage(3005, 7001, 62, "member", []map[string]any{onebottest.At(obSelf), onebottest.Text(" during in the group")}),
	}
	for _, m := range during {
		if n := fake.Push(m); n != 0 {
			t.Fatalf("pushed to %d connections during the gap", n)
		}
	}
	time.Sleep(2 * time.Second) // the gap lasts: the new holder's connection attempts are refused meanwhile
	fake.SetDown(false)
	second := fake.WaitConn(60*time.Second, first)
	t.Logf("connection %d taken over as connection %d after %v", first, second, time.Since(killed).Round(time.Millisecond))
	fake.Push(during[1]) // a message seen both ways counts once
	for _, text := range []string{"echo: during one", "echo: during two", "during in the group"} {
		answered(text)
	}
	fake.Push(fake.PrivateMessage(3006, 61, []map[string]any{onebottest.Text("after")}))
	if c := answered("echo: after"); c.Conn != second {
		t.Fatalf("reply went over connection %d, want the new holder's %d", c.Conn, second)
	}
	time.Sleep(2 * time.Second) // a window: a doubled answer would show up now
	for _, text := range []string{"echo: before", "echo: during one", "echo: during two", "during in the group", "echo: after"} {
		n := 0
		for _, c := range fake.Calls() {
			if strings.Contains(c.Text(), text) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%q sent %d times: %+v", text, n, fake.Calls())
		}
	}
	var history []string
	for _, c := range fake.Calls() {
		if strings.HasSuffix(c.Action, "_msg_history") {
			history = append(history, fmt.Sprint(c.Action, " ", c.Params["user_id"], c.Params["group_id"]))
		}
	}
	if !slices.Contains(history, "get_friend_msg_history 61 <nil>") || !slices.Contains(history, "get_group_msg_history <nil> 7001") {
		t.Fatalf("history calls %q", history)
	}
	t.Logf("history calls: %q", history)
}

// waitReceipt waits for an IM_SENT receipt of session sk.
func waitReceipt(t *testing.T, p *app.Process, sk events.SessionKey) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := p.JS.Stream(ctx, events.StreamIMSent)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := s.GetLastMsgForSubject(ctx, events.IMSentSubject(sk)); err == nil { // the chat's receipts (issue 41)
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no receipt for %s", sk)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
