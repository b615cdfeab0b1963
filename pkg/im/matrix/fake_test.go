package matrix_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
	"github.com/agentbus/agentbus/pkg/im/matrix"
	"github.com/agentbus/agentbus/pkg/im/matrix/matrixtest"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
	"github.com/agentbus/agentbus/pkg/netguard"
)

const (
	fakeBot   = "@bot:" + matrixtest.ServerName
	fakeAnn   = "@ann:" + matrixtest.ServerName
	fakeCarol = "@carol:" + matrixtest.ServerName
	fakeToken = "syt_fake_token"
)

// TestSender429 checks a send answered 429 M_LIMIT_EXCEEDED: the error asks egress to wait
// retry_after_ms and is not permanent; the retry carries the same transaction id; the reply
// threads to the message it answers.
func TestSender429(t *testing.T) {
	fake := matrixtest.New(t, fakeBot, fakeToken)
	srv := natstest.New(t, natstest.WithMemoryStorage())
	nc, js := srv.Connect(t)
	ctx := context.Background()
	ledger, err := im.NewLedger(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	bot := config.MatrixBot{ID: "m1", Homeserver: fake.URL(), UserID: fakeBot, AccessToken: fakeToken, Preview: "off"}
	s, err := matrix.NewSender([]config.MatrixBot{bot}, nil, nil, ledger, nc)
	if err != nil {
		t.Fatal(err)
	}
	out := events.Outbound{OutID: "t1-0", Part: 0, Platform: "matrix", Bot: "m1", Scene: events.Scene{Type: "group", ID: "!room:fake.test"},
		ReplyTo: "$orig", Content: events.Segments{events.TextSeg("hello")}, Final: true}
	fake.FailNext("send", 1, http.StatusTooManyRequests, 1200)
	_, err = s.Send(ctx, out)
	var e *im.Error
	if !errors.As(err, &e) || e.RetryAfter != 1200*time.Millisecond || im.IsPermanent(err) {
		t.Fatalf("429: %v (want a transient error asking for 1.2s)", err)
	}
	evID, err := s.Send(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	var sends []matrixtest.Call
	for _, c := range fake.Calls() {
		if c.Method == http.MethodPut && c.Txn != "" && c.Room == "!room:fake.test" && c.Path != "" && c.Body["body"] == "hello" {
			sends = append(sends, c)
		}
	}
	if len(sends) != 2 || sends[0].Txn != sends[1].Txn || sends[0].Status != 429 || sends[1].Status != 200 {
		t.Fatalf("sends = %+v; want a 429 then a 200 with the same transaction id", sends)
	}
	rel, _ := sends[1].Body["m.relates_to"].(map[string]any)
	irt, _ := rel["m.in_reply_to"].(map[string]any)
	if irt["event_id"] != "$orig" || evID == "" {
		t.Fatalf("reply not threaded (%v) or no event id (%q)", sends[1].Body, evID)
	}
	// A typing stop follows the final part.
	if n := len(fake.WaitCalls(1, 5*time.Second, func(c matrixtest.Call) bool {
		return c.Method == http.MethodPut && c.Body["typing"] == false
	})); n != 1 {
		t.Fatalf("%d typing stops", n)
	}
}

// TestInboundFake: the first sync skips history; own events, edits and notices are not
// ingested; an is_direct invite is joined and recorded in m.direct (so a three-member room is
// still private); media falls back to /_matrix/media/v3 on a server without authenticated
// media.
func TestInboundFake(t *testing.T) {
	fake := matrixtest.New(t, fakeBot, fakeToken)
	fake.NoAuthMedia = true
	const room, dmRoom = "!group:fake.test", "!dm:fake.test"
	fake.Join(room, fakeBot, "Bot")
	fake.Join(room, fakeAnn, "Ann")
	fake.Join(room, fakeCarol, "Carol")
	fake.Text(room, fakeAnn, "old history")
	srv := natstest.New(t, natstest.WithMemoryStorage())
	_, js := srv.Connect(t)
	ctx, cancel := context.WithCancel(context.Background())
	store, err := js.ObjectStore(ctx, events.ObjectMedia)
	if err != nil {
		t.Fatal(err)
	}
	media, err := im.NewMedia(store, netguard.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sink := &collect{}
	in, err := matrix.NewInbound(matrix.InboundOptions{Bot: config.MatrixBot{ID: "m1", Homeserver: fake.URL(), UserID: fakeBot, AccessToken: fakeToken},
		Sink: sink, Media: media, JS: js, Owner: "t", TTL: 2 * time.Second})
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

	fake.Text(room, fakeBot, "my own message")
	fake.Message(room, fakeAnn, map[string]any{"msgtype": "m.notice", "body": "a notice"})
	fake.Message(room, fakeAnn, map[string]any{"msgtype": "m.text", "body": "* fixed", "m.new_content": map[string]any{"msgtype": "m.text", "body": "fixed"},
		"m.relates_to": map[string]any{"rel_type": "m.replace", "event_id": "$ev1"}})
	img := pngBytes(t)
	mxc := fake.AddMedia(img, "image/png")
	imgID := fake.Message(room, fakeAnn, map[string]any{"msgtype": "m.image", "body": "a caption", "filename": "dot.png", "url": mxc,
		"info": map[string]any{"mimetype": "image/png", "size": len(img)}})
	// A non-mxc URL (a non-conforming client) goes through the SSRF guard, even one on the
	// homeserver's own address: only the homeserver's API is reached directly.
	ssrfID := fake.Message(room, fakeAnn, map[string]any{"msgtype": "m.image", "body": "x.png", "url": fake.URL() + "/_matrix/media/v3/download/fake.test/m1"})
	textID := fake.Text(room, fakeAnn, "last")
	m := sink.wait(t, 30*time.Second, func(m *events.IMMessage) bool { return m.MessageID == textID })
	if m.Scene.Type != "group" {
		t.Fatalf("three-member room without m.direct: scope %s", m.Scene.Type)
	}
	im1 := sink.wait(t, time.Second, func(m *events.IMMessage) bool { return m.MessageID == imgID })
	if len(im1.Content) != 2 || im1.Content[0].Str("text") != "a caption" || im1.Content[1].Str("name") != "dot.png" {
		t.Fatalf("image message = %+v", im1.Content)
	}
	b, err := store.GetBytes(ctx, im1.Content[1].Str("object"))
	if err != nil || !bytes.Equal(b, img) {
		t.Fatalf("image not stored through the legacy endpoint: %v", err)
	}
	ssrf := sink.wait(t, time.Second, func(m *events.IMMessage) bool { return m.MessageID == ssrfID })
	if seg := ssrf.Content[len(ssrf.Content)-1]; seg.Str("object") != "" || !strings.Contains(seg.Str("error"), "blocked") {
		t.Fatalf("a URL off the homeserver was fetched: %+v", seg)
	}
	sink.mu.Lock()
	n := len(sink.msgs)
	sink.mu.Unlock()
	if n != 3 {
		t.Fatalf("ingested %d messages, want 3 (history, own, notice and edit skipped)", n)
	}

	fake.Join(dmRoom, fakeAnn, "Ann")
	fake.Join(dmRoom, fakeCarol, "Carol") // three members, but the invite says direct
	fake.Invite(dmRoom, fakeAnn, true)
	fake.WaitCalls(1, 30*time.Second, func(c matrixtest.Call) bool {
		return c.Room == dmRoom && c.Path == "/_matrix/client/v3/rooms/"+dmRoom+"/join"
	})
	fake.WaitCalls(1, 30*time.Second, func(c matrixtest.Call) bool { return c.Method == http.MethodPut && c.Body[fakeAnn] != nil })
	dmID := fake.Text(dmRoom, fakeAnn, "in the DM")
	m = sink.wait(t, 30*time.Second, func(m *events.IMMessage) bool { return m.MessageID == dmID })
	if m.Scene.Type != "private" {
		t.Fatalf("is_direct room: scope %s", m.Scene.Type)
	}
}

// TestSenderThread: a reply to a message in a thread goes into that thread (m.thread with a
// real m.in_reply_to), and the part's later messages follow it there (is_falling_back).
func TestSenderThread(t *testing.T) {
	fake := matrixtest.New(t, fakeBot, fakeToken)
	const room = "!room:fake.test"
	root := fake.Text(room, fakeAnn, "thread root")
	inThread := fake.Message(room, fakeAnn, map[string]any{"msgtype": "m.text", "body": "in the thread",
		"m.relates_to": map[string]any{"rel_type": "m.thread", "event_id": root, "is_falling_back": true, "m.in_reply_to": map[string]any{"event_id": root}}})
	srv := natstest.New(t, natstest.WithMemoryStorage())
	nc, js := srv.Connect(t)
	ctx := context.Background()
	ledger, _ := im.NewLedger(ctx, js)
	bot := config.MatrixBot{ID: "m1", Homeserver: fake.URL(), UserID: fakeBot, AccessToken: fakeToken, Preview: "off", ChunkLimit: 100}
	s, err := matrix.NewSender([]config.MatrixBot{bot}, nil, nil, ledger, nc)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("One more sentence here. ", 10) // 240 characters: 3 messages
	if _, err := s.Send(ctx, events.Outbound{OutID: "t2-0", Platform: "matrix", Bot: "m1", Scene: events.Scene{Type: "group", ID: room},
		ReplyTo: inThread, Content: events.Segments{events.TextSeg(long)}}); err != nil {
		t.Fatal(err)
	}
	sent := fake.Sent(room)
	if len(sent) < 3 {
		t.Fatalf("%d messages", len(sent))
	}
	for i, body := range sent {
		rel, _ := body["m.relates_to"].(map[string]any)
		irt, _ := rel["m.in_reply_to"].(map[string]any)
		fallback, _ := rel["is_falling_back"].(bool)
		if rel["rel_type"] != "m.thread" || rel["event_id"] != root || irt["event_id"] == nil || fallback != (i > 0) {
			t.Fatalf("message %d relates to %v; want the thread of %s", i, rel, root)
		}
		if i == 0 && irt["event_id"] != inThread {
			t.Fatalf("first message replies to %v, want %s", irt["event_id"], inThread)
		}
	}
}

// TestInboundStaleToken: a stored since token the server refuses (400) is dropped for a
// fresh first sync instead of being retried forever.
func TestInboundStaleToken(t *testing.T) {
	fake := matrixtest.New(t, fakeBot, fakeToken)
	const room = "!room:fake.test"
	fake.Join(room, fakeBot, "Bot")
	fake.Join(room, fakeAnn, "Ann")
	srv := natstest.New(t, natstest.WithMemoryStorage())
	_, js := srv.Connect(t)
	ctx, cancel := context.WithCancel(context.Background())
	kv, _ := js.KeyValue(ctx, events.BucketLeases)
	if _, err := kv.Put(ctx, matrix.SyncKey("m1"), []byte(`{"since":"token-of-a-reset-server"}`)); err != nil {
		t.Fatal(err)
	}
	sink := &collect{}
	in, err := matrix.NewInbound(matrix.InboundOptions{Bot: config.MatrixBot{ID: "m1", Homeserver: fake.URL(), UserID: fakeBot, AccessToken: fakeToken},
		Sink: sink, JS: js, Owner: "t", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = in.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	testwait.Eventually(t, 0, func() error {
		e, err := kv.Get(ctx, matrix.SyncKey("m1"))
		return testwait.Want(err == nil && strings.Contains(string(e.Value()), `"since":"s`), "no since token stored for m1: %v", err)
	})
	id := fake.Text(room, fakeAnn, "after the reset")
	sink.wait(t, 30*time.Second, func(m *events.IMMessage) bool { return m.MessageID == id })
}
