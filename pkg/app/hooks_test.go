package app_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/hooks"
	"github.com/agentbus/agentbus/pkg/tools"
	"github.com/agentbus/agentbus/pkg/webhook"
)

// The hook tests run every event of ai.hooks through a whole pipeline (embedded NATS, the four
// roles, the real openai-completions provider against internal/fakeopenai), with the hooks
// served over HTTP (an httptest server that checks the Standard Webhooks signature) or over
// NATS (a micro service). Each scenario has a private chat of its own, named after it; the hook
// service decides its answer from the scenario (the chat's scene id in the event's session)
// and the event. Two hooks run for every event: "soft" (onError: continue) answers continue,
// block or modify, or hangs past its timeout; "hard" (onError: block) answers continue, or
// hangs. A third, "slowpoke", hangs on one chat's message until the test lets it go.

const (
	hookSecret  = "whsec_" + "aG9vay1zZWNyZXQtZm9yLXRlc3Rz" // base64 of a test key
	hookTool    = "hooktool"
	hookTimeout = 4000 // ms; a hang costs this much
)

// hookScenario is one chat: what the user says and what must come back.
type hookScenario struct {
	scene string
	texts []string // messages, in order
	// want is the text of reply number replies (default 1) the chat gets; notSeen is text the
	// model and the chat must never see.
	want    string
	replies int
	prefix  bool // want is a prefix of the reply, not all of it
	// notSeen must never reach the model, notSent never the chat.
	notSeen, notSent string
}

func hookScenarios() []hookScenario {
	return []hookScenario{
		{scene: "recv-continue", texts: []string{"recv-continue hello"}, want: "echo: recv-continue hello"},
		{scene: "recv-block", texts: []string{"recv-block hello"}, want: "blocked: recv-block", notSeen: "recv-block hello"},
		{scene: "recv-modify", texts: []string{"recv-modify hello"}, want: "echo: recv-modify hello MODIFIED"},
		{scene: "recv-hang-soft", texts: []string{"recv-hang-soft hello"}, want: "echo: recv-hang-soft hello"},
		{scene: "recv-hang-hard", texts: []string{"recv-hang-hard hello", "recv-hang-hard again"}, want: "echo: recv-hang-hard again", notSeen: "recv-hang-hard hello"},
		{scene: "send-continue", texts: []string{"send-continue hello"}, want: "echo: send-continue hello"},
		{scene: "send-block", texts: []string{"send-block first", "send-block second"}, want: "echo: send-block second", notSent: "echo: send-block first"},
		{scene: "send-modify", texts: []string{"send-modify hello"}, want: "SENT-MODIFIED"},
		{scene: "send-hang-soft", texts: []string{"send-hang-soft hello"}, want: "echo: send-hang-soft hello"},
		{scene: "send-hang-hard", texts: []string{"send-hang-hard first", "send-hang-hard second"}, want: "echo: send-hang-hard second", notSent: "echo: send-hang-hard first"},
		{scene: "tool-continue", texts: []string{"tool-continue hello, use hooktool"}, want: "done [ran x]"},
		{scene: "tool-block", texts: []string{"tool-block hello, use hooktool"}, want: "done [not allowed]"},
		{scene: "tool-modify", texts: []string{"tool-modify hello, use hooktool"}, want: "done [ran y]"},
		{scene: "tool-hang-soft", texts: []string{"tool-hang-soft hello, use hooktool"}, want: "done [ran x]"},
		{scene: "tool-hang-hard", texts: []string{"tool-hang-hard hello, use hooktool"}, want: "done [tool hooktool was blocked by hook hard]"},
		{scene: "after-continue", texts: []string{"after-continue hello, use hooktool"}, want: "done [ran x]"},
		{scene: "after-block", texts: []string{"after-block hello, use hooktool"}, want: "done [ran x]"}, // tool.after cannot be blocked
		{scene: "after-modify", texts: []string{"after-modify hello, use hooktool"}, want: "done [RESULT-CHANGED]"},
		{scene: "after-hang-soft", texts: []string{"after-hang-soft hello, use hooktool"}, want: "done [ran x]"},
		{scene: "after-hang-hard", texts: []string{"after-hang-hard hello, use hooktool"}, want: "done [the result of tool hooktool was withheld: hook hard failed]"},
		{scene: "boot-continue", texts: []string{"boot-continue hello"}, want: "echo: boot-continue hello"},
		{scene: "boot-modify", texts: []string{"boot-modify hello", "boot-modify again", "boot-modify third"}, want: "echo: boot-modify third [boot]", replies: 3},
		{scene: "boot-hang-soft", texts: []string{"boot-hang-soft hello"}, want: "echo: boot-hang-soft hello"},
		{scene: "boot-hang-hard", texts: []string{"boot-hang-hard hello"}, want: "⚠️ This turn failed", prefix: true, notSeen: "boot-hang-hard hello"},
		{scene: "ctx-continue", texts: []string{"ctx-continue hello"}, want: "echo: ctx-continue hello"},
		{scene: "ctx-block", texts: []string{"ctx-block hello"}, want: "echo: ctx-block hello"}, // context.transform cannot be blocked
		{scene: "ctx-modify", texts: []string{"ctx-modify hello"}, want: "echo: transformed"},
		{scene: "ctx-hang-soft", texts: []string{"ctx-hang-soft hello"}, want: "echo: ctx-hang-soft hello"},
		{scene: "ctx-hang-hard", texts: []string{"ctx-hang-hard hello"}, want: "⚠️", prefix: true, notSeen: "ctx-hang-hard hello"},
		{scene: "sent-retry", texts: []string{"sent-retry hello"}, want: "echo: sent-retry hello"},
	}
}

// hookScript is the model: scenarios of tool.before and tool.after ask for hooktool and then
// answer with its result; a system prompt with the bootstrap appendix is marked; everything
// else is echoed.
func hookScript(r *fakeopenai.Request) fakeopenai.Reply {
	last := r.Messages[len(r.Messages)-1]
	if last.Role == "tool" {
		return fakeopenai.Reply{Text: "done [" + last.Content + "]"}
	}
	u := r.LastUser()
	if (strings.HasPrefix(u, "tool-") || strings.HasPrefix(u, "after-")) && r.HasTool(hookTool) {
		return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{ID: "c1", Name: hookTool, Arguments: `{"text":"x"}`}}}
	}
	rep := fakeopenai.Echo(r)
	if len(r.Messages) > 0 && r.Messages[0].Role == "system" && strings.Contains(r.Messages[0].Content, "BOOT-APPENDIX") {
		rep.Text += " [boot]"
	}
	return rep
}

// hookCall is one request the hook service received.
type hookCall struct {
	hook string
	ev   hooks.Event
	at   time.Time
}

// hookService decides the answers (shared by the HTTP and the NATS transport) and records
// every call.
type hookService struct {
	mu    sync.Mutex
	calls []hookCall
	sent  map[string]int // message.sent calls per id

	slowIn   chan struct{} // slowpoke got the "slow" chat's message
	release  chan struct{} // closed: slowpoke answers
	slowDone chan struct{} // slowpoke answered
}

func newHookService() *hookService {
	return &hookService{sent: map[string]int{}, slowIn: make(chan struct{}, 1), release: make(chan struct{}), slowDone: make(chan struct{})}
}

// sceneOf is the scene id of a session key or id (platform:bot:scope:scene[#epoch]).
func sceneOf(session string) string {
	session, _, _ = strings.Cut(session, "#")
	return session[strings.LastIndex(session, ":")+1:]
}

var scenarioEvents = map[string]string{
	"recv": hooks.MessageReceived, "send": hooks.MessageSending, "tool": hooks.ToolBefore,
	"after": hooks.ToolAfter, "boot": hooks.AgentBootstrap, "ctx": hooks.ContextTransform,
}

// answer returns the hook's answer; hang means: give none (until ctx ends); fail: answer with
// an error.
func (s *hookService) answer(ctx context.Context, hook string, ev hooks.Event) (res hooks.Result, hang, fail bool) {
	s.mu.Lock()
	s.calls = append(s.calls, hookCall{hook: hook, ev: ev, at: time.Now()})
	s.mu.Unlock()
	scene := sceneOf(ev.Session)
	text, _ := ev.Data["text"].(string)
	cont := hooks.Result{Action: hooks.Continue}
	switch hook {
	case "slowpoke":
		if scene == "slow" {
			s.slowIn <- struct{}{}
			select {
			case <-s.release:
			case <-ctx.Done():
			}
			close(s.slowDone)
		}
		return cont, false, false
	case "hard":
		kind, action, _ := strings.Cut(scene, "-")
		if action != "hang-hard" || scenarioEvents[kind] != ev.Event {
			return cont, false, false
		}
		if ev.Event == hooks.MessageReceived && !strings.Contains(text, "hello") || ev.Event == hooks.MessageSending && !strings.Contains(text, "first") {
			return cont, false, false
		}
		return res, true, false
	}
	// soft
	if scene == "sent-retry" && ev.Event == hooks.MessageSent {
		s.mu.Lock()
		s.sent[ev.ID]++
		n := s.sent[ev.ID]
		s.mu.Unlock()
		return cont, false, n == 1 // the first delivery fails: it must come again, same id
	}
	kind, action, _ := strings.Cut(scene, "-")
	if scenarioEvents[kind] != ev.Event {
		return cont, false, false
	}
	switch action {
	case "hang-soft":
		return res, true, false
	case "block":
		if ev.Event == hooks.MessageSending && !strings.Contains(text, "first") {
			return cont, false, false
		}
		return hooks.Result{Action: hooks.Block, Reply: "blocked: " + scene, Result: "not allowed"}, false, false
	case "modify":
		var data map[string]any
		switch ev.Event {
		case hooks.MessageReceived:
			data = map[string]any{"text": text + " MODIFIED"}
		case hooks.MessageSending:
			data = map[string]any{"text": "SENT-MODIFIED"}
		case hooks.ToolBefore:
			data = map[string]any{"arguments": map[string]any{"text": "y"}}
		case hooks.ToolAfter:
			data = map[string]any{"result": "RESULT-CHANGED"}
		case hooks.AgentBootstrap:
			data = map[string]any{"systemPrompt": "BOOT-APPENDIX"}
		case hooks.ContextTransform:
			data = map[string]any{"messages": []any{map[string]any{"role": "user", "timestamp": 1,
				"content": []any{map[string]any{"type": "text", "text": "transformed"}}}}}
		}
		return hooks.Result{Action: hooks.Modify, Data: data}, false, false
	}
	return cont, false, false
}

func (s *hookService) callsOf(pred func(hookCall) bool) []hookCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []hookCall
	for _, c := range s.calls {
		if pred(c) {
			out = append(out, c)
		}
	}
	return out
}

// serveHTTP serves hook name at /<name>, refusing requests whose signature does not verify.
func (s *hookService) serveHTTP(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		id, _, err := webhook.VerifyStandard(hookSecret, body, r.Header, time.Now(), 0)
		if err != nil {
			http.Error(w, "bad signature: "+err.Error(), http.StatusUnauthorized)
			return
		}
		var ev hooks.Event
		if err := json.Unmarshal(body, &ev); err != nil || ev.ID != id {
			http.Error(w, fmt.Sprintf("bad event (webhook-id %q): %v", id, err), http.StatusBadRequest)
			return
		}
		res, hang, fail := s.answer(r.Context(), strings.TrimPrefix(r.URL.Path, "/"), ev)
		switch {
		case hang:
			<-r.Context().Done()
			return
		case fail:
			http.Error(w, "scripted failure", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(res)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// serveNATS serves the hooks as endpoints hooks.<name> of a micro service on nc. Requests are
// answered on goroutines of their own: a micro endpoint's handler runs on one goroutine per
// subscription, so one hanging answer would hold up every other request.
func (s *hookService) serveNATS(t *testing.T, nc *nats.Conn, names ...string) {
	svc, err := micro.AddService(nc, micro.Config{Name: "hooks_test", Version: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	for _, name := range names {
		err := svc.AddEndpoint(name, micro.HandlerFunc(func(req micro.Request) {
			go func() {
				var ev hooks.Event
				if err := json.Unmarshal(req.Data(), &ev); err != nil {
					_ = req.Error("400", err.Error(), nil)
					return
				}
				wait := 2 * hookTimeout * time.Millisecond // past the caller's timeout
				if name == "slowpoke" {
					wait = waitMargin // until released
				}
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				defer cancel()
				res, hang, fail := s.answer(ctx, name, ev)
				switch {
				case hang:
					<-ctx.Done() // too late: the caller gave up
					return
				case fail:
					_ = req.Error("500", "scripted failure", nil)
					return
				}
				_ = req.RespondJSON(res)
			}()
		}), micro.WithEndpointSubject("hooks."+name))
		if err != nil {
			t.Fatal(err)
		}
	}
}

// hookTools is hooktool: it answers "ran <text>" and records its runs.
type hookTools struct {
	mu   sync.Mutex
	runs []string
}

func (h *hookTools) tool() tools.Tool {
	return tools.Tool{
		Name: hookTool, Description: "Answers ran <text> (hook tests).", Source: "test", Idempotent: true,
		Parameters: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
		Execute: func(ctx context.Context, call tools.Call) (tools.Result, error) {
			s, _ := call.Args["text"].(string)
			h.mu.Lock()
			h.runs = append(h.runs, s)
			h.mu.Unlock()
			return tools.TextResult("ran " + s), nil
		},
	}
}

// hooksYAML is the ai.hooks block: soft and hard on every event they answer, slowpoke on
// message.received with a long timeout. target(name) is the url or nats line of a hook.
func hooksYAML(target func(name string) string) string {
	return fmt.Sprintf(`  hooks:
    - name: slowpoke
      events: [message:received]
      %[1]s
      secret: %[4]s
      timeoutMs: 600000
    - name: soft
      events: [message.received, message.sending, message.sent, tool.before, tool.after, session.new, session.compact, agent.bootstrap, context.transform]
      %[2]s
      secret: %[4]s
      timeoutMs: %[5]d
      onError: continue
    - name: hard
      events: [message.received, message.sending, tool.before, tool.after, agent.bootstrap, context.transform]
      %[3]s
      secret: %[4]s
      timeoutMs: %[5]d
      onError: block
`, target("slowpoke"), target("soft"), target("hard"), hookSecret, hookTimeout)
}

func TestHooksHTTP(t *testing.T) {
	svc := newHookService()
	srv := svc.serveHTTP(t)
	runHookMatrix(t, svc, func(name string) string { return "url: " + srv.URL + "/" + name }, nil)
}

func TestHooksNATS(t *testing.T) {
	svc := newHookService()
	runHookMatrix(t, svc, func(name string) string { return "nats: hooks." + name }, func(nc *nats.Conn) {
		svc.serveNATS(t, nc, "slowpoke", "soft", "hard")
	})
}

// runHookMatrix starts a pipeline with the hooks, posts every scenario at once and checks
// what each chat got, what the model saw, what the tool ran and what the hooks were told.
func runHookMatrix(t *testing.T, svc *hookService, target func(string) string, serve func(*nats.Conn)) {
	model := fakeopenai.New(t, hookScript)
	cb := newCallback(t)
	ht := &hookTools{}
	pl := newBgPipeline(t, model, cb, bgOpts{
		agent:      "    compaction: {keepRecentTokens: 10, minKeepCount: 1}\n",
		ai:         hooksYAML(target),
		extraTools: []tools.Tool{ht.tool()},
	})
	if serve != nil {
		serve(pl.p.NC)
	}
	pl.waitToolsServed()

	// A chat whose hook hangs (slowpoke, until released) holds up no other chat.
	pl.post(private("slow-1", "slow", "slow hello"))
	select {
	case <-svc.slowIn:
	case <-time.After(waitMargin):
		t.Fatal("slowpoke never got the slow chat's message")
	}

	scenarios := hookScenarios()
	for _, sc := range scenarios {
		for i, text := range sc.texts {
			pl.post(private(fmt.Sprintf("%s-%d", sc.scene, i), sc.scene, text))
		}
	}
	for _, sc := range scenarios {
		n := max(sc.replies, 1)
		got := pl.repliesIn(sc.scene, n)
		r := got[n-1].Text()
		if sc.prefix && !strings.HasPrefix(r, sc.want) || !sc.prefix && r != sc.want {
			t.Errorf("%s: reply %q, want %q", sc.scene, r, sc.want)
		}
	}
	select {
	case <-svc.slowDone:
		t.Fatal("slowpoke answered before it was released: the other chats waited for it?")
	default:
	}
	close(svc.release)
	if r := pl.repliesIn("slow", 1)[0].Text(); r != "echo: slow hello" {
		t.Errorf("slow: reply %q", r)
	}

	// Notifications: session.new on /reset, session.compact on /compact (a master's chat).
	for i, text := range []string{"invoice INV-1 is late", "and INV-2", "thanks"} {
		pl.post(private(fmt.Sprintf("boss-%d", i), master, text))
		pl.repliesIn(master, i+1)
	}
	pl.post(private("boss-compact", master, "/compact"))
	if r := pl.repliesIn(master, 4)[3].Text(); !strings.HasPrefix(r, "Compacted:") {
		t.Fatalf("/compact: %q", r)
	}
	pl.post(private("boss-reset", master, "/reset"))
	pl.repliesIn(master, 5)

	waitCalls := func(what string, n int, pred func(hookCall) bool) []hookCall {
		t.Helper()
		var got []hookCall
		testwait.Eventually(t, waitMargin, func() error {
			got = svc.callsOf(pred)
			return testwait.Want(len(got) >= n, "%s: %d hook calls, want %d", what, len(got), n)
		})
		return got
	}
	is := func(hook, event, scene string) func(hookCall) bool {
		return func(c hookCall) bool {
			return c.hook == hook && c.ev.Event == event && (scene == "" || sceneOf(c.ev.Session) == scene)
		}
	}
	compact := waitCalls("session.compact", 1, is("soft", hooks.SessionCompact, master))
	if s, _ := compact[0].ev.Data["summary"].(string); s == "" {
		t.Errorf("session.compact without its summary: %+v", compact[0].ev)
	}
	newEp := waitCalls("session.new", 1, is("soft", hooks.SessionNew, master))
	if !strings.HasSuffix(newEp[0].ev.Session, "#2") {
		t.Errorf("session.new for %q, want the new epoch #2", newEp[0].ev.Session)
	}
	// At least once, with the same id: the first message.sent failed and was tried again.
	sent := waitCalls("message.sent retried", 2, is("soft", hooks.MessageSent, "sent-retry"))
	if sent[0].ev.ID != sent[1].ev.ID || sent[0].ev.Data["text"] != "echo: sent-retry hello" {
		t.Errorf("message.sent: %+v then %+v, want the same id and the reply's text", sent[0].ev, sent[1].ev)
	}

	// What the model saw.
	for _, r := range model.Requests() {
		for _, sc := range scenarios {
			if sc.notSeen != "" && r.Contains(sc.notSeen) {
				t.Errorf("%s: the model saw %q", sc.scene, sc.notSeen)
			}
		}
	}
	// What the chats never got.
	for _, rep := range cb.all() {
		for _, sc := range scenarios {
			if rep.Scene.ID == sc.scene && (sc.notSeen != "" && strings.Contains(rep.Text(), sc.notSeen) || sc.notSent != "" && strings.Contains(rep.Text(), sc.notSent)) {
				t.Errorf("%s: the chat got %q", sc.scene, rep.Text())
			}
		}
	}
	// The tool never ran for a blocked call, ran with the changed arguments for tool-modify.
	ht.mu.Lock()
	runs := strings.Join(ht.runs, ",")
	ht.mu.Unlock()
	if strings.Count(runs, "y") != 1 {
		t.Errorf("tool runs %q: want exactly one with the changed argument y", runs)
	}
	// tool-continue, tool-hang-soft and the five after-* scenarios ran x; tool-block and
	// tool-hang-hard did not run it.
	if n := strings.Count(runs, "x"); n != 7 {
		t.Errorf("tool ran with x %d times (%q), want 7", n, runs)
	}

	// The bootstrap appendix was asked for once per session epoch and kept for its next turn.
	// A turn whose first attempt was cut off mid-request (its actor restarted on a loaded
	// machine) asks once more, with the same id: at least once, never under another id, and
	// never once per turn (the chat has three).
	if boot := svc.callsOf(is("soft", hooks.AgentBootstrap, "boot-modify")); len(boot) < 1 || len(boot) > 2 {
		t.Errorf("agent.bootstrap asked %d times for boot-modify, want 1 (2 if a turn restarted)", len(boot))
	} else if len(boot) == 2 && boot[0].ev.ID != boot[1].ev.ID {
		t.Errorf("agent.bootstrap asked under two ids %q and %q for one session epoch", boot[0].ev.ID, boot[1].ev.ID)
	}
	// Ids derive from the step's own ids.
	for _, c := range svc.callsOf(func(c hookCall) bool { return c.hook == "soft" }) {
		if !strings.HasPrefix(c.ev.ID, c.ev.Event+":") {
			t.Errorf("event id %q does not name its event %s", c.ev.ID, c.ev.Event)
		}
	}
	recv := svc.callsOf(is("soft", hooks.MessageReceived, "recv-continue"))
	if len(recv) != 1 || recv[0].ev.Sender == nil || recv[0].ev.Sender.ID != "recv-continue" || recv[0].ev.Data["text"] != "recv-continue hello" {
		t.Errorf("message.received calls for recv-continue: %+v", recv)
	}

	// Timeouts were counted.
	mf, err := pl.p.Metrics.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]float64{}
	for _, f := range mf {
		if f.GetName() != "agentbus_hook_calls_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			key := ""
			for _, l := range m.GetLabel() {
				key += l.GetName() + "=" + l.GetValue() + " "
			}
			counts[strings.TrimSpace(key)] = m.GetCounter().GetValue()
		}
	}
	for _, k := range []string{
		"event=message.received hook=soft outcome=timeout", "event=message.received hook=hard outcome=timeout",
		"event=tool.before hook=soft outcome=block", "event=context.transform hook=soft outcome=modify",
		"event=message.sent hook=soft outcome=error",
	} {
		if counts[k] < 1 {
			t.Errorf("agentbus_hook_calls_total{%s} = %v, want at least 1 (all: %v)", k, counts[k], counts)
		}
	}
}

// TestHooksPython runs the Python example of docs/hooks.md (standard library only) as the
// message.received hook, next to an in-process Go hook on message.sending (hooks.Register).
func TestHooksPython(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: the hook in another language cannot run")
	}
	doc, err := os.ReadFile("../../docs/hooks.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```python\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/hooks.md has no python block")
	}
	script := filepath.Join(t.TempDir(), "hook.py")
	if err := os.WriteFile(script, m[1], 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, script)
	cmd.Env = append(os.Environ(), "PORT=0", "HOOK_SECRET="+hookSecret)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the python hook did not start: %v", err)
	}
	port := strings.TrimSpace(strings.TrimPrefix(line, "listening on"))

	// The Go hook signs what this chat is sent; other tests' chats are left alone.
	unregister := hooks.Register("message:sending", func(ctx context.Context, ev *hooks.Event) (hooks.Result, error) {
		if sceneOf(ev.Session) != "py-user" {
			return hooks.Result{}, nil
		}
		text, _ := ev.Data["text"].(string)
		return hooks.Result{Action: hooks.Modify, Data: map[string]any{"text": text + " [go]"}}, nil
	})
	defer unregister()

	pl := newPipeline(t, fakeopenai.Echo, pipelineOpts{ai: fmt.Sprintf(`  hooks:
    - name: python
      events: [message.received]
      url: http://127.0.0.1:%s/hook
      secret: %s
      onError: block
`, port, hookSecret)})
	pl.post(private("py-1", "py-user", "hello darn world"))
	if r := pl.repliesIn("py-user", 1)[0].Text(); r != "echo: hello **** world [go]" {
		t.Errorf("reply %q, want the python hook's and the Go hook's changes", r)
	}
	pl.post(private("py-2", "py-user", "a forbidden topic"))
	if r := pl.repliesIn("py-user", 2)[1].Text(); r != "Let's not talk about that. [go]" {
		t.Errorf("reply %q, want the python hook's block reply (through the Go hook)", r)
	}
	for _, r := range pl.model.Requests() {
		if r.Contains("forbidden") || r.Contains("darn") {
			t.Errorf("the model saw what the hook blocked or masked:\n%s", r.Text())
		}
	}
}
