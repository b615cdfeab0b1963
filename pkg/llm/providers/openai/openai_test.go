package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/llm"
)

// reply is one scripted HTTP answer of the fake server.
type reply struct {
	status  int
	header  map[string]string
	body    string // raw body, or
	fixture string // a testdata/*.sse file
	hold    bool   // keep the stream open until the client goes away
}

// fakeServer speaks the chat completions wire format from recorded fixtures and records what
// it received.
type fakeServer struct {
	*httptest.Server
	mu       sync.Mutex
	replies  []reply
	calls    int
	bodies   []map[string]any
	headers  []http.Header
	released chan struct{} // closed when a held stream saw its client go away
}

func newServer(t *testing.T, replies ...reply) *fakeServer {
	t.Helper()
	fs := &fakeServer{replies: replies, released: make(chan struct{})}
	fs.Server = httptest.NewServer(http.HandlerFunc(fs.handle(t)))
	t.Cleanup(fs.Close)
	return fs
}

func (fs *fakeServer) handle(t *testing.T) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
			http.Error(w, `{"error":{"message":"unexpected `+r.Method+` `+r.URL.Path+`"}}`, http.StatusNotFound)
			return
		}
		var body map[string]any
		raw, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Errorf("request body is not JSON: %v: %s", err, raw)
		}
		fs.mu.Lock()
		i := fs.calls
		fs.calls++
		fs.bodies = append(fs.bodies, body)
		fs.headers = append(fs.headers, r.Header.Clone())
		rep := fs.replies[min(i, len(fs.replies)-1)]
		fs.mu.Unlock()

		data := rep.body
		if rep.fixture != "" {
			b, err := os.ReadFile(filepath.Join("testdata", rep.fixture))
			if err != nil {
				t.Errorf("fixture: %v", err)
			}
			data = string(b)
		}
		status := rep.status
		if status == 0 {
			status = http.StatusOK
		}
		if status < 400 {
			w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
			w.Header().Set("Cache-Control", "no-cache")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		for k, v := range rep.header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, data)
		w.(http.Flusher).Flush()
		if rep.hold {
			<-r.Context().Done()
			close(fs.released)
		}
	}
}

func (fs *fakeServer) lastBody(t *testing.T) map[string]any {
	t.Helper()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if len(fs.bodies) == 0 {
		t.Fatal("server received no request")
	}
	return fs.bodies[len(fs.bodies)-1]
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func testProvider() *Provider {
	return New(WithBackoff(time.Millisecond, 2*time.Millisecond), WithMaxAttempts(3), WithLogger(quiet))
}

func testModel(srv *fakeServer) *llm.Model {
	return &llm.Model{
		ID: "test-model", API: llm.APIOpenAICompletions, Provider: "test", BaseURL: srv.URL + "/v1",
		Cost: llm.ModelCost{Input: 2, Output: 8, CacheRead: 0.5}, ContextWindow: 128000, MaxTokens: 4096,
	}
}

func hello() *llm.Context {
	return &llm.Context{SystemPrompt: "You are terse.", Messages: []llm.Message{llm.UserText("hi", 1)}}
}

// collect drains a stream, checks the invariants every stream must keep, and returns the
// event types and the final message.
func collect(t *testing.T, seq func(func(llm.Event) bool)) ([]llm.Event, []string, *llm.Message) {
	t.Helper()
	var evs []llm.Event
	var types []string
	open := map[int]llm.EventType{}
	for ev := range seq {
		evs = append(evs, ev)
		types = append(types, string(ev.Type))
		terminal := ev.Type == llm.EventDone || ev.Type == llm.EventError
		if !terminal && ev.Partial == nil {
			t.Errorf("%s event without Partial", ev.Type)
		}
		if terminal && ev.Message == nil {
			t.Errorf("%s event without Message", ev.Type)
		}
		switch ev.Type {
		case llm.EventTextStart, llm.EventThinkingStart, llm.EventToolCallStart:
			open[ev.ContentIndex] = ev.Type
		case llm.EventTextEnd, llm.EventThinkingEnd, llm.EventToolCallEnd:
			if _, ok := open[ev.ContentIndex]; !ok {
				t.Errorf("%s for block %d that is not open", ev.Type, ev.ContentIndex)
			}
			delete(open, ev.ContentIndex)
		case llm.EventToolCallDelta:
			if _, ok := open[ev.ContentIndex]; !ok {
				t.Errorf("toolcall_delta for block %d that is not open", ev.ContentIndex)
			}
			if ev.Partial.Content[ev.ContentIndex].Arguments == nil {
				t.Errorf("toolcall_delta with nil arguments")
			}
		}
	}
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	if types[0] != string(llm.EventStart) {
		t.Errorf("first event %s, want start", types[0])
	}
	for i, ev := range evs {
		terminal := ev.Type == llm.EventDone || ev.Type == llm.EventError
		if terminal != (i == len(evs)-1) {
			t.Fatalf("terminal events misplaced: %v", types)
		}
	}
	last := evs[len(evs)-1]
	if last.Type == llm.EventDone && len(open) > 0 {
		t.Errorf("done with blocks still open: %v", open)
	}
	return evs, types, last.Message
}

func rep(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func seq(parts ...any) []string {
	var out []string
	for _, p := range parts {
		switch v := p.(type) {
		case string:
			out = append(out, v)
		case []string:
			out = append(out, v...)
		}
	}
	return out
}

func TestStreamFixtures(t *testing.T) {
	tests := []struct {
		fixture   string
		wantTypes []string
		wantStop  llm.StopReason
		wantErr   string
		check     func(t *testing.T, evs []llm.Event, m *llm.Message)
	}{
		{
			fixture:   "text.sse",
			wantTypes: seq("start", "text_start", rep("text_delta", 3), "text_end", "done"),
			wantStop:  llm.StopReasonStop,
			check: func(t *testing.T, evs []llm.Event, m *llm.Message) {
				if got := m.TextContent(); got != "Hello! How can I help é你?" {
					t.Errorf("text = %q", got)
				}
				if m.ResponseID != "chatcmpl-C1a2b3" {
					t.Errorf("response id = %q", m.ResponseID)
				}
				u := m.Usage
				if u.Input != 176 || u.CacheRead != 1024 || u.Output != 9 || u.TotalTokens != 1209 {
					t.Errorf("usage = %+v", *u)
				}
				want := (176*2 + 9*8 + 1024*0.5) / 1e6
				if diff := u.Cost.Total - want; diff > 1e-12 || diff < -1e-12 {
					t.Errorf("cost = %v, want %v", u.Cost.Total, want)
				}
				if end := evs[len(evs)-2]; end.Content != "Hello! How can I help é你?" {
					t.Errorf("text_end content = %q", end.Content)
				}
			},
		},
		{
			fixture:   "thinking_deepseek.sse",
			wantTypes: seq("start", "thinking_start", rep("thinking_delta", 2), "thinking_end", "text_start", rep("text_delta", 2), "text_end", "done"),
			wantStop:  llm.StopReasonStop,
			check: func(t *testing.T, evs []llm.Event, m *llm.Message) {
				th := m.Content[0]
				if th.Type != llm.ContentThinking || th.Thinking != "The user asks for 2+2.\n\"Easy\"." || th.ThinkingSignature != "reasoning_content" {
					t.Errorf("thinking block = %+v", th)
				}
				if m.Content[1].Text != "2 + 2 = 4." {
					t.Errorf("text = %q", m.Content[1].Text)
				}
				if u := m.Usage; u.CacheRead != 16 || u.Input != 4 || u.Output != 31 {
					t.Errorf("usage = %+v (DeepSeek prompt_cache_hit_tokens)", *u)
				}
			},
		},
		{
			fixture:   "thinking_openrouter.sse",
			wantTypes: seq("start", "thinking_start", rep("thinking_delta", 2), "thinking_end", "text_start", "text_delta", "text_end", "done"),
			wantStop:  llm.StopReasonStop,
			check: func(t *testing.T, evs []llm.Event, m *llm.Message) {
				if th := m.Content[0]; th.Thinking != "Let me think." || th.ThinkingSignature != "reasoning" {
					t.Errorf("thinking block = %+v", th)
				}
				if m.Usage.Input != 14 || m.Usage.Output != 8 {
					t.Errorf("usage = %+v", *m.Usage)
				}
			},
		},
		{
			fixture: "tools_interleaved.sse",
			wantTypes: seq("start", "text_start", "text_delta", "text_end", "toolcall_start", "toolcall_start",
				rep("toolcall_delta", 4), "toolcall_end", "toolcall_end", "done"),
			wantStop: llm.StopReasonToolUse,
			check: func(t *testing.T, evs []llm.Event, m *llm.Message) {
				var idx []int
				var ended []string
				for _, ev := range evs {
					if ev.Type == llm.EventToolCallDelta {
						idx = append(idx, ev.ContentIndex)
					}
					if ev.Type == llm.EventToolCallEnd {
						ended = append(ended, ev.ToolCall.ID)
					}
				}
				if !reflect.DeepEqual(idx, []int{1, 2, 1, 2}) {
					t.Errorf("delta block indexes = %v, want interleaved [1 2 1 2]", idx)
				}
				if !reflect.DeepEqual(ended, []string{"call_AAA111", "call_BBB222"}) {
					t.Errorf("toolcall_end ids = %v", ended)
				}
				calls := m.ToolCalls()
				if len(calls) != 2 {
					t.Fatalf("tool calls = %+v", calls)
				}
				a, b := calls[0], calls[1]
				if a.ID != "call_AAA111" || a.Name != "get_weather" || !reflect.DeepEqual(a.Arguments, map[string]any{"city": "Paris", "unit": "c"}) {
					t.Errorf("call 0 = %+v", a)
				}
				if b.ID != "call_BBB222" || b.Name != "get_time" || !reflect.DeepEqual(b.Arguments, map[string]any{"tz": "Europe/Paris"}) {
					t.Errorf("call 1 = %+v", b)
				}
				if m.Usage.Input != 310 || m.Usage.Output != 52 {
					t.Errorf("usage = %+v", *m.Usage)
				}
			},
		},
		{
			fixture:   "tool_length.sse",
			wantTypes: seq("start", "toolcall_start", "toolcall_delta", "toolcall_end", "done"),
			wantStop:  llm.StopReasonLength,
			check: func(t *testing.T, evs []llm.Event, m *llm.Message) {
				want := map[string]any{"path": "a.txt", "content": "lorem ip"}
				if got := m.Content[0].Arguments; !reflect.DeepEqual(got, want) {
					t.Errorf("best-effort arguments = %v, want %v", got, want)
				}
			},
		},
		{
			fixture:   "tools_same_index.sse",
			wantTypes: seq("start", "toolcall_start", "toolcall_delta", "toolcall_start", "toolcall_delta", "toolcall_end", "toolcall_end", "done"),
			wantStop:  llm.StopReasonToolUse,
			check: func(t *testing.T, evs []llm.Event, m *llm.Message) {
				calls := m.ToolCalls()
				if len(calls) != 2 || calls[0].Arguments["city"] != "Paris" || calls[1].Arguments["city"] != "Tokyo" || calls[1].ID != "function-call-15938" {
					t.Errorf("calls = %+v, want two calls despite the shared index", calls)
				}
			},
		},
		{
			fixture:   "llamacpp_tool_stop.sse",
			wantTypes: seq("start", "thinking_start", "thinking_delta", "thinking_end", "toolcall_start", "toolcall_delta", "toolcall_end", "done"),
			wantStop:  llm.StopReasonToolUse,
			check: func(t *testing.T, evs []llm.Event, m *llm.Message) {
				if c := m.ToolCalls(); len(c) != 1 || c[0].Arguments["tz"] != "UTC" {
					t.Errorf("calls = %+v", c)
				}
			},
		},
		{
			fixture:   "text_after_tool.sse",
			wantTypes: seq("start", "toolcall_start", "toolcall_delta", "toolcall_end", "text_start", "text_delta", "text_end", "done"),
			wantStop:  llm.StopReasonToolUse,
		},
		{
			fixture:   "malformed.sse",
			wantTypes: seq("start", "text_start", "text_delta", "error"),
			wantStop:  llm.StopReasonError,
			wantErr:   "malformed chunk in stream",
			check: func(t *testing.T, evs []llm.Event, m *llm.Message) {
				if m.TextContent() != "Hel" {
					t.Errorf("partial text = %q", m.TextContent())
				}
			},
		},
		{
			fixture:   "error_midstream.sse",
			wantTypes: seq("start", "text_start", rep("text_delta", 2), "error"),
			wantStop:  llm.StopReasonError,
			wantErr:   "server reported an error mid-stream: The server had an error while processing your request. Sorry about that!",
			check: func(t *testing.T, evs []llm.Event, m *llm.Message) {
				if m.TextContent() != "Once upon a time" {
					t.Errorf("partial text = %q", m.TextContent())
				}
			},
		},
		{
			fixture:   "unknown_finish.sse",
			wantTypes: seq("start", "text_start", "text_delta", "text_end", "error"),
			wantStop:  llm.StopReasonError,
			wantErr:   `unknown finish reason "sensitive_words"`,
		},
		{
			fixture:   "content_filter.sse",
			wantTypes: seq("start", "text_start", "text_delta", "text_end", "error"),
			wantStop:  llm.StopReasonError,
			wantErr:   "content filter",
		},
		{
			fixture:   "tool_bad_json.sse",
			wantTypes: seq("start", "toolcall_start", rep("toolcall_delta", 2), "error"),
			wantStop:  llm.StopReasonError,
			wantErr:   "tool call search arguments are not valid JSON",
			check: func(t *testing.T, evs []llm.Event, m *llm.Message) {
				if q := m.Content[0].Arguments["query"]; q != "go iter" {
					t.Errorf("best-effort arguments = %v", m.Content[0].Arguments)
				}
			},
		},
		{
			fixture:   "truncated.sse",
			wantTypes: seq("start", "text_start", "text_delta", "error"),
			wantStop:  llm.StopReasonError,
			wantErr:   "stream ended without a finish reason",
		},
	}
	for _, tt := range tests {
		t.Run(strings.TrimSuffix(tt.fixture, ".sse"), func(t *testing.T) {
			srv := newServer(t, reply{fixture: tt.fixture})
			evs, types, m := collect(t, testProvider().Stream(context.Background(), testModel(srv), hello(), nil))
			if !reflect.DeepEqual(types, tt.wantTypes) {
				t.Errorf("events\n got %v\nwant %v", types, tt.wantTypes)
			}
			if m.StopReason != tt.wantStop {
				t.Errorf("stop reason = %q, want %q (error %q)", m.StopReason, tt.wantStop, m.ErrorMessage)
			}
			if tt.wantErr == "" && m.ErrorMessage != "" {
				t.Errorf("unexpected error %q", m.ErrorMessage)
			}
			if !strings.Contains(m.ErrorMessage, tt.wantErr) {
				t.Errorf("error = %q, want it to contain %q", m.ErrorMessage, tt.wantErr)
			}
			if m.Role != llm.RoleAssistant || m.API != llm.APIOpenAICompletions || m.Model != "test-model" || m.Provider != "test" {
				t.Errorf("message identity = %s %s %s %s", m.Role, m.API, m.Provider, m.Model)
			}
			if tt.check != nil {
				tt.check(t, evs, m)
			}
		})
	}
}

func TestHTTPErrorsAndRetries(t *testing.T) {
	const key = "sk-secret-should-never-appear"
	openaiErr := func(msg string) string {
		return fmt.Sprintf(`{"error":{"message":%q,"type":"invalid_request_error","param":null,"code":null}}`, msg)
	}
	tests := []struct {
		name      string
		replies   []reply
		maxDelay  time.Duration
		wantCalls int
		wantStop  llm.StopReason
		wantErr   string
	}{
		{name: "401", replies: []reply{{status: 401, body: openaiErr("Incorrect API key provided: sk-secr****pear.")}},
			wantCalls: 1, wantStop: llm.StopReasonError, wantErr: "HTTP 401 Unauthorized: Incorrect API key provided"},
		{name: "400 quotes body message", replies: []reply{{status: 400, body: openaiErr("max_tokens is too large: 999999. This model supports at most 16384 completion tokens.")}},
			wantCalls: 1, wantStop: llm.StopReasonError, wantErr: "HTTP 400 Bad Request: max_tokens is too large: 999999"},
		{name: "500 until attempts run out", replies: []reply{{status: 500, body: openaiErr("upstream exploded")}},
			wantCalls: 3, wantStop: llm.StopReasonError, wantErr: "HTTP 500 Internal Server Error: upstream exploded (after 3 attempts)"},
		{name: "502 plain text from a proxy", replies: []reply{{status: 502, body: "<html>Bad Gateway</html>"}, {status: 502, body: "<html>Bad Gateway</html>"}, {status: 502, body: "<html>Bad Gateway</html>"}},
			wantCalls: 3, wantStop: llm.StopReasonError, wantErr: "HTTP 502 Bad Gateway: <html>Bad Gateway</html>"},
		{name: "429 then success", replies: []reply{
			{status: 429, header: map[string]string{"Retry-After": "0"}, body: openaiErr("Rate limit reached for requests")},
			{fixture: "text.sse"}},
			wantCalls: 2, wantStop: llm.StopReasonStop},
		{name: "503 then success with backoff", replies: []reply{{status: 503, body: openaiErr("overloaded")}, {fixture: "text.sse"}},
			wantCalls: 2, wantStop: llm.StopReasonStop},
		{name: "Retry-After above MaxRetryDelay", replies: []reply{{status: 429, header: map[string]string{"Retry-After": "120"}, body: openaiErr("You exceeded your current quota")}},
			maxDelay: time.Second, wantCalls: 1, wantStop: llm.StopReasonError,
			wantErr: "HTTP 429 Too Many Requests: You exceeded your current quota (server asked to retry after 2m0s, more than the 1s limit; not retrying)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, tt.replies...)
			opts := &llm.StreamOptions{APIKey: key, MaxRetryDelay: tt.maxDelay}
			_, _, m := collect(t, testProvider().Stream(context.Background(), testModel(srv), hello(), opts))
			if srv.calls != tt.wantCalls {
				t.Errorf("server calls = %d, want %d", srv.calls, tt.wantCalls)
			}
			if m.StopReason != tt.wantStop || !strings.Contains(m.ErrorMessage, tt.wantErr) {
				t.Errorf("got %q %q, want %q containing %q", m.StopReason, m.ErrorMessage, tt.wantStop, tt.wantErr)
			}
			if strings.Contains(m.ErrorMessage, key) {
				t.Errorf("error message leaks the API key: %q", m.ErrorMessage)
			}
			if got := srv.headers[0].Get("Authorization"); got != "Bearer "+key {
				t.Errorf("Authorization = %q", got)
			}
			// A retry sends the whole request again: the body is written once (encode.go) and
			// the SDK replays it.
			for i, b := range srv.bodies {
				if !reflect.DeepEqual(b, srv.bodies[0]) || b["messages"] == nil {
					t.Errorf("attempt %d sent %v, the first %v", i+1, b, srv.bodies[0])
				}
			}
		})
	}
}

func TestConnectionRefused(t *testing.T) {
	srv := newServer(t, reply{fixture: "text.sse"})
	model := testModel(srv)
	srv.Close() // nothing listens on the port any more
	_, _, m := collect(t, testProvider().Stream(context.Background(), model, hello(), nil))
	if m.StopReason != llm.StopReasonError || !strings.Contains(m.ErrorMessage, "after 3 attempts") || !strings.Contains(m.ErrorMessage, "connection refused") {
		t.Errorf("got %q %q", m.StopReason, m.ErrorMessage)
	}
}

func TestAbortMidStream(t *testing.T) {
	srv := newServer(t, reply{fixture: "abort_prefix.sse", hold: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sawDeltas int
	evs, _, m := collect(t, func(yield func(llm.Event) bool) {
		for ev := range testProvider().Stream(ctx, testModel(srv), hello(), nil) {
			if ev.Type == llm.EventTextDelta {
				sawDeltas++
				if sawDeltas == 2 {
					cancel() // the user presses stop while the server is still generating
				}
			}
			if !yield(ev) {
				return
			}
		}
	})
	if m.StopReason != llm.StopReasonAborted {
		t.Fatalf("stop reason = %q (%q), want aborted; events %d", m.StopReason, m.ErrorMessage, len(evs))
	}
	if m.TextContent() != "Counting: one," {
		t.Errorf("partial text = %q", m.TextContent())
	}
	if m.Usage.Input != 42 || m.Usage.Output != 5 {
		t.Errorf("usage kept = %+v, want input 42 output 5", *m.Usage)
	}
	select {
	case <-srv.released:
	case <-time.After(5 * time.Second):
		t.Fatal("cancellation did not reach the HTTP request: server still holds the stream")
	}
}

func TestConsumerStopsEarly(t *testing.T) {
	srv := newServer(t, reply{fixture: "abort_prefix.sse", hold: true})
	n := 0
	for ev := range testProvider().Stream(context.Background(), testModel(srv), hello(), nil) {
		n++
		if ev.Type == llm.EventTextDelta {
			break
		}
	}
	if n == 0 {
		t.Fatal("no events")
	}
	select {
	case <-srv.released:
	case <-time.After(5 * time.Second):
		t.Fatal("breaking out of the range did not close the HTTP stream")
	}
}

func TestRegisterAndComplete(t *testing.T) {
	Register(WithLogger(quiet))
	t.Cleanup(func() { llm.UnregisterAPI(llm.APIOpenAICompletions) })
	srv := newServer(t, reply{fixture: "text.sse"})
	m := llm.Complete(context.Background(), testModel(srv), hello(), &llm.StreamOptions{})
	if m.StopReason != llm.StopReasonStop || m.TextContent() != "Hello! How can I help é你?" {
		t.Fatalf("Complete = %q %q %q", m.StopReason, m.TextContent(), m.ErrorMessage)
	}
}

func TestBadInputBecomesErrorEvent(t *testing.T) {
	srv := newServer(t, reply{fixture: "text.sse"})
	model := testModel(srv)
	model.Compat = &llm.Compat{MaxTokensField: "max_tokenz"}
	_, types, m := collect(t, testProvider().Stream(context.Background(), model, hello(), nil))
	if !reflect.DeepEqual(types, []string{"start", "error"}) || !strings.Contains(m.ErrorMessage, `compat.maxTokensField "max_tokenz"`) {
		t.Errorf("got %v %q", types, m.ErrorMessage)
	}

	model.Compat = nil
	c := hello()
	c.Tools = []llm.Tool{{Name: "broken", Parameters: json.RawMessage(`{"type":`)}}
	_, _, m = collect(t, testProvider().Stream(context.Background(), model, c, nil))
	if !strings.Contains(m.ErrorMessage, "tool broken: parameters are not a JSON Schema object") {
		t.Errorf("error = %q", m.ErrorMessage)
	}
	if srv.calls != 0 {
		t.Errorf("a bad request was sent anyway (%d calls)", srv.calls)
	}
}

// TestChunkDecodingLenient pins the chunk decoding the provider took over from the SDK
// (issue 40): fields are read as leniently as the SDK's decoder read them, the event stream's
// framing is the SDK's (CRLF, comments, data split over lines, Assistants "thread." events
// skipped), and only a chunk that is not JSON, or JSON but not an object, is malformed.
func TestChunkDecodingLenient(t *testing.T) {
	const head = `{"id":"c1","choices":[{"index":0,"delta":`
	tests := []struct {
		name     string
		body     string
		wantStop llm.StopReason
		wantErr  string
		check    func(t *testing.T, m *llm.Message)
	}{
		{
			name: "loose types and framing",
			body: ": keep-alive comment\r\n" +
				"data: " + head + `{"content":5},"finish_reason":null}]}` + "\r\n\r\n" +
				"event: thread.run.created\ndata: not json at all\n\n" +
				"data: " + head + `{"content":" apples"},` + "\n" + `data: "finish_reason":null}]}` + "\n\n" +
				"data: null\n\n" +
				"data: " + head + `{"tool_calls":[{"index":"1","id":"call_x","function":{"name":"f","arguments":"{\"a\":"}}]},"finish_reason":null}]}` + "\n\n" +
				"data: " + head + `{"tool_calls":[{"index":1,"function":{"arguments":"1}"}}]},"finish_reason":null}]}` + "\n\n" +
				"data: " + head + `{},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":"30","completion_tokens":7,"prompt_tokens_details":null,"prompt_cache_hit_tokens":10}}` + "\n\n" +
				"data: [DONE]\n\n",
			wantStop: llm.StopReasonToolUse,
			check: func(t *testing.T, m *llm.Message) {
				if m.TextContent() != "5 apples" {
					t.Errorf("text = %q, want the number read as text", m.TextContent())
				}
				calls := m.ToolCalls()
				if len(calls) != 1 || calls[0].ID != "call_x" || !reflect.DeepEqual(calls[0].Arguments, map[string]any{"a": 1.0}) {
					t.Errorf("tool calls = %+v", calls)
				}
				if u := m.Usage; u.Input != 20 || u.CacheRead != 10 || u.Output != 7 {
					t.Errorf("usage = %+v", *u)
				}
				if m.ResponseID != "c1" {
					t.Errorf("response id = %q", m.ResponseID)
				}
			},
		},
		{
			name:     "an array is not a chunk",
			body:     "data: " + head + `{"content":"a"},"finish_reason":null}]}` + "\n\ndata: [1,2]\n\n",
			wantStop: llm.StopReasonError, wantErr: "malformed chunk in stream",
		},
		{
			name:     "an error key ends the stream even when null",
			body:     "data: " + head + `{"content":"a"},"finish_reason":null}]}` + "\n\ndata: {\"error\":null}\n\n",
			wantStop: llm.StopReasonError, wantErr: "server reported an error mid-stream",
		},
		{
			name:     "an event without its empty line is dropped",
			body:     "data: " + head + `{"content":"a"},"finish_reason":"stop"}]}`,
			wantStop: llm.StopReasonError, wantErr: "stream ended without a finish reason",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, reply{body: tt.body})
			_, _, m := collect(t, testProvider().Stream(context.Background(), testModel(srv), hello(), nil))
			if m.StopReason != tt.wantStop || !strings.Contains(m.ErrorMessage, tt.wantErr) {
				t.Fatalf("got %q %q, want %q containing %q", m.StopReason, m.ErrorMessage, tt.wantStop, tt.wantErr)
			}
			if tt.check != nil {
				tt.check(t, m)
			}
		})
	}
}
