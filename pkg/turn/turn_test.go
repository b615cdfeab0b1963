package turn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/inbox"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/faux"
	"github.com/agentbus/agentbus/pkg/models"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
	"github.com/agentbus/agentbus/pkg/store"
)

// harness is a provisioned server, a turn worker with a faux model, and helpers to feed the
// inbox and read replies.
type harness struct {
	t     *testing.T
	ns    *natstest.Server
	cfg   *config.Config // ai.providers, ai.agents and the task runners' hand-off (Options.AI)
	base  Options        // what every worker gets (modelOptions, changed by newHarness's mutate)
	reg   *llm.Registry
	faux  *faux.Provider
	inbox *inbox.Publisher // chained, as ingest publishes
}

// modelOptions are the Options pkg/app derives from ai.providers and ai.agents (its
// turnOptions): the registry, routing and per-model harness through pkg/models, the bindings.
func modelOptions(ai config.AI, reg *llm.Registry) Options {
	agents := map[string]Binding{}
	for name, b := range ai.Agents {
		agents[name] = Binding{Provider: b.Provider, Model: b.Model, Priority: b.Priority, HasMedia: b.Match.HasMedia}
	}
	return Options{Models: reg, Agents: agents,
		Route: func(hasMedia []string) (*llm.Model, error) {
			_, m, err := models.Route(ai, reg, hasMedia)
			return m, err
		},
		Harness: func(provider, modelID string) Harness {
			h := models.ResolveHarness(ai.Agent, provider, modelID)
			return Harness{MaxIterations: h.MaxIterations, MaxTools: h.MaxTools, MaxSkills: h.MaxSkills,
				AlwaysTools: h.AlwaysTools, ToolExecution: h.ToolExecution, Thinking: h.Thinking,
				ModelSize: h.ModelSizeHint, SkillInstructionMaxChars: h.SkillInstructionMaxChars}
		},
		ToolSearch: ai.Agent.ToolSearch}
}

// newHarness starts a server and prepares workers for a faux provider under the ai.agents
// binding zhin; mutate (may be nil) changes the Options every worker of the harness gets.
func newHarness(t *testing.T, mutate func(*Options), fopts ...faux.Option) *harness {
	t.Helper()
	ns := natstest.New(t, natstest.WithMemoryStorage())
	cfg, err := config.Parse([]byte(`
ai:
  providers:
    demo: {api: faux}
  agents:
    zhin: {provider: demo, model: demo-1}
`))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := models.NewRegistry(cfg.AI.Providers)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, ns: ns, cfg: cfg, reg: reg, faux: faux.New(fopts...), inbox: inbox.NewPublisher(ns.JS)}
	h.base = modelOptions(cfg.AI, reg)
	if mutate != nil {
		mutate(&h.base)
	}
	return h
}

// options are the harness's Options for a worker named id, streaming from its faux provider.
// The task runners' hand-off (AI) is read now, so a test may change h.cfg.AI before.
func (h *harness) options(id string) Options {
	o := h.base
	o.ID, o.StreamFn = id, h.faux.Stream
	return o
}

func (h *harness) worker(id string) *Worker {
	h.t.Helper()
	o := h.options(id)
	o.LeaseTTL, o.AckWait, o.IdleRelease = 2*time.Second, 2*time.Second, 5*time.Second
	w, err := New(context.Background(), h.ns.NC, h.ns.JS, o)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = w.Stop(context.Background()) })
	return w
}

var sk = events.SessionKey{Platform: "webhook", Bot: "b1", Scope: "private", Scene: "u1"}

func (h *harness) send(k events.SessionKey, id, text string, roles ...string) {
	h.t.Helper()
	m := events.IMMessage{Platform: k.Platform, Bot: k.Bot, MessageID: id, Scene: events.Scene{Type: k.Scope, ID: k.Scene},
		Sender: events.Sender{ID: "u1", Name: "Ann", Roles: append([]string{"user"}, roles...)}, Content: events.Segments{events.TextSeg(text)},
		Time: time.Now().UnixMilli()}
	var ev events.Any = events.New(events.UserMessage{Message: m, Text: text}, events.WithSession(k.String()))
	if strings.HasPrefix(text, "/") {
		f := strings.Fields(text[1:])
		ev = events.New(events.Command{Name: f[0], Args: f[1:], Raw: strings.TrimSpace(strings.TrimPrefix(text[1:], f[0])), Message: &m})
	}
	h.publish(k, ev)
}

// sendPlain is send by a third party: the event goes out without the inbox chain.
func (h *harness) sendPlain(k events.SessionKey, id, text string) {
	h.t.Helper()
	m := events.IMMessage{Platform: k.Platform, Bot: k.Bot, MessageID: id, Scene: events.Scene{Type: k.Scope, ID: k.Scene},
		Sender: events.Sender{ID: "u1", Name: "Ann", Roles: []string{"user"}}, Content: events.Segments{events.TextSeg(text)},
		Time: time.Now().UnixMilli()}
	msg, err := events.NewMsg(events.AgentInSubject(k), events.New(events.UserMessage{Message: m, Text: text}, events.WithSession(k.String())))
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.ns.JS.PublishMsg(context.Background(), msg); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) publish(k events.SessionKey, ev events.Any) {
	h.t.Helper()
	msg, err := events.NewMsg(events.AgentInSubject(k), ev)
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.inbox.Publish(context.Background(), msg); err != nil {
		h.t.Fatal(err)
	}
}

// replies waits until n outbound parts exist for k and returns their texts in stream order.
func (h *harness) replies(k events.SessionKey, n int) []string {
	h.t.Helper()
	var out []string
	testwait.Eventually(h.t, 0, func() error {
		out = h.outbound(k)
		return testwait.Want(len(out) >= n, "got %d replies %q, want %d", len(out), out, n)
	})
	return out
}

func (h *harness) outbound(k events.SessionKey) []string {
	var out []string
	for _, o := range h.outboundEvents(k) {
		out = append(out, o.Content.PlainText())
	}
	return out
}

// outboundEvents reads k's replies from IM_OUT one by one by subject: a consumer per look
// would pile up (tests poll every 20 ms) past the server's default of 1,000 per stream.
func (h *harness) outboundEvents(k events.SessionKey) []events.Outbound {
	ctx := context.Background()
	s, err := h.ns.JS.Stream(ctx, events.StreamIMOut)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []events.Outbound
	for seq := uint64(1); ; {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(events.IMOutSubject(k)))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out
		}
		if err != nil {
			h.t.Fatal(err)
		}
		var ev events.Event[events.Outbound]
		if err := events.Unmarshal(m.Data, &ev); err != nil {
			h.t.Fatal(err)
		}
		out = append(out, ev.Data)
		seq = m.Sequence + 1
	}
}

func TestPlainTurn(t *testing.T) {
	h := newHarness(t, nil, faux.WithResponder(faux.Echo))
	h.worker("w1")
	h.send(sk, "m1", "hello there")
	got := h.replies(sk, 1)
	if !strings.Contains(got[0], "hello there") {
		t.Fatalf("reply = %q", got[0])
	}
	// The turn is committed to the session's context.
	h.send(sk, "m2", "second")
	h.replies(sk, 2)
	w := h.worker("w-reader")
	sess, err := w.sessions.Get(context.Background(), sk)
	if err != nil {
		t.Fatal(err)
	}
	sid, _ := sess.ID()
	loaded, err := w.ctxlog.LoadContext(context.Background(), sid)
	if err != nil {
		t.Fatal(err)
	}
	if len(loaded.Messages) != 4 {
		t.Fatalf("context has %d messages, want 4: %+v", len(loaded.Messages), loaded.Messages)
	}
	// One append per turn: the commit carries the start and the answer, and reads back as
	// every record of the turn.
	info, err := w.evts.Info(context.Background(), jetstream.WithSubjectFilter(events.AgentEvtSessionFilter(sk)))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Errorf("AGENT_EVENTS holds %d records for two plain turns, want 2: %v", info.State.Msgs, info.State.Subjects)
	}
	tl, err := w.readTurn(context.Background(), sk, turnID(1))
	if err != nil {
		t.Fatal(err)
	}
	if tl.started == nil || !tl.committed || len(tl.messages) != 2 || tl.messages[1].Role != llm.RoleAssistant {
		t.Errorf("turn 1 reads back as started=%v committed=%v %d messages", tl.started != nil, tl.committed, len(tl.messages))
	}
	waitClosed(t, w, sk)
}

func TestResetStartsNewEpoch(t *testing.T) {
	h := newHarness(t, nil, faux.WithResponder(faux.Echo))
	w := h.worker("w1")
	h.send(sk, "m1", "remember me")
	h.replies(sk, 1)
	h.send(sk, "m2", "/reset")
	got := h.replies(sk, 2)
	if !strings.Contains(got[1], "epoch 2") {
		t.Fatalf("reset reply = %q", got[1])
	}
	h.send(sk, "m3", "hi again")
	h.replies(sk, 3)
	sess, _ := w.sessions.Get(context.Background(), sk)
	sid, _ := sess.ID()
	loaded, _ := w.ctxlog.LoadContext(context.Background(), sid)
	if sess.Epoch != 2 || len(loaded.Messages) != 2 {
		t.Fatalf("epoch %d with %d messages, want epoch 2 with only the new turn", sess.Epoch, len(loaded.Messages))
	}
}

func TestInvalidInboxEventIsDeadLettered(t *testing.T) {
	h := newHarness(t, nil, faux.WithResponder(faux.Echo))
	h.worker("w1")
	if _, err := h.ns.JS.Publish(context.Background(), events.AgentInSubject(sk), []byte(`{"type":"inbox.user_message","v":1}`)); err != nil {
		t.Fatal(err)
	}
	h.send(sk, "m1", "still working?")
	if got := h.replies(sk, 1); !strings.Contains(got[0], "still working?") {
		t.Fatalf("reply = %q", got)
	}
	s, _ := h.ns.JS.Stream(context.Background(), events.StreamDeadLetters)
	raw, err := s.GetLastMsgForSubject(context.Background(), events.DeadLetterSubject("turn-worker", "invalid_event"))
	if err != nil {
		t.Fatalf("no dead letter: %v", err)
	}
	if !strings.Contains(string(raw.Data), "id is required") {
		t.Errorf("dead letter lacks the reason: %s", raw.Data)
	}
}

// TestTwoWorkersKeepPerSessionOrder sends bursts to many sessions at once, read by two
// workers: with every event chained (as ingest publishes, package inbox), and with every other
// event published plain by a third party, which the actor must read the plain way.
func TestTwoWorkersKeepPerSessionOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("many sessions")
	}
	for _, mixed := range []bool{false, true} {
		t.Run(fmt.Sprintf("mixed=%v", mixed), func(t *testing.T) {
			h := newHarness(t, func(o *Options) { o.Concurrency = "queue" }, faux.WithResponder(faux.Echo))
			h.worker("w1")
			h.worker("w2")
			const sessions, msgs = 20, 5
			var wg sync.WaitGroup
			for s := 0; s < sessions; s++ {
				k := events.SessionKey{Platform: "webhook", Bot: "b1", Scope: "private", Scene: fmt.Sprintf("s%d", s)}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < msgs; i++ {
						if mixed && i%2 == 1 {
							h.sendPlain(k, fmt.Sprintf("m%d", i), fmt.Sprintf("msg-%d", i))
							continue
						}
						h.send(k, fmt.Sprintf("m%d", i), fmt.Sprintf("msg-%d", i))
					}
				}()
			}
			wg.Wait()
			for s := 0; s < sessions; s++ {
				k := events.SessionKey{Platform: "webhook", Bot: "b1", Scope: "private", Scene: fmt.Sprintf("s%d", s)}
				got := h.replies(k, msgs)
				for i, r := range got {
					if !strings.Contains(r, fmt.Sprintf("msg-%d", i)) {
						t.Fatalf("session %d reply %d = %q: order broken: %q", s, i, r, got)
					}
				}
			}
		})
	}
}

// publishAll stores every message or, while the bus refuses one, retries until its context
// ends and then says so.
func TestPublishAllRetriesUntilStoredOrCancelled(t *testing.T) {
	h := newHarness(t, nil)
	w := h.worker("w1")
	good := func(id string) *nats.Msg {
		m := nats.NewMsg(events.AgentEvtSubject(sk, "turn_failed"))
		m.Header.Set(nats.MsgIdHdr, id)
		m.Data = []byte("{}")
		return m
	}
	if err := w.publishAll(context.Background(), []*nats.Msg{good("a"), good("b"), good("a")}); err != nil {
		t.Fatal(err)
	}
	info, err := w.evts.Info(context.Background())
	if err != nil || info.State.Msgs != 2 {
		t.Fatalf("stored %v, %v; want 2 (the repeated id is a duplicate)", info.State.Msgs, err)
	}
	nowhere := nats.NewMsg("no.stream.here")
	nowhere.Header.Set(nats.MsgIdHdr, "x")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = w.publishAll(ctx, []*nats.Msg{good("c"), nowhere})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("publish to no stream: %v, want the context's deadline", err)
	}
	if info, _ := w.evts.Info(context.Background()); info.State.Msgs != 3 {
		t.Fatalf("the storable message was not stored alongside: %d", info.State.Msgs)
	}
}

// A turn that outlives AckWait keeps its trigger from being redelivered (in-progress acks).
func TestSlowTurnIsNotRedelivered(t *testing.T) {
	h := newHarness(t, nil, faux.WithLatency(5*time.Second, 0), faux.WithResponses(faux.Response{Text: "slow answer"}))
	h.worker("w1") // AckWait 2s
	h.send(sk, "m1", "take your time")
	if got := h.replies(sk, 1); got[0] != "slow answer" {
		t.Fatalf("reply %q", got)
	}
	info, err := h.ns.JS.Consumer(context.Background(), events.StreamSessionIn, ConsumerName)
	if err != nil {
		t.Fatal(err)
	}
	ci, err := info.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ci.NumRedelivered != 0 || h.faux.Calls() != 1 {
		t.Fatalf("%d redeliveries, %d model calls; want 0 and 1", ci.NumRedelivered, h.faux.Calls())
	}
}

// lastInboxSeq is the sequence of the session's last inbox event (turnID of it is the turn
// that event starts).
func (h *harness) lastInboxSeq(t *testing.T, sk events.SessionKey) uint64 {
	t.Helper()
	in, err := h.ns.JS.Stream(context.Background(), events.StreamSessionIn)
	if err != nil {
		t.Fatal(err)
	}
	trigger, err := in.GetLastMsgForSubject(context.Background(), events.AgentInSubject(sk))
	if err != nil {
		t.Fatal(err)
	}
	return trigger.Sequence
}

// A busy chat, each message sent as soon as the last one is answered (so a turn runs nearly
// all the time, and whenever the write that records finished turns is due), writes its
// session record when it is created and when its first turn records the model, not once per
// turn: that write lists no running turn, so the turn needs no write of its own when it
// finishes.
func TestBusyChatWritesItsRecordTwice(t *testing.T) {
	h := newHarness(t, nil, faux.WithResponder(faux.Echo), faux.WithLatency(closeDelay*6/10, 0))
	h.worker("w1")
	ctx := context.Background()
	kv, err := h.ns.JS.KeyValue(ctx, events.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	watch, err := kv.Watch(ctx, sk.Token(), jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()
	const turns = 6
	for i := 1; i <= turns; i++ {
		h.send(sk, fmt.Sprintf("m%d", i), fmt.Sprintf("message %d", i))
		if got := h.replies(sk, i); !strings.Contains(got[i-1], fmt.Sprintf("message %d", i)) {
			t.Fatalf("reply %d = %q", i, got[i-1])
		}
	}
	// The last turn's record write, if it needed one, lands within closeDelay.
	writes := 0
	quiet := time.After(closeDelay + 2*time.Second)
	var last store.Session
	for done := false; !done; {
		select {
		case e := <-watch.Updates():
			if e != nil {
				writes++
				if err := json.Unmarshal(e.Value(), &last); err != nil {
					t.Fatal(err)
				}
			}
		case <-quiet:
			done = true
		}
	}
	if writes == 0 {
		t.Fatal("the watch saw no write of the session record")
	}
	if writes > 2 {
		t.Errorf("%d writes of the session record for %d turns, want 2 (created, model recorded)", writes, turns)
	}
	if len(last.OpenTurns) != 0 {
		t.Errorf("the record lists open turns after the chat went quiet: %+v", last.OpenTurns)
	}
}

// An inbox event whose delivery carries the chain header is taken from the delivery: the
// actor does not read the log for it as well. Only a look at start-up, the events of a third
// party (no chain header) and a delivery late past pokeGrace on a busy machine make a read.
func TestChainedDeliveryIsNotReadAgain(t *testing.T) {
	h := newHarness(t, nil, faux.WithResponder(faux.Echo))
	h.worker("w1")
	h.send(sk, "m0", "warm up")
	h.replies(sk, 1)

	var reads atomic.Int64
	for _, subj := range []string{"$JS.API.DIRECT.GET." + events.StreamSessionIn, "$JS.API.DIRECT.GET." + events.StreamSessionIn + ".>"} {
		sub, err := h.ns.NC.Subscribe(subj, func(*nats.Msg) { reads.Add(1) })
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	if err := h.ns.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	const turns = 10
	for i := 1; i <= turns; i++ {
		h.send(sk, fmt.Sprintf("m%d", i), fmt.Sprintf("message %d", i))
		if got := h.replies(sk, i+1); !strings.Contains(got[i], fmt.Sprintf("message %d", i)) {
			t.Fatalf("reply %d = %q", i, got[i])
		}
	}
	chained := reads.Load()
	// The old code read the log for every event (19 reads for these 10); half of them is the
	// margin for deliveries later than pokeGrace on a busy machine.
	if chained > turns/2 {
		t.Errorf("%d reads of the inbox for %d chained events, want at most %d", chained, turns, turns/2)
	}

	reads.Store(0)
	h.sendPlain(sk, "p1", "plain message")
	if got := h.replies(sk, turns+2); !strings.Contains(got[turns+1], "plain message") {
		t.Fatalf("reply to the third party's event = %q", got[turns+1])
	}
	if reads.Load() == 0 {
		t.Error("an event without the chain header was taken without a read of the log")
	}
	t.Logf("%d reads for %d chained events", chained, turns)
}

// A command published straight onto the inbox (not through ingest) is held to pkg/command's
// access table in the session too: a user without roles gets the refusal ingest would give,
// a trusted user the answer.
func TestCommandAccessIsCheckedInTheSession(t *testing.T) {
	h := newHarness(t, nil, faux.WithResponder(faux.Echo))
	h.worker("w1")
	h.send(sk, "m1", "/bindings")
	got := h.replies(sk, 1)
	if got[0] != "/bindings is for the bot's masters and trusted users." {
		t.Fatalf("/bindings by a user = %q", got[0])
	}
	h.send(sk, "m2", "/bindings", events.RoleTrusted)
	got = h.replies(sk, 2)
	if strings.Contains(got[1], "masters and trusted users") || got[1] == "" {
		t.Fatalf("/bindings by a trusted user = %q", got[1])
	}
	h.send(sk, "m3", "/whoami")
	if got = h.replies(sk, 3); !strings.Contains(got[2], "u1") {
		t.Fatalf("/whoami by a user = %q", got[2])
	}
}
