// Package providertest is the conformance suite every llm.Provider passes: the same scenarios,
// run against each provider's recorded wire fixtures served by net/http/httptest.
//
// A Harness names the provider, how to build a Model pointing at a base URL, and where its
// fixtures live. Fixtures are files in Harness.Dir named after the scenario:
//
//	<scenario>.sse      a 200 text/event-stream body, served as recorded
//	<scenario>.ndjson   a 200 application/x-ndjson body (Ollama)
//	<scenario>.http     a whole HTTP response (status line, headers, body), for errors
//
// The fixtures a harness needs: text, thinking, tool_call, two_tool_calls, empty and
// context_overflow (see the Scenario constants for what each must contain). Scenarios that send
// a request (image input, multi-turn, orphan tool call, handoff, surrogates) reuse the text
// fixture and check the request the suite's server received; abort serves the first half of
// the text fixture and then stalls.
//
// The suite owns the server (rather than the harness) so that it can record every request body
// and check its shape. A provider without a wire (faux) sets Provider and Prepare instead of
// Dir: Prepare scripts the response for a scenario and request checks are skipped.
package providertest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/llm"
)

// Scenario names (also fixture file names).
const (
	// ScenarioText: the reply is exactly WantText; usage input and output > 0; stop reason stop.
	ScenarioText = "text"
	// ScenarioThinking: a thinking block (non-empty) then the text WantThinkingText.
	ScenarioThinking = "thinking"
	// ScenarioToolCall: one call to get_weather with arguments WantToolArgs; stop reason toolUse.
	ScenarioToolCall = "tool_call"
	// ScenarioTwoToolCalls: get_weather for Paris, then get_weather for Tokyo.
	ScenarioTwoToolCalls = "two_tool_calls"
	// ScenarioEmpty: a reply without any content; stop reason stop.
	ScenarioEmpty = "empty"
	// ScenarioContextOverflow: the provider's error for a prompt longer than the context window.
	ScenarioContextOverflow = "context_overflow"
)

// Expected contents of the fixtures.
const (
	WantText         = "Hello! How can I help you today?"
	WantThinkingText = "The answer is 4."
	WantToolName     = "get_weather"
)

// WantToolArgs are the arguments of the tool_call fixture.
var WantToolArgs = map[string]any{"location": "Paris", "unit": "celsius"}

// TinyPNG is the base64 image the image scenario sends.
const TinyPNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="

// ToolResultText is the tool output of the multi-turn scenario.
const ToolResultText = "22 degrees and sunny"

// Harness describes one provider to the suite.
type Harness struct {
	// API is the llm API value (openai-completions, anthropic-messages, ...).
	API string
	// Provider is the implementation under test.
	Provider llm.Provider
	// Dir holds the recorded fixtures. Empty for providers without a wire (faux).
	Dir string
	// Model returns the model to call, pointing at baseURL ("" when there is no server). Its
	// Cost should be non-zero so that cost reporting is checked.
	Model func(baseURL string) *llm.Model
	// Options returns the stream options (an API key, ...). Nil = a fixed test key.
	Options func() *llm.StreamOptions
	// Prepare, when set, runs before each scenario (faux scripts its reply here).
	Prepare func(t *testing.T, scenario string)
	// StreamsToolArguments is true when the wire streams arguments in pieces, so a call must
	// produce more than one toolcall_delta. Google and Ollama send whole calls (one delta).
	StreamsToolArguments bool
	// RequestToolCallIDs extracts the tool-call ids (calls and results) from a request body,
	// for the handoff checks. Nil skips the id check.
	RequestToolCallIDs func(body []byte) []string
	// ValidToolCallID reports whether the provider's API accepts id. Nil accepts any non-empty id.
	ValidToolCallID func(id string) bool
	// Skip lists scenarios that do not apply, with the reason.
	Skip map[string]string
}

// TestKey is the API key the suite uses when Harness.Options is nil. No error text may contain it.
const TestKey = "sk-test-key-DO-NOT-LEAK-12345"

func (h *Harness) options() *llm.StreamOptions {
	var o *llm.StreamOptions
	if h.Options != nil {
		o = h.Options()
	}
	if o == nil {
		o = &llm.StreamOptions{APIKey: TestKey}
	}
	if o.MaxRetryDelay == 0 {
		o.MaxRetryDelay = 2 * time.Second
	}
	return o
}

func (h *Harness) wire() bool { return h.Dir != "" }

// Fixture is one recorded response.
type Fixture struct {
	Status      int
	Header      http.Header
	Body        []byte
	ContentType string
}

// LoadFixture reads the fixture for scenario from dir.
func LoadFixture(dir, scenario string) (Fixture, error) {
	for _, ext := range []string{".sse", ".ndjson"} {
		b, err := os.ReadFile(filepath.Join(dir, scenario+ext))
		if err == nil {
			ct := "text/event-stream"
			if ext == ".ndjson" {
				ct = "application/x-ndjson"
			}
			return Fixture{Status: 200, Body: b, ContentType: ct, Header: http.Header{}}, nil
		}
	}
	raw, err := os.ReadFile(filepath.Join(dir, scenario+".http"))
	if err != nil {
		return Fixture{}, fmt.Errorf("fixture %s/%s: %w", dir, scenario, err)
	}
	raw = bytes.ReplaceAll(raw, []byte("\r\n"), []byte("\n"))
	head, body, _ := bytes.Cut(raw, []byte("\n\n"))
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(append(bytes.ReplaceAll(head, []byte("\n"), []byte("\r\n")), "\r\n\r\n"...))), nil)
	if err != nil {
		return Fixture{}, fmt.Errorf("fixture %s/%s.http: %w", dir, scenario, err)
	}
	resp.Header.Del("Content-Length")
	return Fixture{Status: resp.StatusCode, Header: resp.Header, Body: body, ContentType: resp.Header.Get("Content-Type")}, nil
}

// Server serves fixtures and records the requests it received.
type Server struct {
	*httptest.Server
	mu       sync.Mutex
	requests [][]byte
	paths    []string
	// fixture and behaviour of the next responses
	fixture Fixture
	stall   bool          // serve half of the body, then wait for the client to go away
	halfOut chan struct{} // closed once the half has been written
	failN   int           // answer the first failN requests with 429
}

// NewServer starts a server that answers every request with f.
func NewServer(t testing.TB, f Fixture) *Server {
	s := &Server{fixture: f, halfOut: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := readAll(r)
	if os.Getenv("PROVIDERTEST_DUMP") != "" { // debugging aid: print what the provider sent
		fmt.Fprintf(os.Stderr, "%s %s\n%s\n\n", r.Method, r.URL, body)
	}
	s.mu.Lock()
	s.requests = append(s.requests, body)
	s.paths = append(s.paths, r.URL.Path)
	fail := s.failN > 0
	if fail {
		s.failN--
	}
	f, stall := s.fixture, s.stall
	s.mu.Unlock()
	if fail {
		w.Header().Set("Retry-After", "0")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"error":{"type":"rate_limit_error","message":"rate limited, slow down"}}`))
		return
	}
	for k, vs := range f.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if f.ContentType != "" {
		w.Header().Set("Content-Type", f.ContentType)
	}
	w.WriteHeader(f.Status)
	if !stall {
		_, _ = w.Write(f.Body)
		return
	}
	chunks := SplitEvents(f.Body)
	for _, c := range chunks[:(len(chunks)+1)/2] {
		_, _ = w.Write(c)
	}
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
	close(s.halfOut)
	select {
	case <-r.Context().Done():
	case <-time.After(10 * time.Second):
	}
}

// LastRequest returns the body of the newest request.
func (s *Server) LastRequest() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.requests) == 0 {
		return nil
	}
	return s.requests[len(s.requests)-1]
}

// Requests returns how many requests arrived.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
}

func readAll(r *http.Request) ([]byte, error) {
	var b bytes.Buffer
	_, err := b.ReadFrom(r.Body)
	return b.Bytes(), err
}

// SplitEvents splits a recorded stream into its events: SSE events end with a blank line
// ("\n\n" or "\r\n\r\n"), NDJSON events with a newline. Each chunk keeps its terminator.
func SplitEvents(body []byte) [][]byte {
	sep := []byte("\n")
	switch {
	case bytes.Contains(body, []byte("\r\n\r\n")):
		sep = []byte("\r\n\r\n")
	case bytes.Contains(body, []byte("\n\n")):
		sep = []byte("\n\n")
	}
	var out [][]byte
	for len(body) > 0 {
		i := bytes.Index(body, sep)
		if i < 0 {
			out = append(out, body)
			break
		}
		out = append(out, body[:i+len(sep)])
		body = body[i+len(sep):]
	}
	return out
}

// Collect runs one stream and returns its events, checking the event grammar on the way.
func Collect(t testing.TB, ctx context.Context, p llm.Provider, model *llm.Model, c *llm.Context, opts *llm.StreamOptions) ([]llm.Event, *llm.Message) {
	t.Helper()
	var evs []llm.Event
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range p.Stream(ctx, model, c, opts) {
			evs = append(evs, snapshot(ev))
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("stream did not end within 20s")
	}
	final := CheckOrder(t, evs)
	return evs, final
}

// snapshot copies what the checks need from an event, since Partial keeps changing.
func snapshot(ev llm.Event) llm.Event {
	if ev.Partial != nil {
		c := ev.Partial.Clone()
		ev.Partial = &c
	}
	return ev
}

// CheckOrder checks the stream grammar: start first; every block opened by *_start, its deltas
// and one *_end at the same content index of the right kind; Partial on every non-terminal
// event; exactly one terminal event (done or error), last, carrying the final Message. It
// returns the final message.
func CheckOrder(t testing.TB, evs []llm.Event) *llm.Message {
	t.Helper()
	if len(evs) == 0 {
		t.Fatalf("no events")
	}
	last := evs[len(evs)-1]
	if last.Type != llm.EventDone && last.Type != llm.EventError {
		t.Fatalf("last event is %s, want done or error (events: %s)", last.Type, Types(evs))
	}
	if last.Message == nil {
		t.Fatalf("terminal %s event without Message", last.Type)
	}
	if last.Type == llm.EventError && last.Message.StopReason != llm.StopReasonError && last.Message.StopReason != llm.StopReasonAborted {
		t.Errorf("error event with stop reason %q", last.Message.StopReason)
	}
	if last.Type == llm.EventDone && (last.Message.StopReason == llm.StopReasonError || last.Message.StopReason == llm.StopReasonAborted) {
		t.Errorf("done event with stop reason %q", last.Message.StopReason)
	}
	if last.Type == llm.EventError {
		if last.Message.ErrorMessage == "" {
			t.Errorf("error event without ErrorMessage")
		}
		if strings.Contains(last.Message.ErrorMessage, TestKey) {
			t.Errorf("error message leaks the API key: %q", last.Message.ErrorMessage)
		}
	}
	if last.Message.Role != llm.RoleAssistant {
		t.Errorf("final message role %q", last.Message.Role)
	}
	kinds := map[llm.EventType][3]llm.EventType{}
	for _, k := range [][3]llm.EventType{
		{llm.EventTextStart, llm.EventTextDelta, llm.EventTextEnd},
		{llm.EventThinkingStart, llm.EventThinkingDelta, llm.EventThinkingEnd},
		{llm.EventToolCallStart, llm.EventToolCallDelta, llm.EventToolCallEnd},
	} {
		for _, e := range k {
			kinds[e] = k
		}
	}
	open := map[int]llm.EventType{} // content index → start event type
	closed := map[int]bool{}
	for n, ev := range evs[:len(evs)-1] {
		switch {
		case n == 0 && ev.Type != llm.EventStart && last.Type == llm.EventDone:
			t.Fatalf("first event %s, want start", ev.Type)
		case n > 0 && ev.Type == llm.EventStart:
			t.Errorf("second start event at %d", n)
		case ev.Type == llm.EventDone || ev.Type == llm.EventError:
			t.Fatalf("terminal event %s at %d of %d (events: %s)", ev.Type, n, len(evs), Types(evs))
		}
		if ev.Partial == nil {
			t.Fatalf("event %d (%s) without Partial", n, ev.Type)
		}
		k, isBlock := kinds[ev.Type]
		if !isBlock {
			continue
		}
		i := ev.ContentIndex
		if i < 0 || i >= len(ev.Partial.Content) {
			t.Fatalf("event %d (%s) content index %d out of range (%d blocks)", n, ev.Type, i, len(ev.Partial.Content))
		}
		switch ev.Type {
		case k[0]:
			if _, ok := open[i]; ok || closed[i] {
				t.Fatalf("event %d: %s for index %d opened twice", n, ev.Type, i)
			}
			open[i] = k[0]
		case k[1], k[2]:
			if open[i] != k[0] {
				t.Fatalf("event %d: %s for index %d without %s", n, ev.Type, i, k[0])
			}
			if ev.Type == k[2] {
				delete(open, i)
				closed[i] = true
			}
		}
		if ev.Type == llm.EventToolCallDelta || ev.Type == llm.EventToolCallStart {
			if ev.Partial.Content[i].Arguments == nil {
				t.Errorf("event %d (%s): arguments nil", n, ev.Type)
			}
		}
		if ev.Type == llm.EventToolCallEnd && (ev.ToolCall == nil || ev.ToolCall.Arguments == nil) {
			t.Errorf("toolcall_end without a finished call with arguments")
		}
	}
	if last.Type == llm.EventDone && len(open) > 0 {
		t.Errorf("blocks left open at done: %v", open)
	}
	return last.Message
}

// Types lists event types, for failure messages.
func Types(evs []llm.Event) string {
	s := make([]string, len(evs))
	for i, e := range evs {
		s[i] = string(e.Type)
	}
	return strings.Join(s, " ")
}

// CheckRequestBody checks what every request body must be: valid UTF-8 and valid JSON.
func CheckRequestBody(t testing.TB, body []byte) {
	t.Helper()
	if len(body) == 0 {
		t.Fatalf("empty request body")
	}
	if !utf8.Valid(body) {
		t.Errorf("request body is not valid UTF-8")
	}
	if !json.Valid(body) {
		t.Errorf("request body is not valid JSON: %.300s", body)
	}
}

// OpenAIToolCallIDs is a RequestToolCallIDs for providers that send the OpenAI chat-completions
// body: the ids of the assistant messages' tool calls and of the tool results, in order.
func OpenAIToolCallIDs(body []byte) []string {
	var req struct {
		Messages []struct {
			Role       string `json:"role"`
			ToolCallID string `json:"tool_call_id"`
			ToolCalls  []struct {
				ID string `json:"id"`
			} `json:"tool_calls"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(body, &req)
	var ids []string
	for _, m := range req.Messages {
		for _, c := range m.ToolCalls {
			ids = append(ids, c.ID)
		}
		if m.Role == "tool" {
			ids = append(ids, m.ToolCallID)
		}
	}
	return ids
}
