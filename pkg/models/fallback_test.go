package models

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/openai"
)

// chatServer speaks the OpenAI chat-completions wire format. The requested model decides the
// answer: rate-limited, overloaded, overflowing, unauthorized, failing mid-stream, or the
// recorded text stream.
func chatServer(t *testing.T) (*httptest.Server, *sync.Map) {
	t.Helper()
	var hits sync.Map // model -> count
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct{ Model string }
		json.Unmarshal(body, &req)
		n, _ := hits.LoadOrStore(req.Model, new(int))
		*(n.(*int))++
		errBody := func(status int, typ, msg string) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ}})
		}
		switch req.Model {
		case "busy", "busy-vision", "busy2":
			errBody(429, "rate_limit_exceeded", "Rate limit reached for requests")
		case "overloaded":
			errBody(529, "overloaded_error", "Overloaded")
		case "overflow":
			errBody(400, "invalid_request_error", "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.")
		case "badkey":
			errBody(401, "invalid_request_error", "Incorrect API key provided")
		case "midstream":
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"midstream","choices":[{"index":0,"delta":{"role":"assistant","content":"partial"},"finish_reason":null}]}`+"\n\n")
			io.WriteString(w, `data: {"error":{"message":"Overloaded","type":"overloaded_error"}}`+"\n\n")
		default:
			w.Header().Set("Content-Type", "text/event-stream")
			w.Write(fixture(t, "openai_text.sse"))
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func fallbackRegistry(t *testing.T, url string) *llm.Registry {
	t.Helper()
	yaml := strings.ReplaceAll(`
ai:
  providers:
    primary:
      api: openai-completions
      apiKey: sk-primary
      baseUrl: URL/v1
      models:
        - busy
        - overflow
        - badkey
        - midstream
        - overloaded
        - id: busy-vision
          input: [text, image]
    gone:
      api: openai-completions
      apiKey: sk-gone
      baseUrl: http://127.0.0.1:1/v1
      models: [gone-a, gone-b]
    backup:
      api: openai-completions
      apiKey: sk-backup
      baseUrl: URL/backup/v1
      models:
        - backup-model
        - id: backup-vision
          input: [text, image]
`, "URL", url)
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := NewRegistry(cfg.AI.Providers)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func TestFallback(t *testing.T) {
	srv, _ := chatServer(t)
	reg := fallbackRegistry(t, srv.URL)
	inner := openai.New(openai.WithMaxAttempts(1)) // no provider-level retries: fail fast
	text := &llm.Context{Messages: []llm.Message{llm.UserText("hi", 1)}}
	image := &llm.Context{Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Content{llm.Text("what is this?"), llm.Image("aGVsbG8=", "image/png")}}}}
	tests := []struct {
		name      string
		provider  string
		model     string
		c         *llm.Context
		opts      FallbackOptions
		wantModel string // provider/model of the final message
		wantText  string
		wantErr   string
		wantLog   string // "" = no fallback logged
	}{
		{name: "429 switches to the preferred candidate", provider: "primary", model: "busy", c: text,
			opts:      FallbackOptions{Preferred: []string{"backup:backup-model"}},
			wantModel: "backup/backup-model", wantText: "Hello from the backup",
			wantLog: "fallback: primary/busy→backup/backup-model"},
		{name: "529 overloaded switches too", provider: "primary", model: "overloaded", c: text,
			opts:      FallbackOptions{SameProviderOnly: false, Preferred: []string{"backup:backup-model"}},
			wantModel: "backup/backup-model", wantText: "Hello from the backup",
			wantLog: "fallback: primary/overloaded→backup/backup-model"},
		{name: "unreachable provider: its other models are skipped", provider: "gone", model: "gone-a", c: text,
			wantModel: "backup/backup-model", wantText: "Hello from the backup",
			wantLog: "fallback: gone/gone-a→backup/backup-model"},
		{name: "vision turn falls back along vision candidates", provider: "primary", model: "busy-vision", c: image,
			wantModel: "backup/backup-vision", wantText: "Hello from the backup",
			wantLog: "fallback: primary/busy-vision→backup/backup-vision"},
		{name: "context overflow is not a reason", provider: "primary", model: "overflow", c: text,
			opts:    FallbackOptions{Preferred: []string{"backup:backup-model"}},
			wantErr: "maximum context length"},
		{name: "401 is not a reason", provider: "primary", model: "badkey", c: text,
			opts:    FallbackOptions{Preferred: []string{"backup:backup-model"}},
			wantErr: "Incorrect API key"},
		{name: "failure after content is passed through", provider: "primary", model: "midstream", c: text,
			opts:    FallbackOptions{Preferred: []string{"backup:backup-model"}},
			wantErr: "Overloaded", wantText: "partial"},
		{name: "no candidate left", provider: "primary", model: "busy", c: text,
			opts:    FallbackOptions{Candidates: func(*llm.Model, Kind) []llm.Model { return nil }},
			wantErr: "no fallback left; tried primary/busy"},
		{name: "MaxAttempts 1 disables fallback", provider: "primary", model: "busy", c: text,
			opts:    FallbackOptions{MaxAttempts: 1, Preferred: []string{"backup:backup-model"}},
			wantErr: "Rate limit reached"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			o := tt.opts
			o.Registry, o.Stream, o.Log = reg, inner.Stream, slog.New(slog.NewTextHandler(&logs, nil))
			f := NewFallback(o)
			model, err := reg.GetModel(tt.provider, tt.model)
			if err != nil {
				t.Fatal(err)
			}
			var final *llm.Message
			starts, terminals := 0, 0
			var deltas strings.Builder
			for ev := range f.Stream(context.Background(), model, tt.c, &llm.StreamOptions{APIKey: reg.APIKey(tt.provider)}) {
				switch ev.Type {
				case llm.EventStart:
					starts++
				case llm.EventTextDelta:
					deltas.WriteString(ev.Delta)
				case llm.EventDone, llm.EventError:
					terminals++
					final = ev.Message
				}
			}
			if starts != 1 || terminals != 1 {
				t.Errorf("starts=%d terminals=%d, want one model's events only", starts, terminals)
			}
			if tt.wantErr != "" {
				if final.StopReason != llm.StopReasonError || !strings.Contains(final.ErrorMessage, tt.wantErr) {
					t.Errorf("final = %s %q, want error containing %q", final.StopReason, final.ErrorMessage, tt.wantErr)
				}
			} else if final.StopReason != llm.StopReasonStop {
				t.Errorf("final = %s %q", final.StopReason, final.ErrorMessage)
			}
			if tt.wantModel != "" && final.Provider+"/"+final.Model != tt.wantModel {
				t.Errorf("answered by %s/%s, want %s", final.Provider, final.Model, tt.wantModel)
			}
			if deltas.String() != tt.wantText || (tt.wantErr == "" && final.TextContent() != tt.wantText) {
				t.Errorf("text deltas %q final %q, want %q", deltas.String(), final.TextContent(), tt.wantText)
			}
			if tt.wantLog == "" {
				if strings.Contains(logs.String(), "fallback") {
					t.Errorf("unexpected fallback: %s", logs.String())
				}
			} else if !strings.Contains(logs.String(), `msg="`+tt.wantLog+`"`) || strings.Count(logs.String(), `msg="fallback:`) != 1 {
				t.Errorf("log lacks %q (exactly one switch):\n%s", tt.wantLog, logs.String())
			}
			if strings.Contains(logs.String(), "sk-") {
				t.Errorf("log leaks a key: %s", logs.String())
			}
		})
	}
}

func TestFallbackReason(t *testing.T) {
	msg := func(s string) *llm.Message {
		return &llm.Message{StopReason: llm.StopReasonError, ErrorMessage: s}
	}
	tests := []struct {
		m    *llm.Message
		want string
	}{
		{msg("openai-completions x: request failed: HTTP 429 Too Many Requests: slow down"), ReasonRateLimit},
		{msg("HTTP 529: Overloaded"), ReasonOverloaded},
		{msg("HTTP 503 Service Unavailable (after 4 attempts)"), ReasonUnavailable},
		{msg("HTTP 500 Internal Server Error: the server is overloaded"), ReasonOverloaded},
		{msg(`Post "http://127.0.0.1:1/v1/chat/completions": dial tcp 127.0.0.1:1: connect: connection refused`), ReasonUnreachable},
		{msg("Error 429: RESOURCE_EXHAUSTED"), ReasonRateLimit},
		{msg("HTTP 400 Bad Request: prompt is too long: 210000 tokens > 200000 maximum"), ""},
		{msg("HTTP 404 Not Found: model not found"), ""},
		{msg("HTTP 400: rate limit header malformed"), ""}, // a 4xx decides, not the words
		{msg("tool call 1 arguments are not valid JSON"), ""},
		{&llm.Message{StopReason: llm.StopReasonAborted, ErrorMessage: "context canceled"}, ""},
		{&llm.Message{StopReason: llm.StopReasonStop}, ""},
		{nil, ""},
	}
	for _, tt := range tests {
		got, ok := FallbackReason(tt.m)
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("FallbackReason(%v) = %q %v, want %q", tt.m, got, ok, tt.want)
		}
	}
}

func TestCandidates(t *testing.T) {
	srv, _ := chatServer(t)
	reg := fallbackRegistry(t, srv.URL)
	m, _ := reg.GetModel("primary", "busy")
	got := Candidates(reg, nil, m, KindChat, CandidateOptions{Preferred: []string{"backup:backup-vision", "nope:x", "bad-ref"}, PerProvider: 1})
	// Preferred first (unresolvable refs skipped), then the provider's own best, then one per
	// other provider (equal tiers: alias order).
	want := []string{"backup/backup-vision", "primary/overflow", "backup/backup-model", "gone/gone-a"}
	var refs []string
	for i := range got {
		refs = append(refs, modelRef(&got[i]))
	}
	if strings.Join(refs, " ") != strings.Join(want, " ") {
		t.Errorf("candidates = %v, want %v", refs, want)
	}
}
