// Package fakeopenai is an OpenAI-compatible chat completions server for tests: it answers
// POST /v1/chat/completions with real SSE chunks, so the real openai-completions provider
// (pkg/llm/providers/openai) talks to it over HTTP exactly as it talks to a remote model.
//
// Every answer comes from a Script, a function of the recorded request, so a test can echo the
// conversation, return tool calls, be slow, or fail. Every request is recorded (raw body, the
// decoded messages, when it started and ended, and whether the client went away) for
// assertions, and the server tracks how many requests were in flight at the same time.
package fakeopenai

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// Message is one decoded entry of the request's messages.
type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"-"` // text of a string content or of all text parts
	ToolCalls  []ToolCall `json:"-"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

// ToolCall is a function call, in a reply (to send) or in a replayed assistant message.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string // JSON text
}

// Request is one recorded chat completion request.
type Request struct {
	N        int // 1-based arrival order
	Header   http.Header
	Body     []byte
	Model    string
	Stream   bool
	Messages []Message
	Tools    []string // function names offered
	Start    time.Time
	End      time.Time // when the answer finished or the client went away
	Aborted  bool      // the client cancelled before the answer was complete
}

// Text is every message's content, one per line, prefixed with its role ("user: hi").
func (r *Request) Text() string {
	var b strings.Builder
	for _, m := range r.Messages {
		b.WriteString(m.Role)
		b.WriteString(": ")
		b.WriteString(m.Content)
		b.WriteByte('\n')
	}
	return b.String()
}

// Contains reports whether any message content contains s.
func (r *Request) Contains(s string) bool {
	for _, m := range r.Messages {
		if strings.Contains(m.Content, s) {
			return true
		}
	}
	return false
}

// LastUser is the content of the last user message ("" if none).
func (r *Request) LastUser() string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return r.Messages[i].Content
		}
	}
	return ""
}

// Users lists the contents of the user messages in order.
func (r *Request) Users() []string {
	var out []string
	for _, m := range r.Messages {
		if m.Role == "user" {
			out = append(out, m.Content)
		}
	}
	return out
}

// ToolResult returns the content of the tool message answering call id.
func (r *Request) ToolResult(id string) (string, bool) {
	for _, m := range r.Messages {
		if m.Role == "tool" && m.ToolCallID == id {
			return m.Content, true
		}
	}
	return "", false
}

// HasTool reports whether the request offered the function name.
func (r *Request) HasTool(name string) bool {
	for _, t := range r.Tools {
		if t == name {
			return true
		}
	}
	return false
}

// Reply is a scripted answer.
type Reply struct {
	Text      string
	ToolCalls []ToolCall
	// Latency is waited before the first chunk; a client that goes away meanwhile gets nothing.
	Latency time.Duration
	// Until, when set, ends the Latency wait early once it is closed (e.g. Arrived(2): "answer
	// as soon as a second request is in", which shows two requests overlapping).
	Until <-chan struct{}
	// Status, when not 0 or 200, answers with that HTTP status and an OpenAI error body.
	Status int
	// ErrorMessage is that error body's message (default "scripted failure <status>"), e.g. one
	// that echoes the request's Authorization header as some upstreams do.
	ErrorMessage string
	// Chunks splits Text into this many deltas (default 2 when the text is long enough).
	Chunks int
	// PromptTokens is the usage's prompt_tokens (default 10); a value above the model's window
	// plays a server that truncated the prompt silently.
	PromptTokens int
	// ChunkDelay is waited between two text deltas (a slowly streaming model, for previews).
	ChunkDelay time.Duration
}

// Script answers a request. It runs on the HTTP handler's goroutine and may block.
type Script func(r *Request) Reply

// Echo answers "echo: <last user message>".
func Echo(r *Request) Reply { return Reply{Text: "echo: " + r.LastUser()} }

// Server is a running fake.
type Server struct {
	*httptest.Server
	script Script

	mu       sync.Mutex
	reqs     []*Request
	inFlight int
	maxIn    int
	changed  chan struct{} // closed and replaced whenever a request arrives or ends
	done     chan struct{} // closed when the test ends
}

// New starts a server answering with script; it is closed when the test ends.
func New(t testing.TB, script Script) *Server {
	s := &Server{script: script, changed: make(chan struct{}), done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.chat)
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m1","object":"model","owned_by":"fake"}]}`)
	})
	s.Server = httptest.NewServer(mux)
	t.Cleanup(func() {
		close(s.done)
		s.Close()
	})
	return s
}

// BaseURL is the value for a provider's baseUrl (".../v1").
func (s *Server) BaseURL() string { return s.URL + "/v1" }

// SetScript replaces the script for the requests that arrive from now on.
func (s *Server) SetScript(f Script) {
	s.mu.Lock()
	s.script = f
	s.mu.Unlock()
}

// Requests returns the recorded requests in arrival order (copies of the records).
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.reqs))
	for i, r := range s.reqs {
		out[i] = *r
	}
	return out
}

// MaxConcurrent is the largest number of requests that were in flight at the same time.
func (s *Server) MaxConcurrent() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxIn
}

// WaitRequests waits until at least n requests have arrived and returns them.
func (s *Server) WaitRequests(ctx context.Context, n int) ([]Request, error) {
	for {
		s.mu.Lock()
		got, ch := len(s.reqs), s.changed
		s.mu.Unlock()
		if got >= n {
			return s.Requests(), nil
		}
		select {
		case <-ctx.Done():
			return s.Requests(), fmt.Errorf("fakeopenai: %d requests arrived, want %d: %w", got, n, ctx.Err())
		case <-s.done:
			return s.Requests(), fmt.Errorf("fakeopenai: server closed with %d requests, want %d", got, n)
		case <-ch:
		}
	}
}

// Arrived returns a channel that is closed once at least n requests have arrived.
func (s *Server) Arrived(n int) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		_, _ = s.WaitRequests(context.Background(), n)
	}()
	return ch
}

func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// wire shapes of the request.
type wireRequest struct {
	Model    string        `json:"model"`
	Stream   bool          `json:"stream"`
	Messages []wireMessage `json:"messages"`
	Tools    []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
}

type wireMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// contentText reads a string content or the text of an array of parts.
func contentText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		var b strings.Builder
		for _, p := range parts {
			if p.Type == "text" {
				if b.Len() > 0 {
					b.WriteByte('\n')
				}
				b.WriteString(p.Text)
			}
		}
		return b.String()
	}
	return string(raw)
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var wr wireRequest
	if err := json.Unmarshal(body, &wr); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return
	}
	req := &Request{Header: r.Header.Clone(), Body: body, Model: wr.Model, Stream: wr.Stream, Start: time.Now()}
	for _, m := range wr.Messages {
		msg := Message{Role: m.Role, Content: contentText(m.Content), ToolCallID: m.ToolCallID}
		for _, c := range m.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: c.Function.Arguments})
		}
		req.Messages = append(req.Messages, msg)
	}
	for _, t := range wr.Tools {
		req.Tools = append(req.Tools, t.Function.Name)
	}
	s.mu.Lock()
	req.N = len(s.reqs) + 1
	s.reqs = append(s.reqs, req)
	s.inFlight++
	s.maxIn = max(s.maxIn, s.inFlight)
	script := s.script
	s.notifyLocked()
	s.mu.Unlock()

	// The request ends (stops counting as in flight, gets its End) just before its last chunk
	// goes out: a client that waits for a reply to end before it asks again (the queue policy)
	// may have read that chunk and sent its next request before this handler gets the CPU back
	// to return.
	var left sync.Once
	leave := func() {
		left.Do(func() {
			s.mu.Lock()
			s.inFlight--
			req.End = time.Now()
			s.mu.Unlock()
		})
	}
	aborted := false
	defer func() {
		leave()
		s.mu.Lock()
		req.Aborted = aborted
		s.notifyLocked()
		s.mu.Unlock()
	}()

	reply := script(req)
	if reply.Latency > 0 {
		select {
		case <-r.Context().Done():
			aborted = true
			return
		case <-time.After(reply.Latency):
		case <-reply.Until:
		}
	}
	if reply.Status != 0 && reply.Status != http.StatusOK {
		msg := reply.ErrorMessage
		if msg == "" {
			msg = fmt.Sprintf("scripted failure %d", reply.Status)
		}
		writeError(w, reply.Status, msg)
		return
	}
	if !wr.Stream {
		writeError(w, http.StatusBadRequest, "fakeopenai only serves stream=true")
		return
	}
	aborted = !writeStream(w, r, fmt.Sprintf("chatcmpl-%d", req.N), wr.Model, reply, leave)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": "fake_error"}})
}

// chunk is one SSE data object.
type chunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []chunkChoice `json:"choices"`
	Usage   *usage        `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index        int     `json:"index"`
	Delta        delta   `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

type delta struct {
	Role      string          `json:"role,omitempty"`
	Content   *string         `json:"content,omitempty"`
	ToolCalls []deltaToolCall `json:"tool_calls,omitempty"`
}

type deltaToolCall struct {
	Index    int    `json:"index"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// writeStream sends reply as SSE chunks; it reports false when the client went away. It calls
// ending just before the last chunk (the one with the finish reason).
func writeStream(w http.ResponseWriter, r *http.Request, id, model string, reply Reply, ending func()) bool {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	now := time.Now().Unix()
	send := func(c chunk) bool {
		c.ID, c.Object, c.Created, c.Model = id, "chat.completion.chunk", now, model
		b, _ := json.Marshal(c)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		if fl != nil {
			fl.Flush()
		}
		return r.Context().Err() == nil
	}
	empty := ""
	if !send(chunk{Choices: []chunkChoice{{Delta: delta{Role: "assistant", Content: &empty}}}}) {
		return false
	}
	for i, part := range split(reply.Text, reply.Chunks) {
		p := part
		if i > 0 && reply.ChunkDelay > 0 {
			select {
			case <-time.After(reply.ChunkDelay):
			case <-r.Context().Done():
				return false
			}
		}
		if !send(chunk{Choices: []chunkChoice{{Delta: delta{Content: &p}}}}) {
			return false
		}
	}
	for i, tc := range reply.ToolCalls {
		d := deltaToolCall{Index: i, ID: tc.ID, Type: "function"}
		d.Function.Name = tc.Name
		// Arguments arrive in two pieces, as real servers stream them.
		// Cut on a rune boundary: a piece ending mid-rune is not valid UTF-8 and would reach
		// the client as U+FFFD (real servers send whole characters per delta).
		half := len(tc.Arguments) / 2
		for half > 0 && !utf8.RuneStart(tc.Arguments[half]) {
			half--
		}
		d.Function.Arguments = tc.Arguments[:half]
		if !send(chunk{Choices: []chunkChoice{{Delta: delta{ToolCalls: []deltaToolCall{d}}}}}) {
			return false
		}
		rest := deltaToolCall{Index: i}
		rest.Function.Arguments = tc.Arguments[half:]
		if !send(chunk{Choices: []chunkChoice{{Delta: delta{ToolCalls: []deltaToolCall{rest}}}}}) {
			return false
		}
	}
	finish := "stop"
	if len(reply.ToolCalls) > 0 {
		finish = "tool_calls"
	}
	words := len(strings.Fields(reply.Text))
	prompt := reply.PromptTokens
	if prompt == 0 {
		prompt = 10
	}
	ending()
	if !send(chunk{Choices: []chunkChoice{{Delta: delta{}, FinishReason: &finish}},
		Usage: &usage{PromptTokens: prompt, CompletionTokens: words, TotalTokens: prompt + words}}) {
		return false
	}
	if _, err := io.WriteString(w, "data: [DONE]\n\n"); err != nil {
		return false
	}
	if fl != nil {
		fl.Flush()
	}
	return true
}

// split cuts s into n pieces on rune boundaries (n <= 0: two pieces when s has 8+ bytes).
func split(s string, n int) []string {
	if s == "" {
		return nil
	}
	if n <= 0 {
		n = 1
		if len(s) >= 8 {
			n = 2
		}
	}
	rs := []rune(s)
	if n > len(rs) {
		n = len(rs)
	}
	out := make([]string, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, string(rs[i*len(rs)/n:(i+1)*len(rs)/n]))
	}
	return out
}
