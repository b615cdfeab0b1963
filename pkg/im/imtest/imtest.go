// Package imtest is the conformance suite every IM platform passes (the native adapters,
// webhook and console alike), shaped like Watermill's pubsub/tests.TestPubSub: Run takes an
// Adapter (the platform's wire fake behind a small Wire interface, and the Features it has)
// and a Start function that runs the whole agentbus pipeline against it, and runs every test
// the Features allow.
//
// The suite tests through real parts only: each Wire is a real HTTP or WebSocket server
// speaking the platform's own format (pkg/im/<platform>/<platform>test), the pipeline is a
// real embedded NATS server with every role running (the caller's Start, pkg/app in its
// tests: this package must not import the composition root), and the model is
// internal/fakeopenai. What is specific to one platform (formatting, previews edited in
// place, connection takeovers, rate-limit answers in the platform's own shape, webhook modes)
// stays in that platform's tests; what every platform must do is here.
package imtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

// Features turns tests on and off: what the platform can do.
type Features struct {
	// Groups: the platform has group scenes, where a message that does not mention the bot is
	// not answered and one that does is.
	Groups bool
	// Commands: "@bot /whoami" in a group runs the command and never reaches the model
	// (issue 37). Needs Groups.
	Commands bool
	// Threads: a reply quotes or threads the message it answers (Out.ReplyTo).
	Threads bool
	// ChunkLimit is the longest message the platform takes, in characters; a long reply must
	// arrive whole in messages no longer than that. 0: the long reply is only checked whole.
	ChunkLimit int
	// MediaIn: an image sent to the bot is stored in the media object store and referenced
	// from IM_IN. MediaOut: a media:// image in a reply reaches the platform as bytes.
	MediaIn, MediaOut bool
	// Redelivery: the platform can deliver one message twice (same id); it is answered once.
	Redelivery bool
	// Masters: the bot's configured masters (Adapter.Master) get the master role; Everyone
	// says every user is a master (the console: whoever reaches the bus is the operator).
	Masters, EveryoneMaster bool
	// RetryAfter: the platform rate-limits with HTTP 429 and a Retry-After; a send it refused
	// so is delivered after the pause, once. The Wire implements RateLimited.
	RetryAfter bool
	// UnknownBot: the platform has configured bots, so an outbound for a bot it does not know
	// is dead-lettered with reason "unknown_bot".
	UnknownBot bool
}

// Msg is a message the suite has the platform deliver to the bot.
type Msg struct {
	// Scene is the private chat (user) or group id: the session key's scene.
	Scene string
	Group bool
	User  string
	Text  string
	// Mention addresses the bot the platform's way (an at segment, <@id>, a pill).
	Mention bool
	// Image is attached as a picture (Features.MediaIn).
	Image []byte
	// ID is the platform message id to deliver again (Features.Redelivery); "" makes a new one.
	ID string
}

// Out is a message the bot sent.
type Out struct {
	Text string
	// ReplyTo is the platform message id it answers or threads under ("" none).
	ReplyTo string
	// Image holds the bytes of a picture it carried.
	Image []byte
}

// Wire is one platform's wire fake as the suite drives it.
type Wire interface {
	// IM is the YAML block under "im:" that configures Adapter.Bot against the fake.
	IM() string
	// Attach is called once the pipeline runs, before any Send (for fakes that must reach
	// the pipeline: a webhook caller, a console client, a connection to wait for).
	Attach(t *testing.T, p Pipeline)
	// Scene is the session key's scene of m (a platform's own id for the suite's scene).
	Scene(m Msg) string
	// Send delivers m the platform's way and returns the platform message id ingest sees.
	Send(t *testing.T, m Msg) string
	// Sent returns what the bot sent to scene (a Scene result) so far, in order.
	Sent(scene string) []Out
}

// RateLimited is implemented by wires of platforms with Features.RetryAfter.
type RateLimited interface {
	// LimitNextSend makes the platform answer the bot's next send with 429 and a Retry-After
	// of about a second.
	LimitNextSend()
	// Limited counts the sends the platform has answered with 429.
	Limited() int
}

// MediaSource is implemented by wires of platforms that serve an inbound image at a URL of
// their own, which the adapter keeps beside the stored copy (segment field "sourceUrl"), so
// that the original can be found again. The suite checks it with Features.MediaIn.
type MediaSource interface {
	// ImageURL returns the URL the platform served the image of message id (a Send result) at.
	ImageURL(id string) string
}

// Adapter is a platform under test.
type Adapter struct {
	// Platform and Bot name the session keys (platform:bot:scope:scene).
	Platform, Bot string
	// Master is a user configured as a master of Bot (Features.Masters).
	Master string
	// Secrets are credentials of the bot (tokens) that must never reach IM_IN, not even in a
	// media URL.
	Secrets  []string
	Features Features
	// New starts the platform's wire fake(s) for one run of the suite.
	New func(t *testing.T) Wire
}

// Pipeline is the running agentbus the suite tests through.
type Pipeline struct {
	NC *nats.Conn
	JS jetstream.JetStream
	// WebhookURL is the base URL of ingest's HTTP listener ("" when it has none).
	WebhookURL string
}

// Start runs the pipeline (all roles, embedded NATS) with im as the block under "im:" and the
// model at modelURL (an openai-completions endpoint); it stops when t ends.
type Start func(t *testing.T, im, modelURL string) Pipeline

// Wait bounds every wait of the suite: a pipeline on a loaded machine is slow.
const Wait = 90 * time.Second

// MediaObject is the media store object the model answers "picture" with (Features.MediaOut).
const MediaObject = "imtest/red.png"

// LongReply is the model's answer to "long": about 11,000 characters.
var LongReply = func() string {
	var b strings.Builder
	for i := range 300 {
		fmt.Fprintf(&b, "Sentence number %d of a long answer. ", i)
	}
	return b.String()
}()

func script(r *fakeopenai.Request) fakeopenai.Reply {
	last := r.LastUser()
	switch {
	case strings.Contains(last, "long answer"):
		return fakeopenai.Reply{Text: LongReply}
	case strings.Contains(last, "picture please"):
		return fakeopenai.Reply{Text: "Here it is:\n\n![red](" + im.MediaScheme + MediaObject + ")"}
	}
	return fakeopenai.Echo(r)
}

// PNG is a small valid image.
func PNG(t testing.TB) []byte {
	img := image.NewRGBA(image.Rect(0, 0, 4, 4))
	img.Set(1, 1, color.RGBA{R: 255, A: 255})
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Run runs the suite against a, on one pipeline started with start.
func Run(t *testing.T, a Adapter, start Start) {
	if testing.Short() {
		t.Skip("runs the pipeline")
	}
	model := fakeopenai.New(t, script)
	w := a.New(t)
	p := start(t, w.IM(), model.BaseURL())
	w.Attach(t, p)
	s := &suite{a: a, w: w, p: p, model: model}
	f := a.Features
	ctx := context.Background()
	if f.MediaOut {
		store, err := p.JS.ObjectStore(ctx, events.ObjectMedia)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Put(ctx, jetstream.ObjectMeta{Name: MediaObject, Headers: nats.Header{"Content-Type": []string{"image/png"}}}, bytes.NewReader(PNG(t))); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("private message answered", s.private)
	if f.Groups {
		t.Run("group: mention answered, plain message not", s.group)
	}
	if f.Commands {
		t.Run("group: command after an @ of the bot", s.command)
	}
	t.Run("long reply arrives whole", s.long)
	if f.MediaIn {
		t.Run("image in, stored as a reference", s.mediaIn)
	}
	if f.MediaOut {
		t.Run("image out", s.mediaOut)
	}
	if f.Redelivery {
		t.Run("redelivered message answered once", s.redelivery)
	}
	if f.Masters || f.EveryoneMaster {
		t.Run("master role", s.master)
	}
	if f.RetryAfter {
		t.Run("429 with Retry-After honoured", s.retryAfter)
	}
	if f.UnknownBot {
		t.Run("unknown bot dead-lettered as unknown_bot", s.unknownBot)
	}
}

type suite struct {
	a     Adapter
	w     Wire
	p     Pipeline
	model *fakeopenai.Server
}

func (s *suite) sk(m Msg) events.SessionKey {
	scope := events.ScopePrivate
	if m.Group {
		scope = events.ScopeGroup
	}
	return events.SessionKey{Platform: s.a.Platform, Bot: s.a.Bot, Scope: scope, Scene: s.w.Scene(m)}
}

// sent waits until the bot has sent at least n messages to scene whose text has want (want ""
// waits for messages carrying an image).
func (s *suite) sent(t *testing.T, scene, want string, n int) []Out {
	t.Helper()
	var got []Out
	testwait.Eventually(t, Wait, func() error {
		got = got[:0]
		for _, o := range s.w.Sent(scene) {
			if (want != "" && strings.Contains(o.Text, want)) || (want == "" && len(o.Image) > 0) {
				got = append(got, o)
			}
		}
		if len(got) < n {
			return fmt.Errorf("%d of %d messages with %q in %s; all sent there: %+v", len(got), n, want, scene, s.w.Sent(scene))
		}
		return nil
	})
	return got
}

// imIn returns the last inbound message of sk as the bus stores it (im.LastInbound: IM_IN, or
// inside its session inbox event since issue 40).
func (s *suite) imIn(t *testing.T, sk events.SessionKey) events.IMMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, ok := im.LastInbound(ctx, s.p.JS, sk)
	if !ok {
		t.Fatalf("no inbound message of %s on the bus", sk)
	}
	return m
}

func (s *suite) private(t *testing.T) {
	m := Msg{Scene: "41", User: "41", Text: "hello there"}
	id := s.w.Send(t, m)
	o := s.sent(t, s.w.Scene(m), "echo: hello there", 1)[0]
	if s.a.Features.Threads && o.ReplyTo != id {
		t.Fatalf("reply %+v does not answer message %s", o, id)
	}
	in := s.imIn(t, s.sk(m))
	if in.MessageID != id || in.Sender.ID == "" || in.Content.PlainText() != m.Text {
		t.Fatalf("inbound message on the bus = %+v, want message %s saying %q", in, id, m.Text)
	}
}

func (s *suite) group(t *testing.T) {
	plain := Msg{Scene: "500", Group: true, User: "43", Text: "just chatting"}
	s.w.Send(t, plain)
	m := Msg{Scene: "500", Group: true, User: "44", Text: "what time is it", Mention: true}
	id := s.w.Send(t, m)
	o := s.sent(t, s.w.Scene(m), "what time is it", 1)[0]
	if s.a.Features.Threads && o.ReplyTo != id {
		t.Fatalf("group reply %+v does not answer message %s", o, id)
	}
	in := s.imIn(t, s.sk(m))
	if !in.MentionsBot || in.MessageID != id {
		t.Fatalf("mention not recognised: %+v", in)
	}
	// The plain message came first; by now its turn would have answered it. The sleep is a
	// margin for an answer still on its way to the platform.
	time.Sleep(2 * time.Second)
	for _, o := range s.w.Sent(s.w.Scene(m)) {
		if strings.Contains(o.Text, "just chatting") {
			t.Fatalf("answered a group message without a mention: %+v", o)
		}
	}
}

func (s *suite) command(t *testing.T) {
	before := len(s.model.Requests())
	m := Msg{Scene: "510", Group: true, User: "47", Text: "/whoami", Mention: true}
	s.w.Send(t, m)
	s.sent(t, s.w.Scene(m), "You are ", 1)
	if s.a.Features.Masters {
		// A command that changes the group's conversation, run by someone who may (a master):
		// the reset command answers, and the model is not asked.
		reset := Msg{Scene: "511", Group: true, User: s.a.Master, Text: "/reset", Mention: true}
		s.w.Send(t, reset)
		s.sent(t, s.w.Scene(reset), "Session reset", 1)
	}
	for _, r := range s.model.Requests()[before:] {
		if last := r.LastUser(); strings.Contains(last, "/whoami") || strings.Contains(last, "/reset") {
			t.Fatalf("a command reached the model as chat: %q", last)
		}
	}
}

func (s *suite) long(t *testing.T) {
	m := Msg{Scene: "46", User: "46", Text: "a long answer please"}
	s.w.Send(t, m)
	var total int
	testwait.Eventually(t, Wait, func() error {
		var b strings.Builder
		for _, o := range s.w.Sent(s.w.Scene(m)) {
			if limit := s.a.Features.ChunkLimit; limit > 0 && len([]rune(o.Text)) > limit {
				return fmt.Errorf("message of %d characters over the limit %d", len([]rune(o.Text)), limit)
			}
			b.WriteString(o.Text)
		}
		total = len([]rune(b.String()))
		if !strings.Contains(squash(b.String()), squash("Sentence number 299 of a long answer.")) {
			return fmt.Errorf("%d characters arrived, not yet the last sentence", total)
		}
		return nil
	})
	if total < len(LongReply)*9/10 {
		t.Fatalf("only %d of %d characters arrived", total, len(LongReply))
	}
	t.Logf("long reply: %d characters in %d messages", total, len(s.w.Sent(s.w.Scene(m))))
}

// squash drops white space, which platforms may trim at message boundaries.
func squash(s string) string { return strings.Join(strings.Fields(s), "") }

func (s *suite) mediaIn(t *testing.T) {
	img := PNG(t)
	m := Msg{Scene: "45", User: "45", Text: "a picture for you", Image: img}
	id := s.w.Send(t, m)
	s.sent(t, s.w.Scene(m), "a picture for you", 1)
	in := s.imIn(t, s.sk(m))
	var found bool
	for _, seg := range in.Content {
		// Adapters keep the platform's URL and name the object; an inline upload's URL is the
		// media:// reference itself.
		if seg.Type == events.SegImage && (seg.Str("object") != "" || strings.HasPrefix(seg.MediaRef(), im.MediaScheme)) {
			found = true
			if ms, ok := s.w.(MediaSource); ok && seg.Str("sourceUrl") != ms.ImageURL(id) {
				t.Fatalf("image segment's sourceUrl %q, want the platform's URL %q: %+v", seg.Str("sourceUrl"), ms.ImageURL(id), seg)
			}
		}
		for _, v := range seg.Data {
			str, _ := v.(string)
			if strings.Contains(str, "base64,") {
				t.Fatalf("image inlined into the stored message instead of the media store: %.80s", str)
			}
			for _, secret := range s.a.Secrets {
				if strings.Contains(str, secret) {
					t.Fatalf("a bot credential leaked into the stored message: %+v", seg)
				}
			}
		}
	}
	if !found {
		t.Fatalf("image not stored in the media store: %+v", in.Content)
	}
}

func (s *suite) mediaOut(t *testing.T) {
	m := Msg{Scene: "48", User: "48", Text: "a picture please"}
	s.w.Send(t, m)
	o := s.sent(t, s.w.Scene(m), "", 1)[0]
	if !bytes.Equal(o.Image, PNG(t)) {
		t.Fatalf("image sent has %d bytes, want the stored image's %d", len(o.Image), len(PNG(t)))
	}
}

func (s *suite) redelivery(t *testing.T) {
	m := Msg{Scene: "49", User: "49", Text: "once only"}
	m.ID = s.w.Send(t, m)
	s.sent(t, s.w.Scene(m), "echo: once only", 1)
	s.w.Send(t, m)
	// A window to wait out: a second answer, if there were one, would come within it.
	time.Sleep(3 * time.Second)
	if n := len(s.sent(t, s.w.Scene(m), "echo: once only", 1)); n != 1 {
		t.Fatalf("%d replies to one message id", n)
	}
}

func (s *suite) master(t *testing.T) {
	user := s.a.Master
	if s.a.Features.EveryoneMaster {
		user = "50"
	}
	m := Msg{Scene: user, User: user, Text: "it is me"}
	s.w.Send(t, m)
	s.sent(t, s.w.Scene(m), "echo: it is me", 1)
	if in := s.imIn(t, s.sk(m)); !in.Sender.HasRole("master") {
		t.Fatalf("roles = %v, want master", in.Sender.Roles)
	}
}

func (s *suite) unknownBot(t *testing.T) {
	out := events.Outbound{OutID: "imtest-ghost-0", Turn: "imtest-ghost", Platform: s.a.Platform, Bot: "imtest-ghost",
		Scene: events.Scene{Type: events.ScopePrivate, ID: "u1"}, Content: events.Segments{events.TextSeg("to nobody")}}
	msg, err := events.NewMsg(events.IMOutSubject(out.SessionKey()), events.New(out))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.p.JS.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	subject := events.DeadLetterSubject(events.RoleEgress, "unknown_bot")
	testwait.Eventually(t, Wait, func() error {
		st, err := s.p.JS.Stream(ctx, events.StreamDeadLetters)
		if err != nil {
			return err
		}
		m, err := st.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			return fmt.Errorf("no dead letter on %s: %w", subject, err)
		}
		var ev events.Event[events.DeadLetter]
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			return err
		}
		if !strings.Contains(string(ev.Data.Body()), out.OutID) {
			return fmt.Errorf("last dead letter on %s is another part: %s", subject, ev.Data.Error)
		}
		return nil
	})
}

func (s *suite) retryAfter(t *testing.T) {
	rl, ok := s.w.(RateLimited)
	if !ok {
		t.Fatalf("Features.RetryAfter, but the wire %T does not implement RateLimited", s.w)
	}
	before := rl.Limited()
	rl.LimitNextSend()
	m := Msg{Scene: "51", User: "51", Text: "after a rate limit"}
	s.w.Send(t, m)
	s.sent(t, s.w.Scene(m), "echo: after a rate limit", 1)
	if rl.Limited() <= before {
		t.Fatalf("delivered, but the platform answered no 429 (%d before, %d after)", before, rl.Limited())
	}
	// A window to wait out: a second delivery of the refused send would come within it.
	time.Sleep(2 * time.Second)
	if n := len(s.sent(t, s.w.Scene(m), "echo: after a rate limit", 1)); n != 1 {
		t.Fatalf("delivered %d times after a 429", n)
	}
}
