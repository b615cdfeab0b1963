package transcript

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

func publish(t testing.TB, js jetstream.JetStream, subj string, ev events.Any, msgID string) {
	t.Helper()
	m, err := events.NewMsg(subj, ev)
	if err != nil {
		t.Fatal(err)
	}
	if msgID != "" {
		m.Header.Set(nats.MsgIdHdr, msgID)
	}
	if _, err := js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

func inbound(id, text string, segs ...events.Segment) events.IMMessage {
	if text != "" {
		segs = append([]events.Segment{events.TextSeg(text)}, segs...)
	}
	return events.IMMessage{Platform: "qq", Bot: "bot1", MessageID: id, Scene: events.Scene{Type: "group", ID: "g1"},
		Sender: events.Sender{ID: "u1", Name: "Alice", Roles: []string{"member"}}, Content: segs, Time: 1_700_000_000_000}
}

func waitCount(t *testing.T, db *DB, want int) {
	t.Helper()
	testwait.Eventually(t, 0, func() error {
		n, err := db.Count(context.Background(), sceneA)
		if err != nil {
			t.Fatal(err)
		}
		return testwait.Want(n == want, "count %d, want %d", n, want)
	})
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestArchiver(t *testing.T) {
	ctx := context.Background()
	srv := natstest.New(t)
	js := srv.JS
	db := openTemp(t)

	in := func(m events.IMMessage) { publish(t, js, events.IMInSubject(m.SessionKey()), events.New(m), "") }
	in(inbound("m1", "hello archive"))
	in(inbound("m2", "", events.ImageSeg("https://x/cat.png")))                  // media only: stored, empty body
	in(inbound("m3", "", events.TextSeg("")))                                    // nothing: skipped
	in(inbound("m4", "look", events.AtSeg("bot1", "Bot"), events.ImageSeg("u"))) // text + mention + media
	// The same platform message published twice under different msg ids (a replay by a third
	// party): the stream keeps both, the archive one.
	dup := inbound("m1", "hello archive")
	publish(t, js, events.IMInSubject(dup.SessionKey()), events.New(dup), "other-id")
	receipt := events.Receipt{OutID: "turn1-0", Turn: "turn1", Platform: "qq", Bot: "bot1", Scene: events.Scene{Type: "group", ID: "g1"},
		MessageID: "p-99", Time: 1_700_000_001_000, Content: events.Segments{events.TextSeg("Hi Alice!")}, Sender: events.Sender{ID: "bot1", Name: "Bot"}}
	publish(t, js, events.IMSentSubject(receipt.SessionKey()), events.New(receipt), "")
	// Garbage on IM_IN is dead-lettered with the reason.
	if _, err := js.Publish(ctx, "im.in.qq.bot1.group.g1", []byte(`{"type":"im.message","v":1}`)); err != nil {
		t.Fatal(err)
	}

	a, err := RunArchiver(ctx, js, db, ArchiverOptions{Node: "n1", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	waitCount(t, db, 4)
	rows, err := db.Search(ctx, Query{Scene: sceneA, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Row{}
	for _, r := range rows {
		got[string(r.Direction)+"/"+r.MessageID] = r
	}
	if r := got["outbound/p-99"]; r.Body != "Hi Alice!" || r.SenderName != "Bot" || r.Time != receipt.Time {
		t.Fatalf("outbound row: %+v", r)
	}
	if r := got["inbound/m2"]; r.Body != "" || r.MediaJSON == "" {
		t.Fatalf("media-only row: %+v", r)
	}
	if r := got["inbound/m4"]; r.Body != "look@Bot " || r.SenderRole != "member" || r.SceneType != "group" {
		t.Fatalf("mixed row: %+v", r)
	}
	if _, ok := got["inbound/m3"]; ok {
		t.Fatal("empty message archived")
	}

	// The dead letter names the problem.
	if dl := archiverDeadLetter(t, js); dl.Stream != events.StreamIMIn || dl.Error == "" {
		t.Fatalf("dead letter %+v", dl)
	}
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}

	// Everything redelivered (consumers reset, as after losing their state): still one row each.
	for _, d := range []string{"transcripts-n1-in", "transcripts-n1-sent"} {
		s := events.StreamIMIn
		if d == "transcripts-n1-sent" {
			s = events.StreamIMSent
		}
		if err := js.DeleteConsumer(ctx, s, d); err != nil {
			t.Fatal(err)
		}
	}
	a, err = RunArchiver(ctx, js, db, ArchiverOptions{Node: "n1", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	in(inbound("m5", "after restart"))
	waitCount(t, db, 5)
	time.Sleep(200 * time.Millisecond) // give a duplicate the chance to show up
	waitCount(t, db, 5)
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{events.StreamIMIn, events.StreamIMSent} {
		info, err := js.Consumer(ctx, c, map[string]string{events.StreamIMIn: "transcripts-n1-in", events.StreamIMSent: "transcripts-n1-sent"}[c])
		if err != nil {
			t.Fatal(err)
		}
		if ci := info.CachedInfo(); ci.NumAckPending != 0 {
			t.Fatalf("%s: %d unacked", c, ci.NumAckPending)
		}
	}
	if _, err := RunArchiver(ctx, js, db, ArchiverOptions{Node: "bad.name"}); err == nil {
		t.Fatal("accepted a node name with a dot")
	}
}

// TestArchiverInboxMessages: since issue 40 a message that reaches its session is stored only
// inside its inbox event (SESSION_IN). The archiver makes a row of every inbox event that
// carries an inbound message, once per message (a dual-mode message has two events), skips
// the events that carry none (a reminder) and a fork's copies, and dead-letters nothing there
// (an inbox event is the session actor's to judge).
func TestArchiverInboxMessages(t *testing.T) {
	ctx := context.Background()
	srv := natstest.New(t)
	js := srv.JS
	db := openTemp(t)
	sk := inbound("x", "").SessionKey()
	inbox := func(ev events.Any) { publish(t, js, events.AgentInSubject(sk), ev, "") }

	inbox(events.New(events.UserMessage{Message: inbound("u1", "@bot what time is it"), Text: "what time is it"}))
	inbox(events.New(events.Listen{Message: inbound("l1", "just chatting")}))
	cmd := inbound("c1", "/model gpt")
	inbox(events.New(events.Command{Name: "model", Args: []string{"gpt"}, Message: &cmd}))
	inbox(events.New(events.UserMessage{Message: cmd, Text: "/model gpt"})) // dual mode: the same message again
	steer := inbound("s1", "/steer shorter")
	inbox(events.New(events.Steer{Text: "shorter", Sender: steer.Sender, Message: &steer}))
	inbox(events.New(events.Scheduled{ScheduleID: "r1", Text: "stand-up", CreatedBy: events.Sender{ID: "u1"}}))
	fork := inbound("f1", "forked")
	fork.Platform = events.PlatformFork
	inbox(events.New(events.UserMessage{Message: fork}))
	if _, err := js.Publish(ctx, events.AgentInSubject(sk), []byte(`{"type":"inbox.user_message","v":1}`)); err != nil {
		t.Fatal(err)
	}
	// A message no session got is on IM_IN, as before.
	ign := inbound("i1", "!ignored")
	publish(t, js, events.IMInSubject(ign.SessionKey()), events.New(ign), "")

	a, err := RunArchiver(ctx, js, db, ArchiverOptions{Node: "n1", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	waitCount(t, db, 5)
	rows, err := db.Search(ctx, Query{Scene: sceneA, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range rows {
		got[r.MessageID] = r.Body
	}
	want := map[string]string{"u1": "@bot what time is it", "l1": "just chatting", "c1": "/model gpt", "s1": "/steer shorter", "i1": "!ignored"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := js.Consumer(ctx, events.StreamSessionIn, "transcripts-n1-inbox")
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.AckFloor.Stream == 8 && info.NumAckPending == 0 {
			break // every inbox event handled, the undecodable one acked too
		}
		if time.Now().After(deadline) {
			t.Fatalf("inbox consumer: ack floor %d, %d pending; want 8, 0", info.AckFloor.Stream, info.NumAckPending)
		}
		time.Sleep(20 * time.Millisecond)
	}
	dlq, err := js.Stream(ctx, events.StreamDeadLetters)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := dlq.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Fatalf("dead letters: %v %v, want none", info, err)
	}
}

func TestArchiverRetention(t *testing.T) {
	ctx := context.Background()
	srv := natstest.New(t)
	db := openTemp(t)
	for i := 0; i < 5; i++ {
		m := inbound(fmt.Sprint("r", i), fmt.Sprint("msg ", i))
		m.Time = time.Now().UnixMilli() + int64(i)
		publish(t, srv.JS, events.IMInSubject(m.SessionKey()), events.New(m), "")
	}
	a, err := RunArchiver(ctx, srv.JS, db, ArchiverOptions{Node: "ret", Logger: quiet,
		Retention: Retention{MaxRowsPerScene: 2}, PruneEvery: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	// All five arrive, the pruner keeps the newest two.
	testwait.Eventually(t, 0, func() error {
		rows, _ := db.Search(ctx, Query{Scene: sceneA, Limit: 10})
		return testwait.Want(len(rows) == 2 && rows[0].Body == "msg 4" && rows[1].Body == "msg 3", "kept %q", bodies(rows))
	})
}

// A message that decodes but makes a row the archive rejects is dead-lettered alone: the rows
// written in the same transaction are stored, not redelivered with it forever.
func TestArchiverBadRowAlone(t *testing.T) {
	ctx := context.Background()
	srv := natstest.New(t)
	db := openTemp(t)
	in := func(m events.IMMessage) { publish(t, srv.JS, events.IMInSubject(m.SessionKey()), events.New(m), "") }
	in(inbound("good1", "before"))
	bad := inbound("bad", "unit separator in the scene id")
	bad.Scene.ID = "g\x1f1" // a valid event, but not a valid archive key
	in(bad)
	in(inbound("good2", "after"))
	// Everything is already there, so one batch (one transaction) holds all three.
	a, err := RunArchiver(ctx, srv.JS, db, ArchiverOptions{Node: "bad", Logger: quiet, MaxWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	waitCount(t, db, 2)
	if dl := archiverDeadLetter(t, srv.JS); !strings.Contains(dl.Error, "unit separator") {
		t.Fatalf("dead letter %+v", dl)
	}
}

// TestArchiverThinBatches: a batch spread over many chats with a message or two each keeps
// gathering for ThinWait; one of few chats, or of many chats with several messages each, is
// written after MaxWait as before.
func TestArchiverThinBatches(t *testing.T) {
	cases := []struct {
		name           string
		scenes, perOne int
		receipts       bool // IM_SENT receipts, one subject per part, instead of IM_IN messages
		thin           bool
	}{
		{"few chats", 10, 1, false, false},
		{"few chats, many receipts", 10, 30, true, false},
		{"many chats, several messages each", ThinScenes, ThinRows, false, false},
		{"many chats, one message each", ThinScenes + 44, 1, false, true},
		{"many chats, one receipt each", ThinScenes + 44, 1, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			srv := natstest.New(t)
			db := openTemp(t)
			want := tc.scenes * tc.perOne
			for i := range tc.perOne {
				for s := range tc.scenes {
					id, scene := fmt.Sprintf("m%d-%d", s, i), events.Scene{Type: "group", ID: fmt.Sprintf("g%d", s)}
					if tc.receipts {
						r := events.Receipt{OutID: id, Turn: "t" + id, Platform: "qq", Bot: "bot1", Scene: scene, MessageID: "p-" + id,
							Time: 1_700_000_001_000, Content: events.Segments{events.TextSeg("hi")}, Sender: events.Sender{ID: "bot1"}}
						publish(t, srv.JS, events.IMSentPartSubject(r.SessionKey(), r.OutID), events.New(r), "")
						continue
					}
					m := inbound(id, "hello")
					m.Scene = scene
					publish(t, srv.JS, events.IMInSubject(m.SessionKey()), events.New(m), "")
				}
			}
			count := func() int {
				n := 0
				for s := range tc.scenes {
					c, err := db.Count(ctx, Scene{Platform: "qq", BotID: "bot1", SceneID: fmt.Sprintf("g%d", s)})
					if err != nil {
						t.Fatal(err)
					}
					n += c
				}
				return n
			}
			// ThinWait an hour: a thin batch is written only by Stop, which writes what it holds.
			a, err := RunArchiver(ctx, srv.JS, db, ArchiverOptions{Node: "n1", Logger: quiet,
				MaxWait: 100 * time.Millisecond, ThinWait: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Stop()
			if !tc.thin {
				testwait.Eventually(t, 0, func() error { return testwait.Want(count() == want, "%d of %d rows archived", count(), want) })
				return
			}
			// Every message handed to the writer and none acked: the batch is being gathered.
			stream, durable := events.StreamIMIn, "transcripts-n1-in"
			if tc.receipts {
				stream, durable = events.StreamIMSent, "transcripts-n1-sent"
			}
			cons, err := srv.JS.Consumer(ctx, stream, durable)
			if err != nil {
				t.Fatal(err)
			}
			testwait.Eventually(t, 0, func() error {
				info, err := cons.Info(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return testwait.Want(info.NumAckPending == want && info.NumPending == 0,
					"%d delivered and unacked, %d pending; want %d and 0", info.NumAckPending, info.NumPending, want)
			})
			time.Sleep(time.Second) // ten MaxWaits
			if n := count(); n != 0 {
				t.Fatalf("%d rows of a thin batch written before ThinWait", n)
			}
			a.Stop()
			if n := count(); n != want {
				t.Fatalf("after Stop: %d rows, want %d", n, want)
			}
		})
	}
}

// TestArchiverReceiptBatches: a batch of receipts (issue 40) is one outbound row per part, in
// each part's own chat, next to plain receipts and those of the per-part layout; a batch with
// one invalid receipt is dead-lettered whole, and the rows of the other messages still come.
func TestArchiverReceiptBatches(t *testing.T) {
	ctx := context.Background()
	js := natstest.New(t).JS
	db := openTemp(t)
	rcpt := func(out, scene, platMsg, text string) events.Receipt {
		return events.Receipt{OutID: out, Platform: "qq", Bot: "bot1", Scene: events.Scene{Type: "group", ID: scene},
			MessageID: platMsg, Time: 1_700_000_002_000, Content: events.Segments{events.TextSeg(text)}, Sender: events.Sender{ID: "bot1", Name: "Bot"}}
	}
	batch := events.ReceiptBatch{Receipts: []events.Receipt{
		rcpt("t10-0", "g1", "p-10", "first of the batch"),
		rcpt("t11-0", "g2", "p-11", "another chat"),
		rcpt("t12-1", "g1", "p-12", "third"),
	}}
	publish(t, js, events.IMSentBatchSubject(0), events.New(batch), "")
	plain := rcpt("t13-0", "g1", "p-13", "alone")
	publish(t, js, events.IMSentSubject(plain.SessionKey()), events.New(plain), "")
	old := rcpt("t14-0", "g1", "p-14", "per-part layout")
	publish(t, js, events.IMSentPartSubject(old.SessionKey(), old.OutID), events.New(old), "")
	// A batch whose second receipt has no platform message id: the whole message is dead-lettered.
	bad := events.ReceiptBatch{Receipts: []events.Receipt{rcpt("t15-0", "g1", "p-15", "ok"), rcpt("t16-0", "g1", "", "bad")}}
	m, err := events.NewMsg(events.IMSentBatchSubject(0), events.New(events.ReceiptBatch{Receipts: bad.Receipts[:1]}))
	if err != nil {
		t.Fatal(err)
	}
	// NewMsg validates; the bad body is written by hand, as a broken writer would.
	m.Data = []byte(strings.Replace(string(m.Data), `]}`, `,{"outId":"t16-0","platform":"qq","bot":"bot1","scene":{"type":"group","id":"g1"},"messageId":"","time":1,"sender":{"id":"bot1"}}]}`, 1))
	m.Header.Set(nats.MsgIdHdr, "bad-batch")
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}

	a, err := RunArchiver(ctx, js, db, ArchiverOptions{Node: "n1", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	sceneB := Scene{Platform: "qq", BotID: "bot1", SceneID: "g2"}
	for _, tc := range []struct {
		scene Scene
		want  map[string]string // platform message id -> body
	}{
		{sceneA, map[string]string{"p-10": "first of the batch", "p-12": "third", "p-13": "alone", "p-14": "per-part layout"}},
		{sceneB, map[string]string{"p-11": "another chat"}},
	} {
		testwait.Eventually(t, 0, func() error {
			n, err := db.Count(ctx, tc.scene)
			if err != nil {
				t.Fatal(err)
			}
			return testwait.Want(n == len(tc.want), "%v: %d rows, want %d", tc.scene, n, len(tc.want))
		})
		rows, err := db.Search(ctx, Query{Scene: tc.scene, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if body, ok := tc.want[r.MessageID]; !ok || r.Body != body || r.Direction != Outbound || r.SenderName != "Bot" {
				t.Errorf("%v: unexpected row %+v", tc.scene, r)
			}
		}
	}
	if dl := archiverDeadLetter(t, js); dl.Stream != events.StreamIMSent {
		t.Fatalf("dead letter %+v", dl)
	}
	if n, err := db.Count(ctx, sceneA); err != nil || n != 4 {
		t.Fatalf("%d rows in g1 (%v): the bad batch's valid receipt must not be archived alone", n, err)
	}
}

// archiverDeadLetter waits for the archiver's last dead letter of an invalid message and
// returns it.
func archiverDeadLetter(t *testing.T, js jetstream.JetStream) events.DeadLetter {
	t.Helper()
	ctx := context.Background()
	dlq, err := js.Stream(ctx, events.StreamDeadLetters)
	if err != nil {
		t.Fatal(err)
	}
	var ev events.Event[events.DeadLetter]
	testwait.Eventually(t, 0, func() error {
		dl, err := dlq.GetLastMsgForSubject(ctx, events.DeadLetterSubject("archiver", "invalid"))
		if err != nil {
			return fmt.Errorf("no dead letter: %w", err)
		}
		if err := events.Unmarshal(dl.Data, &ev); err != nil {
			t.Fatalf("dead letter: %v", err)
		}
		return nil
	})
	return ev.Data
}
