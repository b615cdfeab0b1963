package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
)

// startWithModel runs what `agentbus up` runs, on a free port, with a fake OpenAI-compatible
// model answering script.
func startWithModel(t *testing.T, script fakeopenai.Script) *app.Process {
	t.Helper()
	model := fakeopenai.New(t, script)
	dir := t.TempDir()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`dataDir: %s
nats: {listen: "127.0.0.1:0", storeDir: %s}
ai:
  providers:
    fake: {api: openai-completions, baseUrl: "%s", apiKey: test}
  agents:
    zhin: {provider: fake, model: m1}
  agent: {workspace: %s}
`, dir, filepath.Join(dir, "nats"), model.BaseURL(), filepath.Join(dir, "workspace"))))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := app.Start(ctx, cfg, app.Options{Roles: app.AllRoles, Out: io.Discard, NoProbe: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	return p
}

// syncBuffer is a bytes.Buffer safe to read while the chat writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Replies stream and print once, each on its own line ending in a newline; two turns that
// stream at the same time come out one after the other, never interleaved.
func TestChatRepliesOnceAndWhole(t *testing.T) {
	words := func(w string, n int) string { return strings.TrimSpace(strings.Repeat(w+" ", n)) }
	replies := map[string]string{"one": words("alpha", 30), "two": words("bravo", 30), "three": "short answer"}
	p := startWithModel(t, func(r *fakeopenai.Request) fakeopenai.Reply {
		text := replies[r.LastUser()]
		if text == "" {
			text = "echo: " + r.LastUser()
		}
		// Slow, many deltas, so that the turns of "one" and "two" stream at the same time.
		return fakeopenai.Reply{Text: text, Chunks: 15, ChunkDelay: 40 * time.Millisecond}
	})
	var out syncBuffer
	in := strings.NewReader("one\ntwo\nthree\n")
	if err := cmdChat(context.Background(), []string{"--data", p.Config.DataDir, "--user", "ann", "--wait", "90s"}, in, &out); err != nil {
		t.Fatalf("chat: %v\n%s", err, out.String())
	}
	got := out.String()
	if !strings.HasSuffix(got, "\n") {
		t.Errorf("output does not end with a newline: %q", got)
	}
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	want := map[string]bool{}
	for _, r := range replies {
		want["bot> "+r] = false
	}
	for _, l := range lines[1:] { // lines[0] is "connected to ..."
		if _, ok := want[l]; !ok {
			t.Errorf("unexpected line %q", l)
			continue
		}
		if want[l] {
			t.Errorf("printed twice: %q", l)
		}
		want[l] = true
	}
	for l, seen := range want {
		if !seen {
			t.Errorf("missing line %q", l)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", got)
	}
}

// When the server stops under a running chat, the chat ends at once with a message that says
// so, not with a timeout.
func TestChatEndsWhenServerStops(t *testing.T) {
	p := startWithModel(t, fakeopenai.Echo)
	pr, pw := io.Pipe()
	defer pw.Close()
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- cmdChat(context.Background(), []string{"--data", p.Config.DataDir, "--user", "cy"}, pr, &out)
	}()
	go func() { _, _ = io.WriteString(pw, "are you there\n") }() // blocks until the chat reads it
	testwait.Eventually(t, 0, func() error {
		select {
		case err := <-done:
			t.Fatalf("chat ended before the reply: %v\n%s", err, out.String())
		default:
		}
		return testwait.Want(strings.Contains(out.String(), "bot> echo: are you there\n"), "no reply yet:\n%s", out.String())
	})
	start := time.Now()
	_ = p.Stop(context.Background())
	select {
	case err := <-done:
		if !errors.Is(err, errBusGone) || strings.Contains(err.Error(), "deadline") {
			t.Fatalf("chat ended with %v, want %v", err, errBusGone)
		}
		t.Logf("chat ended %s after the server stopped: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(60 * time.Second):
		t.Fatal("chat still running 60s after the server stopped")
	}
}

// The view on its own: deltas of two turns arrive interleaved, final parts arrive before or
// after the last deltas, out-of-order and non-text deltas are dropped.
func TestChatView(t *testing.T) {
	d := func(seq uint64, msg int, s string) events.LiveDelta {
		return events.LiveDelta{Kind: "text_delta", Seq: seq, Message: msg, Delta: s}
	}
	part := func(turn string, n int, text string, final bool) events.Outbound {
		return events.Outbound{Turn: turn, Part: n, Final: final, Content: events.Segments{events.TextSeg(text)}}
	}
	type step struct {
		turn  string
		delta *events.LiveDelta
		part  *events.Outbound
	}
	D := func(turn string, ld events.LiveDelta) step { return step{turn: turn, delta: &ld} }
	P := func(o events.Outbound) step { return step{part: &o} }
	tests := []struct {
		name  string
		steps []step
		want  string
	}{
		{"streamed then final", []step{D("a", d(1, 0, "hel")), D("a", d(2, 0, "lo")), P(part("a", 0, "hello", true))}, "bot> hello\n"},
		{"final completes the stream", []step{D("a", d(1, 0, "hel")), P(part("a", 0, "hello", true))}, "bot> hello\n"},
		{"final only", []step{P(part("a", 0, "hi", true))}, "bot> hi\n"},
		{"two parts", []step{P(part("a", 0, "ab", false)), P(part("a", 1, "cd", true))}, "bot> abcd\n"},
		{"streamed two parts", []step{D("a", d(1, 0, "abcd")), P(part("a", 0, "ab", false)), P(part("a", 1, "cd", true))}, "bot> abcd\n"},
		{"second message of a turn", []step{D("a", d(1, 0, "calling a tool")), D("a", d(2, 1, "done")), P(part("a", 0, "done", true))},
			"bot> calling a tool\n     done\n"},
		{"final differs from the stream", []step{D("a", d(1, 0, "partial")), P(part("a", 0, "⚠️ The model failed: x", true))},
			"bot> partial\n     ⚠️ The model failed: x\n"},
		{"out of order and thinking dropped", []step{D("a", d(2, 0, "ab")), D("a", d(1, 0, "zz")),
			D("a", events.LiveDelta{Kind: "thinking_delta", Seq: 3, Delta: "hmm"}), P(part("a", 0, "ab", true))}, "bot> ab\n"},
		{"interleaved turns", []step{D("a", d(1, 0, "a1 ")), D("b", d(1, 0, "b1 ")), D("a", d(2, 0, "a2")), D("b", d(2, 0, "b2")),
			P(part("b", 0, "b1 b2", true)), P(part("a", 0, "a1 a2", true))}, "bot> a1 a2\nbot> b1 b2\n"},
		{"held turn goes on live", []step{D("a", d(1, 0, "a1")), D("b", d(1, 0, "b1")), P(part("a", 0, "a1", true)),
			D("b", d(2, 0, " b2")), P(part("b", 0, "b1 b2", true))}, "bot> a1\nbot> b1 b2\n"},
		{"late delta after final", []step{P(part("a", 0, "x", true)), D("a", d(5, 0, "late"))}, "bot> x\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			v := newChatView(&b)
			for _, s := range tt.steps {
				if s.delta != nil {
					v.delta(s.turn, *s.delta)
				} else {
					v.part(*s.part)
				}
			}
			if b.String() != tt.want {
				t.Errorf("got %q, want %q", b.String(), tt.want)
			}
		})
	}
}
