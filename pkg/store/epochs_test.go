package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
)

// epochFixture is one session with an ended epoch 1 (inbox events, a context log with a
// summary, turn events) and a running epoch 2, on a real server.
type epochFixture struct {
	js       jetstream.JetStream
	sessions *Sessions
	cl       *ContextLog
	tl       *TurnLog
	arch     *EpochArchive
	sk       events.SessionKey
	inbox    []uint64 // epoch 1's inbox sequences
	next     uint64   // epoch 2's first inbox event
}

func newEpochFixture(t *testing.T) *epochFixture {
	t.Helper()
	ctx := context.Background()
	f := &epochFixture{js: startJS(t), sk: testKey("archive")}
	var err error
	if f.sessions, err = OpenSessions(ctx, f.js); err != nil {
		t.Fatal(err)
	}
	if f.cl, err = NewContextLog(ctx, f.js, ContextBounds{}); err != nil {
		t.Fatal(err)
	}
	if f.tl, err = NewTurnLog(ctx, f.js); err != nil {
		t.Fatal(err)
	}
	if f.arch, err = OpenEpochArchive(ctx, f.js, f.sessions); err != nil {
		t.Fatal(err)
	}
	if _, err := f.sessions.GetOrCreate(ctx, f.sk); err != nil {
		t.Fatal(err)
	}
	id1 := events.NewSessionID(f.sk, 1)
	other := testKey("neighbour")
	var last uint64
	for i := range 3 {
		seq := f.publishInbox(t, f.sk, fmt.Sprintf("q%d", i))
		f.publishInbox(t, other, "not archived") // another session's inbox, interleaved
		f.inbox = append(f.inbox, seq)
		turn := fmt.Sprintf("t%d", seq)
		for _, ev := range turnEvents(f.sk, turn, seq) {
			if _, err := f.tl.Append(ctx, f.sk, ev); err != nil {
				t.Fatal(err)
			}
		}
		msgs := []llm.Message{llm.UserText(fmt.Sprintf("q%d", i), 1), {Role: llm.RoleAssistant, Content: []llm.Content{llm.Text("a " + turn)}}}
		if last, err = f.cl.AppendMessages(ctx, id1, last, msgs, WithTurn(turn), WithInboxSeq(seq), WithMsgID(turn+":commit")); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			if last, err = f.cl.AppendSummary(ctx, id1, last, Summary{Text: "they asked twice", AnchorSeq: last, Covered: 4, Model: "m", Count: 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	reset := f.publishInbox(t, f.sk, "/reset")
	f.inbox = append(f.inbox, reset)
	if _, err := f.sessions.Archive(ctx, f.sk, EndInboxAt(reset)); err != nil {
		t.Fatal(err)
	}
	// The actor moves the cursor past the /reset once it has answered it.
	if _, err := f.sessions.Update(ctx, f.sk, func(s *Session) error { s.InboxCursor = reset; return nil }); err != nil {
		t.Fatal(err)
	}
	// Epoch 2 begins: an event and a commit the trim must leave alone.
	f.next = f.publishInbox(t, f.sk, "after the reset")
	if _, err := f.cl.AppendMessages(ctx, events.NewSessionID(f.sk, 2), 0, []llm.Message{llm.UserText("after the reset", 1)}, WithInboxSeq(f.next)); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *epochFixture) publishInbox(t *testing.T, sk events.SessionKey, text string) uint64 {
	t.Helper()
	m, err := events.NewMsg(events.AgentInSubject(sk), events.New(events.Steer{Text: text, Sender: events.Sender{ID: "u1"}}))
	if err != nil {
		t.Fatal(err)
	}
	ack, err := f.js.PublishMsg(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// view is what a reader shows of the session: every context record of both epochs and every
// turn record, as JSON (so "the same" means the same bytes).
func (f *epochFixture) view(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	for e := uint64(1); e <= 2; e++ {
		for r, err := range f.arch.ContextHistory(ctx, f.cl, events.NewSessionID(f.sk, e)) {
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(r)
			out = append(out, fmt.Sprintf("ctx %d %s", e, b))
		}
	}
	for r, err := range f.arch.Replay(ctx, f.tl, f.sk, 2, ReplayFrom{}) {
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(r.Event)
		out = append(out, fmt.Sprintf("evt %d %s %s %s %s", r.Seq, r.Time.UTC().Format(time.RFC3339Nano), r.Turn, r.Kind, b))
	}
	return out
}

// subjectMsgs counts the messages a stream holds on subject (the server's own count).
func subjectMsgs(t *testing.T, js jetstream.JetStream, stream, subject string) uint64 {
	t.Helper()
	st, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects { // a wildcard filter lists each subject it matches
		n += c
	}
	return n
}

// An ended epoch is archived, then its context subject and its part of the inbox are purged;
// readers show the same before and after, and a crash between the archive and the purge
// (Write without Settle) neither loses nor doubles anything.
func TestEpochArchiveTrimsAndReadsBack(t *testing.T) {
	ctx := context.Background()
	f := newEpochFixture(t)
	id1 := events.NewSessionID(f.sk, 1)
	before := f.view(t)
	inSubj, ctxSubj := events.AgentInSubject(f.sk), events.AgentCtxSubject(id1)
	if n := subjectMsgs(t, f.js, events.StreamSessionIn, inSubj); n != uint64(len(f.inbox))+1 {
		t.Fatalf("inbox holds %d events before the trim, want %d", n, len(f.inbox)+1)
	}
	if n := subjectMsgs(t, f.js, events.StreamAgentCtx, ctxSubj); n != 4 {
		t.Fatalf("epoch 1's context holds %d records, want 4", n)
	}

	// The crash: the object is written, nothing is purged, the record still lists the epoch.
	sess, err := f.sessions.Get(ctx, f.sk)
	if err != nil || len(sess.Ended) != 1 || sess.Ended[0].Epoch != 1 || sess.Ended[0].InboxTo != f.inbox[len(f.inbox)-1] {
		t.Fatalf("record after /reset: %+v %v", sess, err)
	}
	if _, err := f.arch.Write(ctx, f.sk, sess.Ended[0], 1); err != nil {
		t.Fatal(err)
	}
	written, err := f.arch.obs.GetInfo(ctx, EpochObjectName(id1))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.view(t); !slices.Equal(got, before) {
		t.Fatalf("archived but not purged: readers show\n%q\nwant\n%q", got, before)
	}

	n, err := f.arch.Settle(ctx, f.sk)
	if err != nil || n != 1 {
		t.Fatalf("settle: %d %v", n, err)
	}
	again, err := f.arch.obs.GetInfo(ctx, EpochObjectName(id1))
	if err != nil || again.NUID != written.NUID {
		t.Fatalf("the archive was written again (%v): %s, then %s", err, written.NUID, again.NUID)
	}
	if n := subjectMsgs(t, f.js, events.StreamAgentCtx, ctxSubj); n != 0 {
		t.Fatalf("epoch 1's context holds %d records after the trim", n)
	}
	if n := subjectMsgs(t, f.js, events.StreamAgentCtx, events.AgentCtxSubject(events.NewSessionID(f.sk, 2))); n != 1 {
		t.Fatalf("epoch 2's context holds %d records, want 1", n)
	}
	if n := subjectMsgs(t, f.js, events.StreamSessionIn, inSubj); n != 1 {
		t.Fatalf("the inbox holds %d events after the trim, want 1 (epoch 2's)", n)
	}
	if n := subjectMsgs(t, f.js, events.StreamSessionIn, events.AgentInSubject(testKey("neighbour"))); n != 3 {
		t.Fatalf("another session's inbox holds %d events, want 3", n)
	}
	if got := f.view(t); !slices.Equal(got, before) {
		t.Fatalf("after the trim readers show\n%q\nwant\n%q", got, before)
	}
	var archived []uint64
	for m, err := range f.arch.Inbox(ctx, id1) {
		if err != nil {
			t.Fatal(err)
		}
		archived = append(archived, m.Sequence)
	}
	if !slices.Equal(archived, f.inbox) {
		t.Fatalf("archived inbox %v, want %v", archived, f.inbox)
	}
	sess, err = f.sessions.Get(ctx, f.sk)
	if err != nil || len(sess.Ended) != 0 || sess.InboxArchived != f.inbox[len(f.inbox)-1] {
		t.Fatalf("record after settle: %+v %v", sess, err)
	}
	if n, err := f.arch.Settle(ctx, f.sk); err != nil || n != 0 {
		t.Fatalf("second settle: %d %v", n, err)
	}

	// Once AGENT_EVENTS ages the epoch's turn events out, replay reads them from the archive.
	st, err := f.js.Stream(ctx, events.StreamAgentEvents)
	if err != nil {
		t.Fatal(err)
	}
	if subjectMsgs(t, f.js, events.StreamAgentEvents, events.AgentEvtSessionFilter(f.sk)) == 0 {
		t.Fatal("no turn events in the stream to age out")
	}
	cfg := st.CachedInfo().Config
	cfg.MaxAge, cfg.Duplicates = time.Second, time.Second
	if _, err := f.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for subjectMsgs(t, f.js, events.StreamAgentEvents, events.AgentEvtSessionFilter(f.sk)) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("AGENT_EVENTS did not age out")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := f.view(t); !slices.Equal(got, before) {
		t.Fatalf("with the turn events aged out readers show\n%q\nwant\n%q", got, before)
	}
}

// The inbox is trimmed only as far as it is durably done and no open turn names an event.
func TestInboxTrim(t *testing.T) {
	b := EpochBounds{InboxTo: 20, CommitInbox: 12}
	for _, tc := range []struct {
		name string
		s    Session
		want uint64
	}{
		{"cursor past the end", Session{InboxCursor: 25}, 20},
		{"cursor short, commits further", Session{InboxCursor: 5}, 12},
		{"cursor further than commits", Session{InboxCursor: 17}, 17},
		{"open turn", Session{InboxCursor: 25, OpenTurns: []OpenTurn{{ID: "t15", InboxSeq: 15}}}, 14},
		{"merged event", Session{InboxCursor: 25, OpenTurns: []OpenTurn{{ID: "t22", InboxSeq: 22, Merged: []uint64{9}}}}, 8},
		{"steer", Session{InboxCursor: 25, OpenTurns: []OpenTurn{{ID: "t22", InboxSeq: 22, Steers: []uint64{18}}}}, 17},
		{"new epoch's turn", Session{InboxCursor: 25, OpenTurns: []OpenTurn{{ID: "t23", InboxSeq: 23}}}, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := inboxTrim(&tc.s, b); got != tc.want {
				t.Fatalf("inboxTrim = %d, want %d", got, tc.want)
			}
		})
	}
}

// A durable reader of SESSION_IN that has not had an ended epoch's events yet (the transcript
// archiver's inbox consumer: inbound messages that reach a session are stored only in their
// inbox events) holds the inbox trim back: Settle archives, keeps the epoch listed and purges
// the inbox only once the reader has acknowledged it. The turn workers' own consumer
// (CursorConsumer) does not count: the session's cursor records its progress.
func TestEpochTrimWaitsForDurableReaders(t *testing.T) {
	ctx := context.Background()
	f := newEpochFixture(t)
	f.arch.CursorConsumer = "turn-workers"
	st, err := f.js.Stream(ctx, events.StreamSessionIn)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"turn-workers", "transcripts-n1-inbox"} { // neither has read anything
		if _, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy,
			FilterSubject: events.AgentInSubject(f.sk)}); err != nil {
			t.Fatal(err)
		}
	}
	inbox := events.AgentInSubject(f.sk)
	before := subjectMsgs(t, f.js, events.StreamSessionIn, inbox)
	if n, err := f.arch.Settle(ctx, f.sk); !errors.Is(err, ErrReaderBehind) || n != 0 {
		t.Fatalf("Settle with a reader behind = %d, %v; want 0 settled, ErrReaderBehind", n, err)
	}
	if got := subjectMsgs(t, f.js, events.StreamSessionIn, inbox); got != before {
		t.Fatalf("inbox purged to %d of %d events while the transcript consumer had read none", got, before)
	}
	if s, err := f.sessions.Get(ctx, f.sk); err != nil || len(s.Ended) != 1 {
		t.Fatalf("ended epochs after a held-back Settle: %+v (%v), want epoch 1 still listed", s, err)
	}
	// The reader catches up on epoch 1 (the events up to the /reset), then Settle trims.
	c, err := st.Consumer(ctx, "transcripts-n1-inbox")
	if err != nil {
		t.Fatal(err)
	}
	batch, err := c.Fetch(len(f.inbox), jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := f.arch.Settle(ctx, f.sk); err != nil || n != 1 {
		t.Fatalf("Settle after the reader acked = %d, %v; want 1", n, err)
	}
	if got := subjectMsgs(t, f.js, events.StreamSessionIn, inbox); got != 1 {
		t.Errorf("inbox holds %d events after the trim, want 1 (epoch 2's)", got)
	}
}
