package hooks_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/hooks"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/webhook"
)

func TestEventNamesMatchConfig(t *testing.T) {
	ours := []string{hooks.MessageReceived, hooks.MessageSending, hooks.MessageSent, hooks.ToolBefore, hooks.ToolAfter,
		hooks.SessionNew, hooks.SessionCompact, hooks.AgentBootstrap, hooks.ContextTransform}
	if !slices.Equal(ours, config.HookEventNames) {
		t.Fatalf("pkg/hooks names %v, pkg/config names %v", ours, config.HookEventNames)
	}
	for alias, want := range map[string]string{"message:received": hooks.MessageReceived, "tool:call": hooks.ToolBefore,
		"ai.session.compact": hooks.SessionCompact, "transformContext": hooks.ContextTransform} {
		if got, ok := config.HookEvent(alias); !ok || got != want {
			t.Errorf("alias %s = %q, want %s", alias, got, want)
		}
	}
}

// server is an HTTP hook that answers with answer(ev), verifying the signature when secret is
// set, and records the events.
type server struct {
	*httptest.Server
	mu  sync.Mutex
	got []hooks.Event
}

func newServer(t *testing.T, secret string, answer func(w http.ResponseWriter, ev hooks.Event)) *server {
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if secret != "" {
			if _, _, err := webhook.VerifyStandard(secret, body, r.Header, time.Now(), 0); err != nil {
				http.Error(w, err.Error(), http.StatusUnauthorized)
				return
			}
		}
		if r.Header.Get(hooks.HeaderEvent) == "" {
			http.Error(w, "no event header", http.StatusBadRequest)
			return
		}
		var ev hooks.Event
		if err := json.Unmarshal(body, &ev); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.got = append(s.got, ev)
		s.mu.Unlock()
		answer(w, ev)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) events() []hooks.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

func respond(v any) func(http.ResponseWriter, hooks.Event) {
	return func(w http.ResponseWriter, _ hooks.Event) { _ = json.NewEncoder(w).Encode(v) }
}

func TestRunAnswers(t *testing.T) {
	hang := func(w http.ResponseWriter, _ hooks.Event) { time.Sleep(2 * time.Second) } // a hook slower than its timeout
	fail := func(w http.ResponseWriter, _ hooks.Event) { http.Error(w, "no", http.StatusInternalServerError) }
	cases := []struct {
		name    string
		event   string
		answers []func(http.ResponseWriter, hooks.Event) // one hook each, in order
		onError string
		blocked bool
		reply   string
		text    string // data.text after the chain
	}{
		{"continue", hooks.MessageReceived, []func(http.ResponseWriter, hooks.Event){respond(hooks.Result{Action: "continue"})}, "", false, "", "hi"},
		{"empty body is continue", hooks.MessageReceived, []func(http.ResponseWriter, hooks.Event){func(w http.ResponseWriter, _ hooks.Event) {}}, "", false, "", "hi"},
		{"modify then the next hook sees it", hooks.MessageReceived, []func(http.ResponseWriter, hooks.Event){
			respond(hooks.Result{Action: "modify", Data: map[string]any{"text": "HI", "other": "ignored"}}),
			func(w http.ResponseWriter, ev hooks.Event) {
				_ = json.NewEncoder(w).Encode(hooks.Result{Action: "modify", Data: map[string]any{"text": ev.Data["text"].(string) + "!"}})
			}}, "", false, "", "HI!"},
		{"block stops the chain", hooks.MessageReceived, []func(http.ResponseWriter, hooks.Event){
			respond(hooks.Result{Action: "block", Reply: "no"}), respond(hooks.Result{Action: "modify", Data: map[string]any{"text": "late"}})}, "", true, "no", "hi"},
		{"block of a notification-like event is continue", hooks.ToolAfter, []func(http.ResponseWriter, hooks.Event){respond(hooks.Result{Action: "block"})}, "", false, "", "hi"},
		{"fields other events own are not applied", hooks.ToolAfter, []func(http.ResponseWriter, hooks.Event){respond(hooks.Result{Action: "modify", Data: map[string]any{"text": "x"}})}, "", false, "", "hi"},
		{"failure, onError continue", hooks.MessageReceived, []func(http.ResponseWriter, hooks.Event){fail}, "continue", false, "", "hi"},
		{"failure, onError block", hooks.MessageReceived, []func(http.ResponseWriter, hooks.Event){fail}, "block", true, "", "hi"},
		{"timeout, onError continue", hooks.MessageReceived, []func(http.ResponseWriter, hooks.Event){hang}, "continue", false, "", "hi"},
		{"timeout, onError block", hooks.MessageReceived, []func(http.ResponseWriter, hooks.Event){hang}, "block", true, "", "hi"},
		{"unknown action is a failure", hooks.MessageReceived, []func(http.ResponseWriter, hooks.Event){respond(hooks.Result{Action: "maybe"})}, "block", true, "", "hi"},
		{"not JSON is a failure", hooks.MessageReceived, []func(http.ResponseWriter, hooks.Event){func(w http.ResponseWriter, _ hooks.Event) { _, _ = w.Write([]byte("<html>")) }}, "block", true, "", "hi"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var cfgs []config.Hook
			for i, a := range c.answers {
				srv := newServer(t, "whsec_c2VjcmV0", a)
				cfgs = append(cfgs, config.Hook{Name: string(rune('a' + i)), Events: []string{c.event}, URL: srv.URL, Secret: "whsec_c2VjcmV0", TimeoutMs: 200, OnError: c.onError})
			}
			r, err := hooks.New(cfgs, hooks.Options{Registry: &hooks.Registry{}})
			if err != nil {
				t.Fatal(err)
			}
			ev := &hooks.Event{Event: c.event, ID: hooks.ID(c.event, "s", "1"), Data: map[string]any{"text": "hi"}}
			out := r.Run(context.Background(), ev)
			if out.Blocked != c.blocked || out.Reply != c.reply || ev.Data["text"] != c.text {
				t.Fatalf("outcome %+v, text %v; want blocked=%v reply=%q text=%q", out, ev.Data["text"], c.blocked, c.reply, c.text)
			}
			if c.blocked && c.reply == "" && out.Err == nil {
				t.Fatalf("a block by failure carries no error: %+v", out)
			}
		})
	}
}

func TestTimeoutIsReported(t *testing.T) {
	srv := newServer(t, "", func(w http.ResponseWriter, _ hooks.Event) { time.Sleep(time.Second) }) // far past the 50 ms timeout
	r, _ := hooks.New([]config.Hook{{Name: "slow", Events: []string{hooks.ToolBefore}, URL: srv.URL, TimeoutMs: 50, OnError: "block"}}, hooks.Options{Registry: &hooks.Registry{}})
	_, out := r.ToolBefore(context.Background(), &hooks.Event{ID: "x"}, "t", "c", map[string]any{})
	if !out.Blocked || !errors.Is(out.Err, hooks.ErrTimeout) {
		t.Fatalf("outcome %+v, want blocked by ErrTimeout", out)
	}
}

func TestInProcess(t *testing.T) {
	reg := &hooks.Registry{}
	var order []string
	var mu sync.Mutex
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	srv := newServer(t, "", func(w http.ResponseWriter, ev hooks.Event) {
		note("http")
		_ = json.NewEncoder(w).Encode(hooks.Result{Action: "modify", Data: map[string]any{"arguments": map[string]any{"n": 2.0}}})
	})
	un := reg.Register("tool:before", func(ctx context.Context, ev *hooks.Event) (hooks.Result, error) {
		note("go")
		n := ev.Data["arguments"].(map[string]any)["n"].(float64)
		return hooks.Result{Action: hooks.Modify, Data: map[string]any{"arguments": map[string]any{"n": n * 10}}}, nil
	})
	reg.RegisterWith(hooks.ToolBefore, func(ctx context.Context, ev *hooks.Event) (hooks.Result, error) {
		<-ctx.Done() // ignores nothing: ends at its timeout
		return hooks.Result{}, ctx.Err()
	}, hooks.RegisterOptions{Name: "sleepy", Timeout: 30 * time.Millisecond})
	reg.RegisterWith(hooks.ToolBefore, func(ctx context.Context, ev *hooks.Event) (hooks.Result, error) {
		panic("boom")
	}, hooks.RegisterOptions{Name: "panicky"})
	r, _ := hooks.New([]config.Hook{{Name: "h", Events: []string{hooks.ToolBefore}, URL: srv.URL}}, hooks.Options{Registry: reg})
	args, out := r.ToolBefore(context.Background(), &hooks.Event{ID: "x"}, "t", "c", map[string]any{"n": 1.0})
	if out.Blocked || args["n"] != 20.0 || strings.Join(order, ",") != "http,go" {
		t.Fatalf("args %v, outcome %+v, order %v: want the configured hook first, then the Go one", args, out, order)
	}
	un()
	if !r.Has(hooks.ToolBefore) || r.Has(hooks.ToolAfter) {
		t.Fatal("Has does not follow the hooks")
	}
	args, _ = r.ToolBefore(context.Background(), &hooks.Event{ID: "x"}, "t", "c", map[string]any{"n": 1.0})
	if args["n"] != 2.0 {
		t.Fatalf("after unregister: args %v", args)
	}
}

func TestBootstrapOncePerID(t *testing.T) {
	srv := newServer(t, "", respond(hooks.Result{Action: "modify", Data: map[string]any{"systemPrompt": "Be brief."}}))
	r, _ := hooks.New([]config.Hook{{Name: "b", Events: []string{"agent:bootstrap"}, URL: srv.URL}}, hooks.Options{Registry: &hooks.Registry{}})
	for i, base := range []string{"You are zhin.\n", "You are zhin, with tools."} {
		got, err := r.Bootstrap(context.Background(), &hooks.Event{ID: hooks.ID(hooks.AgentBootstrap, "s#1")}, base)
		if err != nil {
			t.Fatal(err)
		}
		if want := strings.TrimRight(base, "\n") + "\n\nBe brief."; got != want {
			t.Fatalf("prompt %d %q, want %q", i, got, want)
		}
	}
	if n := len(srv.events()); n != 1 {
		t.Fatalf("asked %d times for one id, want once", n)
	}
}

func TestTransformRoundTrip(t *testing.T) {
	srv := newServer(t, "", func(w http.ResponseWriter, ev hooks.Event) {
		msgs := ev.Data["messages"].([]any)
		_ = json.NewEncoder(w).Encode(hooks.Result{Action: "modify", Data: map[string]any{"messages": msgs[len(msgs)-1:]}})
	})
	r, _ := hooks.New([]config.Hook{{Name: "c", Events: []string{hooks.ContextTransform}, URL: srv.URL}}, hooks.Options{Registry: &hooks.Registry{}})
	in := []llm.Message{llm.UserText("old", 1), llm.UserText("new", 2)}
	out, err := r.Transform(context.Background(), &hooks.Event{ID: "x"}, in)
	if err != nil || len(out) != 1 || out[0].TextContent() != "new" || out[0].Role != llm.RoleUser {
		t.Fatalf("transform: %+v, %v", out, err)
	}
}

func TestNotifyRetriesWithTheSameID(t *testing.T) {
	var mu sync.Mutex
	n := 0
	srv := newServer(t, "", func(w http.ResponseWriter, ev hooks.Event) {
		mu.Lock()
		n++
		first := n == 1
		mu.Unlock()
		if first {
			http.Error(w, "down", http.StatusServiceUnavailable)
		}
	})
	r, _ := hooks.New([]config.Hook{{Name: "n", Events: []string{hooks.MessageSent}, URL: srv.URL}}, hooks.Options{Registry: &hooks.Registry{}})
	r.Notify(&hooks.Event{Event: hooks.MessageSent, ID: "message.sent:s:t1-0"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(srv.events()) < 2 {
		select {
		case <-ctx.Done():
			t.Fatalf("%d deliveries, want a retry", len(srv.events()))
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got := srv.events()
	if len(got) != 2 || got[0].ID != got[1].ID {
		t.Fatalf("deliveries %+v, want two with the same id", got)
	}
}

func TestNilRunner(t *testing.T) {
	var r *hooks.Runner
	if r.Has(hooks.MessageReceived) {
		t.Fatal("nil runner has hooks")
	}
	if out := r.Run(context.Background(), &hooks.Event{Event: hooks.MessageReceived}); out.Blocked || out.Modified {
		t.Fatalf("nil runner: %+v", out)
	}
	r.Notify(&hooks.Event{Event: hooks.MessageSent})
}

// BenchmarkRunHTTP is one signed call to a local HTTP hook that answers continue.
func BenchmarkRunHTTP(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		_, _ = w.Write([]byte(`{"action":"continue"}`))
	}))
	defer srv.Close()
	r, _ := hooks.New([]config.Hook{{Name: "b", Events: []string{hooks.MessageReceived}, URL: srv.URL, Secret: "whsec_c2VjcmV0"}}, hooks.Options{Registry: &hooks.Registry{}})
	b.ReportAllocs()
	for i := range b.N {
		_ = i
		r.Run(context.Background(), &hooks.Event{Event: hooks.MessageReceived, ID: "x", Data: map[string]any{"text": "hello"}})
	}
}
