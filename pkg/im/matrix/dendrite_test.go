package matrix_test

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
	"github.com/agentbus/agentbus/pkg/im/matrix"
	"github.com/agentbus/agentbus/pkg/im/matrix/dendritetest"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
	"github.com/agentbus/agentbus/pkg/netguard"
)

// collect is a Sink that keeps what it is given.
type collect struct {
	mu   sync.Mutex
	msgs []*events.IMMessage
}

func (c *collect) Ingest(_ context.Context, m *events.IMMessage) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, m)
	return nil
}

func (c *collect) wait(t *testing.T, d time.Duration, keep func(*events.IMMessage) bool) *events.IMMessage {
	t.Helper()
	var found *events.IMMessage
	testwait.Eventually(t, d, func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, m := range c.msgs {
			if keep(m) {
				found = m
				return nil
			}
		}
		return fmt.Errorf("not among the %d messages ingested", len(c.msgs))
	})
	return found
}

func pngBytes(t testing.TB) []byte {
	img := image.NewRGBA(image.Rect(0, 0, 4, 3))
	img.Set(1, 1, color.RGBA{R: 200, A: 255})
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestDendriteAdapter runs the adapter's two halves against a real Dendrite: invites are
// joined, a DM is private and a three-member room a group, m.mentions and pills are
// mentions, a reply's fallback is dropped, an image goes through authenticated media into
// the media store, and the sender's replies (threaded, chunked, an image uploaded) arrive.
func TestDendriteAdapter(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Dendrite")
	}
	hs := dendritetest.Start(t, dendritetest.Options{})
	botU := hs.Register(t, "agentbus", "Agentbus")
	alice := hs.Register(t, "alice", "Alice")
	carol := hs.Register(t, "carol", "Carol")
	srv := natstest.New(t, natstest.WithMemoryStorage())
	nc, js := srv.Connect(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	store, err := js.ObjectStore(ctx, events.ObjectMedia)
	if err != nil {
		t.Fatal(err)
	}
	media, err := im.NewMedia(store, netguard.Config{})
	if err != nil {
		t.Fatal(err)
	}
	bot := config.MatrixBot{ID: "mx1", Homeserver: hs.URL, UserID: botU.ID.String(), AccessToken: botU.Token, Preview: "off", ChunkLimit: 200}
	sink := &collect{}
	in, err := matrix.NewInbound(matrix.InboundOptions{Bot: bot, Sink: sink, Media: media, JS: js, Owner: "t1", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = in.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	// The first sync has happened once the since token is stored.
	kv, _ := js.KeyValue(ctx, events.BucketLeases)
	testwait.Eventually(t, 0, func() error {
		_, err := kv.Get(ctx, matrix.SyncKey("mx1"))
		return testwait.Want(err == nil, "no sync token stored for mx1: %v", err)
	})

	dm, err := alice.Client.CreateRoom(ctx, &mautrix.ReqCreateRoom{Preset: "trusted_private_chat", IsDirect: true, Invite: []id.UserID{botU.ID}})
	if err != nil {
		t.Fatal(err)
	}
	group, err := alice.Client.CreateRoom(ctx, &mautrix.ReqCreateRoom{Preset: "private_chat", Name: "team", Invite: []id.UserID{botU.ID, carol.ID}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := carol.Client.JoinRoomByID(ctx, group.RoomID); err != nil {
		t.Fatal(err)
	}
	joined := func(room id.RoomID) bool {
		m, err := alice.Client.JoinedMembers(ctx, room)
		_, ok := m.Joined[botU.ID]
		return err == nil && ok
	}
	testwait.Eventually(t, 0, func() error {
		return testwait.Want(joined(dm.RoomID) && joined(group.RoomID), "the bot has not joined both rooms (dm %v, group %v)", joined(dm.RoomID), joined(group.RoomID))
	})

	hello, err := alice.Client.SendText(ctx, dm.RoomID, "hello bot")
	if err != nil {
		t.Fatal(err)
	}
	m := sink.wait(t, 60*time.Second, func(m *events.IMMessage) bool { return m.MessageID == hello.EventID.String() })
	if m.Scene.Type != "private" || m.Scene.ID != dm.RoomID.String() || m.Sender.ID != alice.ID.String() || m.Sender.Name != "Alice" ||
		m.Content.PlainText() != "hello bot" {
		t.Fatalf("DM message = %+v", m)
	}

	// A mention in the group, by m.mentions and a pill.
	pill := &event.MessageEventContent{MsgType: event.MsgText, Body: "Agentbus: what is up?",
		Format: event.FormatHTML, FormattedBody: `<a href="https://matrix.to/#/` + botU.ID.String() + `">Agentbus</a>: what is up?`,
		Mentions: &event.Mentions{UserIDs: []id.UserID{botU.ID}}}
	ment, err := alice.Client.SendMessageEvent(ctx, group.RoomID, event.EventMessage, pill)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := carol.Client.SendText(ctx, group.RoomID, "just chatting")
	if err != nil {
		t.Fatal(err)
	}
	m = sink.wait(t, 60*time.Second, func(m *events.IMMessage) bool { return m.MessageID == ment.EventID.String() })
	if m.Scene.Type != "group" || !m.MentionsBot || m.Content[0].Type != events.SegAt || m.Content[0].MentionID() != botU.ID.String() {
		t.Fatalf("group mention = %+v", m)
	}
	m = sink.wait(t, 60*time.Second, func(m *events.IMMessage) bool { return m.MessageID == plain.EventID.String() })
	if m.MentionsBot {
		t.Fatalf("a message without mention counted as one: %+v", m)
	}

	// An image through the content repository.
	img := pngBytes(t)
	up, err := alice.Client.UploadBytesWithName(ctx, img, "image/png", "dot.png")
	if err != nil {
		t.Fatal(err)
	}
	imgEvt, err := alice.Client.SendMessageEvent(ctx, dm.RoomID, event.EventMessage, &event.MessageEventContent{
		MsgType: event.MsgImage, Body: "dot.png", URL: up.ContentURI.CUString(), Info: &event.FileInfo{MimeType: "image/png", Size: len(img)}})
	if err != nil {
		t.Fatal(err)
	}
	m = sink.wait(t, 60*time.Second, func(m *events.IMMessage) bool { return m.MessageID == imgEvt.EventID.String() })
	seg := m.Content[len(m.Content)-1]
	if seg.Type != events.SegImage || seg.Str("object") == "" {
		t.Fatalf("image not stored: %+v", m.Content)
	}
	stored, err := store.GetBytes(ctx, seg.Str("object"))
	if err != nil || !bytes.Equal(stored, img) {
		t.Fatalf("stored image differs (%v)", err)
	}

	// Replies out: threaded, chunked, with an image uploaded from the media store.
	ledger, _ := im.NewLedger(ctx, js)
	sender, err := matrix.NewSender([]config.MatrixBot{bot}, nil, media, ledger, nc)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("A sentence of the long answer. ", 20) // 620 characters, limit 200
	first, err := sender.Send(ctx, events.Outbound{OutID: "turn1-0", Part: 0, Platform: "matrix", Bot: "mx1",
		Scene: events.Scene{Type: "private", ID: dm.RoomID.String()}, ReplyTo: hello.EventID.String(),
		Content: events.Segments{events.TextSeg("**bold** " + long), events.ImageSeg(seg.Str("url"))}, Final: true})
	if err != nil {
		t.Fatal(err)
	}
	// The same part again (a redelivery): the ledger stops it from being sent twice.
	again, err := sender.Send(ctx, events.Outbound{OutID: "turn1-0", Part: 0, Platform: "matrix", Bot: "mx1",
		Scene: events.Scene{Type: "private", ID: dm.RoomID.String()}, ReplyTo: hello.EventID.String(),
		Content: events.Segments{events.TextSeg("**bold** " + long), events.ImageSeg(seg.Str("url"))}, Final: true})
	if err != nil || again != first {
		t.Fatalf("resend = %q, %v; want %q", again, err, first)
	}
	// Dendrite's /messages is served by its sync API, which learns of a sent event
	// asynchronously: wait until all the parts (four texts and an image) are readable.
	msgs := botMessagesUntil(t, alice.Client, dm.RoomID, botU.ID, func(ms []*event.Event) bool { return len(ms) >= 5 })
	var texts, images int
	for _, e := range msgs {
		c := e.Content.AsMessage()
		switch c.MsgType {
		case event.MsgText:
			texts++
			if n := len([]rune(c.Body)); n > 200 {
				t.Errorf("a message of %d characters (limit 200)", n)
			}
		case event.MsgImage:
			images++
			u, _ := c.URL.Parse()
			b, err := alice.Client.DownloadBytes(ctx, u)
			if err != nil || !bytes.Equal(b, img) {
				t.Errorf("image sent differs (%v)", err)
			}
		}
	}
	if texts < 4 || images != 1 {
		t.Fatalf("bot sent %d texts and %d images, want >= 4 and 1", texts, images)
	}
	// A reply to a message in a thread goes into the thread.
	threaded, err := alice.Client.SendMessageEvent(ctx, group.RoomID, event.EventMessage, &event.MessageEventContent{MsgType: event.MsgText,
		Body: "in a thread", RelatesTo: (&event.RelatesTo{}).SetThread(ment.EventID, ment.EventID)})
	if err != nil {
		t.Fatal(err)
	}
	// The bot hears of a message by sync, once the homeserver has stored it; the send's
	// answer may come before that, and a reply to an event not yet readable goes to the
	// main timeline (threadOf). Wait as the bot would.
	testwait.Eventually(t, 0, func() error {
		if _, err := alice.Client.GetEvent(ctx, group.RoomID, threaded.EventID); err != nil {
			return fmt.Errorf("the threaded message is not readable: %w", err)
		}
		return nil
	})
	answer, err := sender.Send(ctx, events.Outbound{OutID: "turn2-0", Platform: "matrix", Bot: "mx1",
		Scene: events.Scene{Type: "group", ID: group.RoomID.String()}, ReplyTo: threaded.EventID.String(),
		Content: events.Segments{events.TextSeg("answer in the thread")}})
	if err != nil {
		t.Fatal(err)
	}
	tm := botMessagesUntil(t, alice.Client, group.RoomID, botU.ID, func(ms []*event.Event) bool {
		return len(ms) > 0 && ms[len(ms)-1].ID.String() == answer
	})
	if len(tm) != 1 || tm[0].Content.AsMessage().RelatesTo.GetThreadParent() != ment.EventID ||
		tm[0].Content.AsMessage().RelatesTo.GetNonFallbackReplyTo() != threaded.EventID {
		t.Fatalf("thread reply relates to %+v, want thread %s and reply to %s", tm[len(tm)-1].Content.AsMessage().RelatesTo, ment.EventID, threaded.EventID)
	}
	fe := msgs[0]
	if fe.ID.String() != first || fe.Content.AsMessage().RelatesTo.GetReplyTo() != hello.EventID ||
		!strings.Contains(fe.Content.AsMessage().FormattedBody, "<strong>bold</strong>") {
		t.Fatalf("first message %s = %+v, want a reply to %s with HTML", fe.ID, fe.Content.AsMessage(), hello.EventID)
	}
}

// botMessages returns the room's m.room.message events from sender, oldest first.
func botMessages(t *testing.T, c *mautrix.Client, room id.RoomID, sender id.UserID) []*event.Event {
	t.Helper()
	resp, err := c.Messages(context.Background(), room, "", "", mautrix.DirectionBackward, nil, 100)
	if err != nil {
		t.Fatal(err)
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

// botMessagesUntil polls botMessages until done accepts them (a minute at most, for a busy
// machine) and returns the last answer either way, for the caller's checks to report.
func botMessagesUntil(t *testing.T, c *mautrix.Client, room id.RoomID, sender id.UserID, done func([]*event.Event) bool) []*event.Event {
	t.Helper()
	var ms []*event.Event
	// Not testwait.Eventually: the caller reports what arrived, with its own checks.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if ms = botMessages(t, c, room, sender); done(ms) || time.Now().After(deadline) {
			return ms
		}
	}
}

// TestDendriteBacklog: a holder that stops, then 130 messages (more than one sync returns), then
// a new holder: it resumes from the stored since token, the timeline comes back limited, and
// the gap is fetched with /messages, so every message is ingested once, in order.
func TestDendriteBacklog(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Dendrite")
	}
	hs := dendritetest.Start(t, dendritetest.Options{})
	botU := hs.Register(t, "agentbus", "Agentbus")
	alice := hs.Register(t, "alice", "Alice")
	srv := natstest.New(t, natstest.WithMemoryStorage())
	_, js := srv.Connect(t)
	bot := config.MatrixBot{ID: "mx1", Homeserver: hs.URL, UserID: botU.ID.String(), AccessToken: botU.Token}
	sink := &collect{}
	run := func(owner string) (stop func()) {
		in, err := matrix.NewInbound(matrix.InboundOptions{Bot: bot, Sink: sink, JS: js, Owner: owner, TTL: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = in.Run(ctx) }()
		return func() { cancel(); <-done }
	}
	ctx := context.Background()
	stop := run("first")
	kv, _ := js.KeyValue(ctx, events.BucketLeases)
	testwait.Eventually(t, 0, func() error {
		_, err := kv.Get(ctx, matrix.SyncKey("mx1"))
		return testwait.Want(err == nil, "no sync token stored for mx1: %v", err)
	})
	dm, err := alice.Client.CreateRoom(ctx, &mautrix.ReqCreateRoom{Preset: "trusted_private_chat", IsDirect: true, Invite: []id.UserID{botU.ID}})
	if err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 0, func() error {
		m, err := alice.Client.JoinedMembers(ctx, dm.RoomID)
		_, ok := m.Joined[botU.ID]
		return testwait.Want(err == nil && ok, "the bot has not joined the DM: %v", err)
	})
	first, err := alice.Client.SendText(ctx, dm.RoomID, "before the gap")
	if err != nil {
		t.Fatal(err)
	}
	sink.wait(t, 60*time.Second, func(m *events.IMMessage) bool { return m.MessageID == first.EventID.String() })
	stop()

	const n = 130
	ids := make([]string, n)
	for i := range n {
		r, err := alice.Client.SendText(ctx, dm.RoomID, "backlog "+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = r.EventID.String()
	}
	stop = run("second")
	defer stop()
	sink.wait(t, 90*time.Second, func(m *events.IMMessage) bool { return m.MessageID == ids[n-1] })
	sink.mu.Lock()
	defer sink.mu.Unlock()
	pos := map[string][]int{}
	for i, m := range sink.msgs {
		pos[m.MessageID] = append(pos[m.MessageID], i)
	}
	last := -1
	for i, evID := range ids {
		p := pos[evID]
		if len(p) != 1 {
			t.Fatalf("backlog message %d ingested %d times", i, len(p))
		}
		if p[0] < last {
			t.Fatalf("backlog message %d out of order", i)
		}
		last = p[0]
	}
	t.Logf("%d messages sent while no replica synced: all ingested once, in order", n)
}
