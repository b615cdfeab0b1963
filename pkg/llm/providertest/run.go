package providertest

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/llm"
)

// WeatherTool is the tool every scenario offers.
var WeatherTool = llm.Tool{
	Name:        WantToolName,
	Description: "Get the current weather for a location",
	Parameters:  json.RawMessage(`{"type":"object","properties":{"location":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["location"]}`),
}

func now() int64 { return time.Now().UnixMilli() }

// Run runs every scenario against h as subtests.
func Run(t *testing.T, h Harness) {
	t.Helper()
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			if why, ok := h.Skip[sc.name]; ok {
				t.Skip(why)
			}
			if sc.wire && !h.wire() {
				t.Skip("needs a wire (request shape or HTTP behaviour)")
			}
			sc.run(t, &h)
		})
	}
}

type scenario struct {
	name string
	wire bool // needs a server (request checks, HTTP behaviour)
	run  func(t *testing.T, h *Harness)
}

// Scenario test names, for Harness.Skip.
const (
	TestBasicText      = "basic_text"
	TestDeltaOrder     = "delta_order"
	TestThinking       = "thinking"
	TestToolCall       = "tool_call_partial_arguments"
	TestTwoToolCalls   = "two_tool_calls"
	TestImageInput     = "image_input"
	TestMultiTurnTools = "multi_turn_tool_results"
	TestAbort          = "abort_mid_stream"
	TestEmpty          = "empty_content"
	TestOrphanToolCall = "tool_call_without_result"
	TestHandoff        = "handoff_foreign_conversation"
	TestSurrogates     = "unpaired_surrogates_in_tool_result"
	TestOverflow       = "context_overflow"
	TestHTTPError      = "http_error_reported"
	TestRetry          = "retry_429"
	TestConsumerBreak  = "consumer_breaks_early"
)

var scenarios = []scenario{
	{TestBasicText, false, basicText},
	{TestDeltaOrder, false, deltaOrder},
	{TestThinking, false, thinking},
	{TestToolCall, false, toolCall},
	{TestTwoToolCalls, false, twoToolCalls},
	{TestImageInput, true, imageInput},
	{TestMultiTurnTools, true, multiTurn},
	{TestAbort, false, abort},
	{TestEmpty, false, empty},
	{TestOrphanToolCall, true, orphan},
	{TestHandoff, true, handoff},
	{TestSurrogates, true, surrogates},
	{TestOverflow, false, overflow},
	{TestHTTPError, true, httpError},
	{TestRetry, true, retry429},
	{TestConsumerBreak, false, consumerBreak},
}

// call runs scenario's fixture against c and returns the events, the final message and the
// server (nil without a wire).
func (h *Harness) call(t *testing.T, fixture string, c *llm.Context) ([]llm.Event, *llm.Message, *Server) {
	t.Helper()
	srv, model := h.setup(t, fixture)
	evs, final := Collect(t, context.Background(), h.Provider, model, c, h.options())
	return evs, final, srv
}

func (h *Harness) setup(t *testing.T, fixture string) (*Server, *llm.Model) {
	t.Helper()
	if h.Prepare != nil {
		h.Prepare(t, fixture)
	}
	if !h.wire() {
		return nil, h.Model("")
	}
	f, err := LoadFixture(h.Dir, fixture)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(t, f)
	return srv, h.Model(srv.URL)
}

func question(text string) *llm.Context {
	return &llm.Context{
		SystemPrompt: "You are a helpful assistant.",
		Messages:     []llm.Message{llm.UserText(text, now())},
		Tools:        []llm.Tool{WeatherTool},
	}
}

func wantDone(t *testing.T, final *llm.Message, reason llm.StopReason) {
	t.Helper()
	if final.StopReason != reason {
		t.Fatalf("stop reason %q, want %q (error: %s)", final.StopReason, reason, final.ErrorMessage)
	}
}

func basicText(t *testing.T, h *Harness) {
	_, final, srv := h.call(t, ScenarioText, question("Hello"))
	wantDone(t, final, llm.StopReasonStop)
	if got := final.TextContent(); got != WantText {
		t.Errorf("text %q, want %q", got, WantText)
	}
	model := h.Model("")
	if final.API != h.API || final.Model != model.ID || final.Provider != model.Provider {
		t.Errorf("message stamped %s/%s/%s, want %s/%s/%s", final.API, final.Provider, final.Model, h.API, model.Provider, model.ID)
	}
	if final.Usage == nil || final.Usage.Input <= 0 || final.Usage.Output <= 0 {
		t.Fatalf("usage %+v, want input and output > 0", final.Usage)
	}
	u := final.Usage
	if u.TotalTokens != u.Input+u.Output+u.CacheRead+u.CacheWrite {
		t.Errorf("total tokens %d != %d+%d+%d+%d", u.TotalTokens, u.Input, u.Output, u.CacheRead, u.CacheWrite)
	}
	if model.Cost.Input > 0 && u.Cost.Total <= 0 {
		t.Errorf("cost not computed: %+v", u.Cost)
	}
	if srv != nil {
		body := srv.LastRequest()
		CheckRequestBody(t, body)
		for _, want := range []string{"Hello", "You are a helpful assistant.", WantToolName} {
			if !bytes.Contains(body, []byte(want)) {
				t.Errorf("request lacks %q: %.400s", want, body)
			}
		}
	}
}

func deltaOrder(t *testing.T, h *Harness) {
	for _, f := range []string{ScenarioText, ScenarioThinking, ScenarioToolCall, ScenarioTwoToolCalls, ScenarioEmpty} {
		t.Run(f, func(t *testing.T) {
			evs, final, _ := h.call(t, f, question("Hello"))
			if final.StopReason == llm.StopReasonError {
				t.Fatalf("error: %s", final.ErrorMessage)
			}
			if evs[0].Type != llm.EventStart {
				t.Errorf("first event %s", evs[0].Type)
			}
			// Every *_end carries the block's whole content.
			for _, ev := range evs {
				switch ev.Type {
				case llm.EventTextEnd:
					if ev.Content != final.Content[ev.ContentIndex].Text {
						t.Errorf("text_end content %q != final %q", ev.Content, final.Content[ev.ContentIndex].Text)
					}
				case llm.EventThinkingEnd:
					if ev.Content != final.Content[ev.ContentIndex].Thinking {
						t.Errorf("thinking_end content differs from the final block")
					}
				}
			}
			// The deltas of a block add up to it.
			sums := map[int]string{}
			for _, ev := range evs {
				if ev.Type == llm.EventTextDelta || ev.Type == llm.EventThinkingDelta {
					sums[ev.ContentIndex] += ev.Delta
				}
			}
			for i, s := range sums {
				b := final.Content[i]
				if s != b.Text+b.Thinking {
					t.Errorf("block %d: deltas %q != content %q", i, s, b.Text+b.Thinking)
				}
			}
		})
	}
}

func thinking(t *testing.T, h *Harness) {
	evs, final, _ := h.call(t, ScenarioThinking, question("What is 2+2?"))
	wantDone(t, final, llm.StopReasonStop)
	var think *llm.Content
	for i := range final.Content {
		if final.Content[i].Type == llm.ContentThinking && !final.Content[i].Redacted {
			think = &final.Content[i]
			break
		}
	}
	if think == nil || think.Thinking == "" {
		t.Fatalf("no thinking block in %+v", final.Content)
	}
	if !strings.Contains(Types(evs), "thinking_delta") {
		t.Errorf("no thinking_delta events: %s", Types(evs))
	}
	if got := final.TextContent(); got != WantThinkingText {
		t.Errorf("text %q, want %q", got, WantThinkingText)
	}
}

func toolCall(t *testing.T, h *Harness) {
	evs, final, _ := h.call(t, ScenarioToolCall, question("Weather in Paris?"))
	wantDone(t, final, llm.StopReasonToolUse)
	calls := final.ToolCalls()
	if len(calls) != 1 {
		t.Fatalf("%d tool calls, want 1", len(calls))
	}
	if calls[0].Name != WantToolName || calls[0].ID == "" {
		t.Errorf("call %+v", calls[0])
	}
	if !reflect.DeepEqual(calls[0].Arguments, WantToolArgs) {
		t.Errorf("arguments %v, want %v", calls[0].Arguments, WantToolArgs)
	}
	deltas := 0
	for _, ev := range evs {
		if ev.Type == llm.EventToolCallDelta {
			deltas++
			if ev.Partial.Content[ev.ContentIndex].Arguments == nil {
				t.Errorf("toolcall_delta with nil arguments")
			}
		}
		if ev.Type == llm.EventToolCallEnd && !reflect.DeepEqual(ev.ToolCall.Arguments, WantToolArgs) {
			t.Errorf("toolcall_end arguments %v", ev.ToolCall.Arguments)
		}
	}
	if deltas == 0 || (h.StreamsToolArguments && deltas < 2) {
		t.Errorf("%d toolcall_delta events (streams arguments: %v)", deltas, h.StreamsToolArguments)
	}
}

func twoToolCalls(t *testing.T, h *Harness) {
	_, final, _ := h.call(t, ScenarioTwoToolCalls, question("Weather in Paris and Tokyo?"))
	wantDone(t, final, llm.StopReasonToolUse)
	calls := final.ToolCalls()
	if len(calls) != 2 {
		t.Fatalf("%d tool calls, want 2: %+v", len(calls), final.Content)
	}
	if calls[0].ID == calls[1].ID || calls[0].ID == "" {
		t.Errorf("ids %q and %q must be distinct and non-empty", calls[0].ID, calls[1].ID)
	}
	for i, loc := range []string{"Paris", "Tokyo"} {
		if calls[i].Arguments["location"] != loc {
			t.Errorf("call %d location %v, want %s", i, calls[i].Arguments["location"], loc)
		}
	}
}

func imageInput(t *testing.T, h *Harness) {
	c := question("")
	c.Messages = []llm.Message{{Role: llm.RoleUser, Timestamp: now(), Content: []llm.Content{
		llm.Text("What is in this image?"), llm.Image(TinyPNG, "image/png"),
	}}}
	_, final, srv := h.call(t, ScenarioText, c)
	wantDone(t, final, llm.StopReasonStop)
	body := srv.LastRequest()
	CheckRequestBody(t, body)
	if !bytes.Contains(body, []byte(TinyPNG)) {
		t.Errorf("request lacks the image data: %.500s", body)
	}
}

// ownToolTurn returns a conversation in which this provider called get_weather.
func (h *Harness) ownToolTurn(id string) []llm.Message {
	m := h.Model("")
	return []llm.Message{
		llm.UserText("Weather in Paris?", now()),
		{Role: llm.RoleAssistant, API: h.API, Provider: m.Provider, Model: m.ID, StopReason: llm.StopReasonToolUse,
			Timestamp: now(), Usage: &llm.Usage{}, Content: []llm.Content{
				llm.Text("Let me check."), llm.ToolCall(id, WantToolName, map[string]any{"location": "Paris"}),
			}},
	}
}

func multiTurn(t *testing.T, h *Harness) {
	id := "call_weather_1"
	c := question("")
	c.Messages = append(h.ownToolTurn(id),
		llm.Message{Role: llm.RoleToolResult, ToolCallID: id, ToolName: WantToolName, Timestamp: now(),
			Content: []llm.Content{llm.Text(ToolResultText)}},
		llm.UserText("Thanks. And tomorrow?", now()),
	)
	_, final, srv := h.call(t, ScenarioText, c)
	wantDone(t, final, llm.StopReasonStop)
	body := srv.LastRequest()
	CheckRequestBody(t, body)
	for _, want := range []string{ToolResultText, "Let me check.", "Thanks. And tomorrow?"} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("request lacks %q: %.600s", want, body)
		}
	}
	if h.RequestToolCallIDs != nil {
		ids := h.RequestToolCallIDs(body)
		if len(ids) < 2 {
			t.Errorf("tool call ids in request %v, want the call and its result", ids)
		}
		for _, got := range ids {
			if got != ids[0] {
				t.Errorf("call and result ids differ: %v", ids)
			}
		}
	}
}

func abort(t *testing.T, h *Harness) {
	if !h.wire() {
		// Without a wire, abort before the call: the provider must still report aborted.
		_, model := h.setup(t, ScenarioText)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, final := Collect(t, ctx, h.Provider, model, question("Hello"), h.options())
		wantDone(t, final, llm.StopReasonAborted)
		return
	}
	srv, model := h.setup(t, ScenarioText)
	srv.mu.Lock()
	srv.stall = true
	srv.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-srv.halfOut:
			time.Sleep(50 * time.Millisecond) // let the client read what was sent
			cancel()
		case <-time.After(10 * time.Second):
			cancel()
		}
	}()
	evs, final := Collect(t, ctx, h.Provider, model, question("Hello"), h.options())
	if evs[len(evs)-1].Type != llm.EventError {
		t.Fatalf("last event %s, want error", evs[len(evs)-1].Type)
	}
	wantDone(t, final, llm.StopReasonAborted)
	if final.Usage == nil {
		t.Errorf("aborted message lost its usage")
	}
}

func empty(t *testing.T, h *Harness) {
	c := question("")
	m := h.Model("")
	// History with empty pieces: an empty user text, an assistant message without content.
	c.Messages = []llm.Message{
		llm.UserText("", now()),
		{Role: llm.RoleAssistant, API: h.API, Provider: m.Provider, Model: m.ID, StopReason: llm.StopReasonStop, Timestamp: now()},
		llm.UserText("Say nothing.", now()),
	}
	_, final, srv := h.call(t, ScenarioEmpty, c)
	wantDone(t, final, llm.StopReasonStop)
	if final.TextContent() != "" || len(final.ToolCalls()) != 0 {
		t.Errorf("content %+v, want none", final.Content)
	}
	if srv != nil {
		body := srv.LastRequest()
		CheckRequestBody(t, body)
		if bytes.Contains(body, []byte(`"text":""`)) {
			t.Errorf("request carries an empty text block: %.500s", body)
		}
	}
}

func orphan(t *testing.T, h *Harness) {
	id := "call_orphan_1"
	c := question("")
	c.Messages = append(h.ownToolTurn(id), llm.UserText("Never mind, what time is it?", now()))
	_, final, srv := h.call(t, ScenarioText, c)
	wantDone(t, final, llm.StopReasonStop)
	body := srv.LastRequest()
	CheckRequestBody(t, body)
	if !bytes.Contains(body, []byte("No result provided")) {
		t.Errorf("orphan tool call got no synthetic result: %.800s", body)
	}
}

func surrogates(t *testing.T, h *Harness) {
	id := "call_sur_1"
	// "\xed\xa0\xbd" is the lone high surrogate U+D83D as it arrives from a byte-oriented
	// tool or a JavaScript string; "\xff" is plain invalid UTF-8.
	bad := "emoji half: \xed\xa0\xbd, stray byte: \xff, fine: \u00e9"
	c := question("")
	c.Messages = append(h.ownToolTurn(id),
		llm.Message{Role: llm.RoleToolResult, ToolCallID: id, ToolName: WantToolName, Timestamp: now(),
			Content: []llm.Content{llm.Text(bad)}},
	)
	_, final, srv := h.call(t, ScenarioText, c)
	wantDone(t, final, llm.StopReasonStop)
	body := srv.LastRequest()
	CheckRequestBody(t, body)
	if !bytes.Contains(body, []byte("emoji half")) {
		t.Errorf("tool result dropped instead of sanitized: %.600s", body)
	}
}

func overflow(t *testing.T, h *Harness) {
	_, final, _ := h.call(t, ScenarioContextOverflow, question("a very long prompt"))
	if final.StopReason != llm.StopReasonError {
		t.Fatalf("stop reason %q, want error", final.StopReason)
	}
	if !llm.IsContextOverflow(final, h.Model("").ContextWindow) {
		t.Errorf("llm.IsContextOverflow false for %q", final.ErrorMessage)
	}
}

func httpError(t *testing.T, h *Harness) {
	srv, model := h.setup(t, ScenarioText)
	srv.mu.Lock()
	srv.fixture = Fixture{Status: 401, ContentType: "application/json",
		Body: []byte(`{"error":{"type":"authentication_error","message":"invalid x-api-key ` + TestKey[:6] + `…"}}`)}
	srv.mu.Unlock()
	_, final := Collect(t, context.Background(), h.Provider, model, question("Hello"), h.options())
	if final.StopReason != llm.StopReasonError {
		t.Fatalf("stop reason %q, want error", final.StopReason)
	}
	if !strings.Contains(final.ErrorMessage, "401") || !strings.Contains(final.ErrorMessage, "invalid x-api-key") {
		t.Errorf("error message %q should quote the status and the server's message", final.ErrorMessage)
	}
	if srv.Requests() != 1 {
		t.Errorf("%d requests for a 401, want 1 (no retry)", srv.Requests())
	}
}

func retry429(t *testing.T, h *Harness) {
	srv, model := h.setup(t, ScenarioText)
	srv.mu.Lock()
	srv.failN = 2
	srv.mu.Unlock()
	_, final := Collect(t, context.Background(), h.Provider, model, question("Hello"), h.options())
	wantDone(t, final, llm.StopReasonStop)
	if srv.Requests() != 3 {
		t.Errorf("%d requests, want 3 (two 429s with Retry-After: 0, then success)", srv.Requests())
	}
	if final.TextContent() != WantText {
		t.Errorf("text %q", final.TextContent())
	}
}

// consumerBreak stops ranging at the first delta of every fixture: the provider must not
// yield again (the Go runtime panics if it does) and must release the request.
func consumerBreak(t *testing.T, h *Harness) {
	for _, f := range []string{ScenarioText, ScenarioThinking, ScenarioToolCall} {
		_, model := h.setup(t, f)
		n := 0
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("%s: provider kept yielding after the consumer stopped: %v", f, r)
				}
			}()
			for ev := range h.Provider.Stream(context.Background(), model, question("Hello"), h.options()) {
				n++
				if strings.HasSuffix(string(ev.Type), "_delta") || ev.Type == llm.EventDone || ev.Type == llm.EventError {
					break
				}
			}
		}()
		if n == 0 {
			t.Errorf("%s: no events", f)
		}
	}
}
