package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// keys returns the top-level keys of a JSON object line in order, repeats included.
func keys(t *testing.T, line string) []string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not a JSON object: %q", line)
	}
	var out []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("%v: %q", err, line)
		}
		out = append(out, tok.(string))
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%v: %q", err, line)
		}
	}
	return out
}

func TestJSONKeysUnique(t *testing.T) {
	tests := []struct {
		name string
		log  func(l *slog.Logger)
		want map[string]any // values the line must have
	}{
		{"role set by the binary and again by the role", func(l *slog.Logger) {
			l.With("role", "turn-worker").With("role", "turn-worker", "worker", "w1").Info("running")
		}, map[string]any{"role": "turn-worker", "worker": "w1", "msg": "running"}},
		{"later value wins", func(l *slog.Logger) {
			l.With("session", "a").Info("x", "session", "b")
		}, map[string]any{"session": "b"}},
		{"an attribute named msg does not overwrite the message", func(l *slog.Logger) {
			l.Info("ingested", "msg", "platform-id-1")
		}, map[string]any{"msg": "ingested", "attr_msg": "platform-id-1"}},
		{"built-in keys in With", func(l *slog.Logger) {
			l.With("level", "x", "time", "y").Warn("w")
		}, map[string]any{"level": "WARN", "attr_level": "x", "attr_time": "y"}},
		{"groups stay qualified", func(l *slog.Logger) {
			l.With("role", "a").WithGroup("g").Info("x", "role", "b")
		}, map[string]any{"role": "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			l, err := New(&b, "json", "info")
			if err != nil {
				t.Fatal(err)
			}
			tt.log(l)
			line := strings.TrimSpace(b.String())
			seen := map[string]bool{}
			for _, k := range keys(t, line) {
				if seen[k] {
					t.Errorf("key %q twice: %s", k, line)
				}
				seen[k] = true
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.want {
				if m[k] != v {
					t.Errorf("%s = %v, want %v: %s", k, m[k], v, line)
				}
			}
		})
	}
}

// A library that logs with only the context it was given (pkg/llm's retry warning) names the
// session, turn and provider the caller put on the context; keys the line has win.
func TestContextAttrs(t *testing.T) {
	var b bytes.Buffer
	l, err := New(&b, "json", "debug")
	if err != nil {
		t.Fatal(err)
	}
	ctx := With(context.Background(), "session", "webhook:b1:private:u1", "turn", "t7")
	ctx = With(ctx, "provider", "openai", "model", "gpt-x", "turn", "t8")
	l.LogAttrs(ctx, slog.LevelWarn, "llm request failed, retrying", slog.Int("attempt", 1))
	l.With("provider", "mine").WarnContext(ctx, "fallback")
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	var first, second map[string]any
	_ = json.Unmarshal([]byte(lines[0]), &first)
	_ = json.Unmarshal([]byte(lines[1]), &second)
	for k, v := range map[string]any{"session": "webhook:b1:private:u1", "turn": "t8", "provider": "openai", "model": "gpt-x", "attempt": float64(1)} {
		if first[k] != v {
			t.Errorf("%s = %v, want %v: %s", k, first[k], v, lines[0])
		}
	}
	if second["provider"] != "mine" || second["session"] != "webhook:b1:private:u1" {
		t.Errorf("the logger's own provider must win over the context's: %s", lines[1])
	}
	for _, line := range lines {
		seen := map[string]bool{}
		for _, k := range keys(t, line) {
			if seen[k] {
				t.Errorf("key %q twice: %s", k, line)
			}
			seen[k] = true
		}
	}
	// Logged without the context: nothing of it.
	b.Reset()
	l.Warn("plain")
	if strings.Contains(b.String(), "session") {
		t.Errorf("a line logged without the context carries its attributes: %s", b.String())
	}
}

func TestNewRejectsUnknown(t *testing.T) {
	if _, err := New(&bytes.Buffer{}, "xml", ""); err == nil {
		t.Error("log.format xml accepted")
	}
	if _, err := New(&bytes.Buffer{}, "", "loud"); err == nil {
		t.Error("log.level loud accepted")
	}
	var b bytes.Buffer
	l, err := New(&b, "", "warn")
	if err != nil {
		t.Fatal(err)
	}
	l.Info("hidden")
	l.Warn("shown", "k", "v")
	if out := b.String(); strings.Contains(out, "hidden") || !strings.Contains(out, "level=WARN msg=shown k=v") {
		t.Errorf("text at warn: %q", out)
	}
}
