package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im/matrix"
	"github.com/agentbus/agentbus/pkg/im/matrix/dendritetest"
	"github.com/agentbus/agentbus/pkg/im/matrix/matrixtest"
)

const mxStreamed = "This answer streams in slowly, word by word, so that the preview has time to grow."

// mxScript: echo; "stream" streams slowly (previews); "long" is long; "picture" sends back
// the media reference *ref points at.
func mxScript(mu *sync.Mutex, ref *string) fakeopenai.Script {
	return func(r *fakeopenai.Request) fakeopenai.Reply {
		last := r.LastUser()
		switch {
		case strings.Contains(last, "stream"):
			return fakeopenai.Reply{Text: mxStreamed, Chunks: 8, ChunkDelay: 400 * time.Millisecond}
		case strings.Contains(last, "long"):
			var b strings.Builder
			for i := range 150 {
				fmt.Fprintf(&b, "Sentence number %d of a long answer. ", i)
			}
			return fakeopenai.Reply{Text: b.String()}
		case strings.Contains(last, "picture"):
			mu.Lock()
			defer mu.Unlock()
			return fakeopenai.Reply{Text: "Here it is: ![photo](" + *ref + ")"}
		}
		return fakeopenai.Echo(r)
	}
}

// roomEvents returns the room's message events from sender, oldest first (up to 200).
func roomEvents(t *testing.T, c *mautrix.Client, room id.RoomID, sender id.UserID) []*event.Event {
	t.Helper()
	resp, err := c.Messages(context.Background(), room, "", "", mautrix.DirectionBackward, nil, 200)
	if err != nil {
		t.Fatalf("messages of %s: %v", room, err)
	}
	var out []*event.Event
	for i := len(resp.Chunk) - 1; i >= 0; i-- {
		e := resp.Chunk[i]
		if e.Sender != sender || e.Type != event.EventMessage {
			continue
		}
		_ = e.Content.ParseRaw(e.Type)
		out = append(out, e)
	}
	return out
}

// waitEvents polls the room until keep holds for n of sender's messages.
func waitEvents(t *testing.T, c *mautrix.Client, room id.RoomID, sender id.UserID, n int, d time.Duration, keep func(*event.MessageEventContent) bool) []*event.Event {
	t.Helper()
	var got []*event.Event
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		got = got[:0]
		for _, e := range roomEvents(t, c, room, sender) {
			if keep(e.Content.AsMessage()) {
				got = append(got, e)
			}
		}
		if len(got) >= n {
			return got
		}
	}
	t.Fatalf("%d of %d messages from %s in %s after %v", len(got), n, sender, room, d)
	return nil
}

func bodyHas(s string) func(*event.MessageEventContent) bool {
	return func(c *event.MessageEventContent) bool { return strings.Contains(c.Body, s) }
}

// dmWith creates a direct chat from u to bot and waits for the bot to join.
func dmWith(t *testing.T, u *dendritetest.User, bot id.UserID) id.RoomID {
	t.Helper()
	ctx := context.Background()
	r, err := u.Client.CreateRoom(ctx, &mautrix.ReqCreateRoom{Preset: "trusted_private_chat", IsDirect: true, Invite: []id.UserID{bot}})
	if err != nil {
		t.Fatal(err)
	}
	waitJoined(t, u.Client, r.RoomID, bot)
	return r.RoomID
}

func waitJoined(t *testing.T, c *mautrix.Client, room id.RoomID, user id.UserID) {
	t.Helper()
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		m, err := c.JoinedMembers(context.Background(), room)
		if err == nil {
			if _, ok := m.Joined[user]; ok {
				return
			}
		}
	}
	t.Fatalf("%s did not join %s (auto-join on invite)", user, room)
}

// TestMatrixDendrite runs the pipeline against a real Dendrite homeserver (with its rate
// limiter on for the bots) behind a recording proxy: a group @-mention answered as a rich
// reply and a plain group message not, a DM answered, an image in (authenticated media into
// the media store) and out (uploaded, sent as m.image), a long reply chunked with 429
// M_LIMIT_EXCEEDED honoured, a streaming preview edited with m.replace and finalized with
// typing notifications, and the sync connection taken over by a second ingest replica after
// the first is killed, with no message lost or doubled.
func TestMatrixDendrite(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Dendrite and runs the pipeline")
	}
	hs := dendritetest.Start(t, dendritetest.Options{RateLimit: true, Threshold: 5, Cooloff: 500 * time.Millisecond,
		Exempt: []string{"@alice:localhost", "@carol:localhost"}})
	rec := dendritetest.NewRecorder(t, hs.URL)
	bot := hs.Register(t, "agentbus", "Agentbus")
	pbot := hs.Register(t, "previewbot", "Previewbot")
	alice := hs.Register(t, "alice", "Alice")
	carol := hs.Register(t, "carol", "Carol")
	var refMu sync.Mutex
	var imgRef string
	model := fakeopenai.New(t, mxScript(&refMu, &imgRef))
	dir := tempDir(t)
	yml := fmt.Sprintf(`
dataDir: %[1]s
nats: {embedded: true, storeDir: %[1]s/nats, listen: "127.0.0.1:0", storage: memory}
im:
  matrix:
    bots:
      - {id: mx1, homeserver: "%[2]s", userId: "%[3]s", accessToken: "%[4]s", preview: "off", chunkLimit: 1000}
      - {id: mxp, homeserver: "%[2]s", userId: "%[5]s", accessToken: "%[6]s", preview: partial, previewIntervalMs: 300}
ai:
  providers:
    fake: {api: openai-completions, baseUrl: "%[7]s", apiKey: test}
  agents:
    zhin: {provider: fake, model: m1}
`, dir, rec.URL, bot.ID, bot.Token, pbot.ID, pbot.Token, model.BaseURL())
	p := startProc(t, yml, app.AllRoles)
	ctx := context.Background()

	t.Run("group mention answered as a reply, plain message not", func(t *testing.T) {
		r, err := alice.Client.CreateRoom(ctx, &mautrix.ReqCreateRoom{Preset: "private_chat", Name: "team", Invite: []id.UserID{bot.ID, carol.ID}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := carol.Client.JoinRoomByID(ctx, r.RoomID); err != nil {
			t.Fatal(err)
		}
		waitJoined(t, alice.Client, r.RoomID, bot.ID)
		if _, err := carol.Client.SendText(ctx, r.RoomID, "just chatting"); err != nil {
			t.Fatal(err)
		}
		ment, err := alice.Client.SendMessageEvent(ctx, r.RoomID, event.EventMessage, &event.MessageEventContent{
			MsgType: event.MsgText, Body: "Agentbus: hello bot", Format: event.FormatHTML,
			FormattedBody: `<a href="https://matrix.to/#/` + bot.ID.String() + `">Agentbus</a>: hello bot`,
			Mentions:      &event.Mentions{UserIDs: []id.UserID{bot.ID}}})
		if err != nil {
			t.Fatal(err)
		}
		got := waitEvents(t, alice.Client, r.RoomID, bot.ID, 1, 90*time.Second, bodyHas("hello bot"))
		if reply := got[0].Content.AsMessage().RelatesTo.GetReplyTo(); reply != ment.EventID {
			t.Fatalf("reply threads to %q, want %q", reply, ment.EventID)
		}
		sk := events.SessionKey{Platform: "matrix", Bot: "mx1", Scope: "group", Scene: r.RoomID.String()}
		waitReceipt(t, p, sk)
		if rc := lastReceipt(t, p, sk); rc.MessageID != got[0].ID.String() {
			t.Fatalf("receipt carries %q, the reply is %s", rc.MessageID, got[0].ID)
		}
		time.Sleep(2 * time.Second) // a window: an answer to the plain message would show up now
		if n := len(roomEvents(t, alice.Client, r.RoomID, bot.ID)); n != 1 {
			t.Fatalf("bot sent %d messages in the group, want 1 (the plain message is not answered)", n)
		}
	})

	dm := dmWith(t, alice, bot.ID)
	t.Run("direct message", func(t *testing.T) {
		hello, err := alice.Client.SendText(ctx, dm, "hi there")
		if err != nil {
			t.Fatal(err)
		}
		got := waitEvents(t, alice.Client, dm, bot.ID, 1, 90*time.Second, bodyHas("echo: hi there"))
		if got[0].Content.AsMessage().RelatesTo.GetReplyTo() != hello.EventID {
			t.Fatalf("DM reply not threaded: %+v", got[0].Content.AsMessage())
		}
		in := lastIMIn(t, p, events.SessionKey{Platform: "matrix", Bot: "mx1", Scope: "private", Scene: dm.String()})
		if in.Data.Sender.ID != alice.ID.String() || in.Data.Sender.Name != "Alice" {
			t.Fatalf("sender = %+v", in.Data.Sender)
		}
	})

	t.Run("image in and out", func(t *testing.T) {
		img := pngBytes(t)
		up, err := alice.Client.UploadBytesWithName(ctx, img, "image/png", "red.png")
		if err != nil {
			t.Fatal(err)
		}
		sent, err := alice.Client.SendMessageEvent(ctx, dm, event.EventMessage, &event.MessageEventContent{
			MsgType: event.MsgImage, Body: "red.png", URL: up.ContentURI.CUString(), Info: &event.FileInfo{MimeType: "image/png", Size: len(img)}})
		if err != nil {
			t.Fatal(err)
		}
		sk := events.SessionKey{Platform: "matrix", Bot: "mx1", Scope: "private", Scene: dm.String()}
		var seg events.Segment
		for deadline := time.Now().Add(60 * time.Second); seg.Str("object") == "" && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if in := lastIMIn(t, p, sk); in.Data.MessageID == sent.EventID.String() {
				seg = in.Data.Content[len(in.Data.Content)-1]
			}
		}
		if seg.Type != events.SegImage || seg.Str("object") == "" {
			t.Fatalf("image not stored in the media store: %+v", seg)
		}
		refMu.Lock()
		imgRef = seg.Str("url")
		refMu.Unlock()
		if _, err := alice.Client.SendText(ctx, dm, "send the picture back"); err != nil {
			t.Fatal(err)
		}
		got := waitEvents(t, alice.Client, dm, bot.ID, 1, 90*time.Second, func(c *event.MessageEventContent) bool { return c.MsgType == event.MsgImage })
		c := got[0].Content.AsMessage()
		u, err := c.URL.Parse()
		if err != nil {
			t.Fatalf("m.image url %q: %v", c.URL, err)
		}
		b, err := alice.Client.DownloadBytes(ctx, u)
		if err != nil || !bytes.Equal(b, img) {
			t.Fatalf("image sent back differs (%d bytes, %v)", len(b), err)
		}
		if c.Info == nil || c.Info.MimeType != "image/png" || c.Info.Width != 4 {
			t.Fatalf("m.image info = %+v", c.Info)
		}
	})

	t.Run("long reply chunked", func(t *testing.T) {
		if _, err := alice.Client.SendText(ctx, dm, "a long answer please"); err != nil {
			t.Fatal(err)
		}
		waitEvents(t, alice.Client, dm, bot.ID, 1, 120*time.Second, bodyHas("Sentence number 149 "))
		parts := waitEvents(t, alice.Client, dm, bot.ID, 1, 10*time.Second, bodyHas("Sentence number"))
		total := 0
		for i, e := range parts {
			body := e.Content.AsMessage().Body
			if n := len([]rune(body)); n > 1000 {
				t.Fatalf("message of %d characters (limit 1000)", n)
			}
			total += len([]rune(body))
			if i > 0 && !strings.Contains(parts[i-1].Content.AsMessage().Body, fmt.Sprintf("number %d ", firstNumber(t, body)-1)) {
				t.Fatalf("chunks out of order at %d", i)
			}
		}
		// Dendrite's rate limiter does not cover /send (it limits typing, joins, profile
		// calls); the 429 on sends is exercised against matrixtest (TestMatrixFake429).
		limited := rec.Calls(func(c dendritetest.Call) bool { return c.Status == 429 })
		t.Logf("long reply: %d characters in %d messages; %d requests of the bots answered 429 so far", total, len(parts), len(limited))
		if len(parts) < 5 || total < 5000 {
			t.Fatalf("%d characters in %d messages", total, len(parts))
		}
	})

	t.Run("preview edited then finalized", func(t *testing.T) {
		pdm := dmWith(t, alice, pbot.ID)
		if _, err := alice.Client.SendText(ctx, pdm, "stream it"); err != nil {
			t.Fatal(err)
		}
		final := waitEvents(t, alice.Client, pdm, pbot.ID, 1, 120*time.Second, func(c *event.MessageEventContent) bool {
			return c.NewContent != nil && c.NewContent.Body == mxStreamed
		})
		all := roomEvents(t, alice.Client, pdm, pbot.ID)
		var originals, partial int
		var orig id.EventID
		for _, e := range all {
			c := e.Content.AsMessage()
			switch {
			case c.RelatesTo != nil && c.RelatesTo.Type == event.RelReplace:
				if strings.HasSuffix(c.NewContent.Body, " …") {
					partial++
				}
			default:
				originals++
				orig = e.ID
			}
		}
		fc := final[0].Content.AsMessage()
		if originals != 1 || fc.RelatesTo.EventID != orig || partial == 0 {
			t.Fatalf("preview: %d messages (want 1), %d partial edits (want > 0), final edit replaces %s (preview %s)", originals, partial, fc.RelatesTo.EventID, orig)
		}
		typing := rec.Calls(func(c dendritetest.Call) bool {
			return c.Method == "PUT" && strings.Contains(c.Path, "/typing/"+pbot.ID.String())
		})
		if len(typing) == 0 {
			t.Fatal("no typing notification while the turn streamed")
		}
		rc := lastReceipt(t, p, events.SessionKey{Platform: "matrix", Bot: "mxp", Scope: "private", Scene: pdm.String()})
		if rc.MessageID != orig.String() {
			t.Fatalf("receipt %q, want the preview's event %s", rc.MessageID, orig)
		}
		t.Logf("preview: 1 message, %d partial m.replace edits, final edit, %d typing calls", partial, len(typing))
	})

	t.Run("sync taken over by a second ingest replica", func(t *testing.T) {
		matrixTakeover(t, hs, alice, model)
	})
}

func firstNumber(t *testing.T, s string) int {
	var n int
	i := strings.Index(s, "number ")
	if i < 0 {
		t.Fatalf("no number in %.40q", s)
	}
	fmt.Sscanf(s[i+7:], "%d", &n)
	return n
}

// matrixTakeover runs two ingest replicas for one bot next to a core process: only one syncs
// at a time; when it is killed, the other resumes from the stored since token, and messages
// sent while nobody synced are answered once each.
func matrixTakeover(t *testing.T, hs *dendritetest.Server, alice *dendritetest.User, model *fakeopenai.Server) {
	tbot := hs.Register(t, "takeoverbot", "Takeoverbot")
	core, ingest := startTakeoverCore(t, fmt.Sprintf(`
  matrix:
    bots:
      - {id: mxt, homeserver: "%[1]s", userId: "%[2]s", accessToken: "%[3]s", preview: "off"}`, hs.URL, tbot.ID, tbot.Token), model.BaseURL())
	a := ingest("a")
	ctx := context.Background()
	kv, err := core.JS.KeyValue(ctx, events.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := kv.Get(ctx, matrix.SyncKey("mxt")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("replica a made no first sync")
		}
	}
	b := ingest("b")
	_ = b
	room := dmWith(t, alice, tbot.ID)
	if _, err := alice.Client.SendText(ctx, room, "before"); err != nil {
		t.Fatal(err)
	}
	waitEvents(t, alice.Client, room, tbot.ID, 1, 90*time.Second, bodyHas("echo: before"))

	// Kill the holder (a: it synced first): it can neither renew its lease nor ingest.
	killed := time.Now()
	a.NC.Close()
	for i := range 3 {
		if _, err := alice.Client.SendText(ctx, room, fmt.Sprintf("during %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	waitEvents(t, alice.Client, room, tbot.ID, 3, 120*time.Second, bodyHas("echo: during"))
	t.Logf("messages sent while the holder was dead answered %v after the kill", time.Since(killed).Round(time.Millisecond))
	if _, err := alice.Client.SendText(ctx, room, "after"); err != nil {
		t.Fatal(err)
	}
	waitEvents(t, alice.Client, room, tbot.ID, 1, 90*time.Second, bodyHas("echo: after"))
	time.Sleep(3 * time.Second) // a window: a doubled answer would show up now
	for _, text := range []string{"echo: before", "echo: during 0", "echo: during 1", "echo: during 2", "echo: after"} {
		n := 0
		for _, e := range roomEvents(t, alice.Client, room, tbot.ID) {
			if strings.Contains(e.Content.AsMessage().Body, text) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%q sent %d times", text, n)
		}
	}
}

// lastReceipt returns the last IM_SENT receipt of session sk.
func lastReceipt(t *testing.T, p *app.Process, sk events.SessionKey) events.Receipt {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := p.JS.Stream(ctx, events.StreamIMSent)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, events.IMSentSubject(sk)) // receipts are per chat (issue 41): im.sent.<scene>
	if err != nil {
		t.Fatalf("no receipt for %s: %v", sk, err)
	}
	var ev events.Event[events.Receipt]
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		t.Fatal(err)
	}
	return ev.Data
}

// TestMatrixFake429 runs the pipeline against matrixtest: a reply whose sends are answered
// 429 M_LIMIT_EXCEEDED twice is delivered once after egress waited retry_after_ms, with the
// same transaction id on every attempt.
func TestMatrixFake429(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline")
	}
	const botID, token, room = "@bot:" + matrixtest.ServerName, "syt_fake", "!dm:" + matrixtest.ServerName
	fake := matrixtest.New(t, botID, token)
	fake.Join(room, botID, "Bot")
	fake.Join(room, "@ann:"+matrixtest.ServerName, "Ann")
	model := fakeopenai.New(t, fakeopenai.Echo)
	dir := tempDir(t)
	p := startProc(t, fmt.Sprintf(`
dataDir: %[1]s
nats: {embedded: true, storeDir: %[1]s/nats, listen: "127.0.0.1:0", storage: memory}
im:
  matrix:
    bots:
      - {id: mxf, homeserver: "%[2]s", userId: "%[3]s", accessToken: "%[4]s", preview: "off"}
ai:
  providers:
    fake: {api: openai-completions, baseUrl: "%[5]s", apiKey: test}
  agents:
    zhin: {provider: fake, model: m1}
`, dir, fake.URL(), botID, token, model.BaseURL()), app.AllRoles)
	ctx := context.Background()
	kv, err := p.JS.KeyValue(ctx, events.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, waitMargin, func() error {
		_, err := kv.Get(ctx, matrix.SyncKey("mxf"))
		return testwait.Want(err == nil, "no first sync: %v", err)
	})
	fake.FailNext("send", 2, 429, 1000)
	fake.Text(room, "@ann:"+matrixtest.ServerName, "hello through a rate limit")
	isReply := func(c matrixtest.Call) bool {
		b, _ := c.Body["body"].(string)
		return c.Method == "PUT" && c.Txn != "" && strings.Contains(b, "echo: hello through a rate limit")
	}
	ok := fake.WaitCalls(1, 90*time.Second, func(c matrixtest.Call) bool { return isReply(c) && c.Status == 200 })
	var limited []matrixtest.Call
	for _, c := range fake.Calls() {
		if c.Status == 429 {
			limited = append(limited, c)
		}
	}
	if len(limited) != 2 || !isReply(limited[0]) || limited[0].Txn != ok[0].Txn || limited[1].Txn != ok[0].Txn {
		t.Fatalf("429s = %+v, delivered %+v: want two 429s of the same transaction before the delivery", limited, ok[0])
	}
	t.Logf("reply delivered %v after the first 429 (retry_after_ms 1000)", ok[0].Time.Sub(limited[0].Time).Round(time.Millisecond))
	time.Sleep(2 * time.Second) // a window: a second delivery would show up now
	n := 0
	for _, c := range fake.Calls() {
		if isReply(c) && c.Status == 200 {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("reply delivered %d times", n)
	}
	waitReceipt(t, p, events.SessionKey{Platform: "matrix", Bot: "mxf", Scope: "private", Scene: room})
}
