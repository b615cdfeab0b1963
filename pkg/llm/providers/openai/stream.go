package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/internal/retry"
)

// Sentinels wrapped by the errors whose text ends up in a failed message's ErrorMessage.
var (
	ErrUnknownFinishReason = errors.New("unknown finish reason")
	ErrContentFilter       = errors.New("response stopped by the provider's content filter")
	ErrStreamError         = errors.New("server reported an error mid-stream")
	ErrMalformedChunk      = errors.New("malformed chunk in stream")
	ErrTruncatedStream     = errors.New("stream ended without a finish reason")
)

type blockKind uint8

const (
	kindNone blockKind = iota
	kindText
	kindThinking
)

// toolState accumulates one tool call, keyed by the index the server gives it.
type toolState struct {
	apiIndex int64
	content  int // index into msg.Content
	args     strings.Builder
	open     bool
}

// streamer turns chunks into llm events. Text and thinking blocks are open one at a time; tool
// calls may be open several at once (interleaved parallel calls) and are closed together, in
// content order, when the message ends or text/thinking resumes after them.
type streamer struct {
	model *llm.Model
	msg   *llm.Message
	yield func(llm.Event) bool
	done  bool // terminal event sent or the consumer stopped

	kind blockKind // the open text/thinking block, if any
	open int       // its index in msg.Content
	buf  strings.Builder

	tools  []*toolState
	finish string
}

func newStreamer(model *llm.Model, yield func(llm.Event) bool) *streamer {
	return &streamer{model: model, msg: llm.NewAssistant(model), yield: yield, open: -1}
}

func (s *streamer) emit(ev llm.Event) bool {
	if s.done {
		return false
	}
	if !s.yield(ev) {
		s.done = true
		return false
	}
	return true
}

func (s *streamer) fail(reason llm.StopReason, err error) {
	if s.done {
		return
	}
	s.done = true
	s.yield(llm.ErrorEvent(s.model, s.msg, reason, fmt.Errorf("%s %s: %w", llm.APIOpenAICompletions, s.model.ID, err)))
}

// consume reads the event stream to its end and sends the terminal event: the stream ends at
// a "[DONE]" event or at EOF; an event with a top-level "error" fails it, as does a chunk that
// is not JSON (or JSON but not an object).
func (s *streamer) consume(ctx context.Context, body io.Reader) {
	r := newSSEReader(body)
	var err error
	for {
		event, data, ok := r.next()
		if !ok {
			err = r.err
			break
		}
		if bytes.HasPrefix(data, doneMarker) {
			break
		}
		if err = streamError(data); err != nil {
			break
		}
		if bytes.HasPrefix(event, threadEvent) { // Assistants API events: not chat chunks
			continue
		}
		if err = s.chunk(data); err != nil {
			break
		}
		if s.done {
			return
		}
	}
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		s.fail(llm.StopReasonAborted, fmt.Errorf("%w: %w", errAborted, cause))
		return
	}
	if err != nil {
		s.fail(llm.StopReasonError, describe(err))
		return
	}
	s.end()
}

var (
	doneMarker  = []byte("[DONE]")
	threadEvent = []byte("thread.")
)

// describe gives a stream error a message that says what went wrong and quotes the server.
func describe(err error) error {
	var herr *retry.HTTPError
	switch {
	case errors.As(err, &herr):
		return herr
	case errors.Is(err, ErrStreamError), errors.Is(err, ErrMalformedChunk):
		return err
	}
	return fmt.Errorf("request failed: %w", err)
}

// chunk applies one chunk. Only choice 0 is read: requests never ask for n > 1. Fields are
// read as leniently as the SDK read them (gjson's conversions: a number where a string is
// expected is its text, a string of digits where a number is expected is that number, a
// field of the wrong shape is empty); the chunk itself must be a JSON object (or null).
func (s *streamer) chunk(data []byte) error {
	if !json.Valid(data) {
		var v struct{}
		return fmt.Errorf("%w: %w", ErrMalformedChunk, json.Unmarshal(data, &v))
	}
	root := gjson.ParseBytes(data)
	if root.Type == gjson.Null {
		return nil
	}
	if !root.IsObject() {
		return fmt.Errorf("%w: a chunk must be a JSON object, got %s", ErrMalformedChunk, truncate(root.Raw, 40))
	}
	var choices, usage gjson.Result
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "id":
			if s.msg.ResponseID == "" && v.Type != gjson.Null {
				s.msg.ResponseID = v.String()
			}
		case "choices":
			choices = v
		case "usage":
			usage = v
		}
		return true
	})
	if usage.Exists() && usage.Type != gjson.Null {
		s.usage(usage)
	}
	if !choices.IsArray() {
		return nil
	}
	var choice gjson.Result
	choices.ForEach(func(_, v gjson.Result) bool {
		choice = v
		return false
	})
	if !choice.IsObject() {
		return nil
	}
	var delta gjson.Result
	finish := ""
	choice.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "delta":
			delta = v
		case "finish_reason":
			finish = v.String()
		}
		return true
	})
	if delta.IsObject() {
		var content, refusal, toolCalls gjson.Result
		var reasoning [len(reasoningFields)]string
		delta.ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "content":
				content = v
			case "refusal":
				refusal = v
			case "tool_calls":
				toolCalls = v
			default:
				for i, f := range reasoningFields {
					if k.Str == f {
						reasoning[i] = v.Raw
					}
				}
			}
			return true
		})
		for i, f := range reasoningFields {
			if text := stringField(reasoning[i]); text != "" {
				if !s.delta(kindThinking, text, f) {
					return nil
				}
				break // servers that send two of the fields send the same text twice
			}
		}
		if text := content.String(); text != "" && !s.delta(kindText, text, "") {
			return nil
		}
		if text := refusal.String(); text != "" && !s.delta(kindText, text, "") {
			return nil
		}
		if toolCalls.IsArray() {
			ok := true
			toolCalls.ForEach(func(_, v gjson.Result) bool {
				ok = s.toolDelta(toolCallOf(v))
				return ok
			})
			if !ok {
				return nil
			}
		}
	}
	if finish != "" {
		s.finish = finish
	}
	return nil
}

// toolCallDelta is one entry of a delta's tool_calls.
type toolCallDelta struct {
	index           int64
	id, name, argus string
}

func toolCallOf(v gjson.Result) toolCallDelta {
	var tc toolCallDelta
	if !v.IsObject() {
		return tc
	}
	v.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "index":
			tc.index = v.Int()
		case "id":
			tc.id = v.String()
		case "function":
			if v.IsObject() {
				v.ForEach(func(k, v gjson.Result) bool {
					switch k.Str {
					case "name":
						tc.name = v.String()
					case "arguments":
						tc.argus = v.String()
					}
					return true
				})
			}
		}
		return true
	})
	return tc
}

// stringField decodes a raw JSON string value; anything else gives "".
func stringField(raw string) string {
	if len(raw) < 2 || raw[0] != '"' {
		return ""
	}
	if strings.IndexByte(raw, '\\') < 0 {
		return raw[1 : len(raw)-1]
	}
	var s string
	if json.Unmarshal([]byte(raw), &s) != nil {
		return ""
	}
	return s
}

// delta appends text or thinking, opening a block (and closing the previous one) on a change
// of kind.
func (s *streamer) delta(kind blockKind, text, field string) bool {
	if s.kind != kind {
		if !s.closeOpen() || !s.closeTools() {
			return false
		}
		s.kind = kind
		s.open = len(s.msg.Content)
		typ := llm.EventTextStart
		if kind == kindThinking {
			s.msg.Content = append(s.msg.Content, llm.Content{Type: llm.ContentThinking, ThinkingSignature: field})
			typ = llm.EventThinkingStart
		} else {
			s.msg.Content = append(s.msg.Content, llm.Content{Type: llm.ContentText})
		}
		if !s.emit(llm.Event{Type: typ, ContentIndex: s.open, Partial: s.msg}) {
			return false
		}
	}
	s.buf.WriteString(text)
	blk := &s.msg.Content[s.open]
	typ := llm.EventTextDelta
	if kind == kindThinking {
		blk.Thinking = s.buf.String()
		typ = llm.EventThinkingDelta
	} else {
		blk.Text = s.buf.String()
	}
	return s.emit(llm.Event{Type: typ, ContentIndex: s.open, Delta: text, Partial: s.msg})
}

// closeOpen ends the open text or thinking block.
func (s *streamer) closeOpen() bool {
	if s.kind == kindNone {
		return true
	}
	typ := llm.EventTextEnd
	if s.kind == kindThinking {
		typ = llm.EventThinkingEnd
	}
	idx, full := s.open, s.buf.String()
	s.kind, s.open = kindNone, -1
	s.buf = strings.Builder{} // the block keeps the old buffer's string
	return s.emit(llm.Event{Type: typ, ContentIndex: idx, Content: full, Partial: s.msg})
}

func (s *streamer) toolDelta(tc toolCallDelta) bool {
	var st *toolState
	for _, t := range s.tools {
		if t.apiIndex == tc.index {
			st = t // the latest call with this index wins (see below)
		}
	}
	// Some servers (Gemini's OpenAI endpoint) give every parallel call index 0; a new id under a
	// known index is a new call.
	if st != nil && tc.id != "" && s.msg.Content[st.content].ID != "" && s.msg.Content[st.content].ID != tc.id {
		st = nil
	}
	if st == nil {
		if !s.closeOpen() {
			return false
		}
		st = &toolState{apiIndex: tc.index, content: len(s.msg.Content), open: true}
		s.tools = append(s.tools, st)
		s.msg.Content = append(s.msg.Content, llm.ToolCall(tc.id, tc.name, nil))
		if !s.emit(llm.Event{Type: llm.EventToolCallStart, ContentIndex: st.content, Partial: s.msg}) {
			return false
		}
	} else if !st.open {
		s.fail(llm.StopReasonError, fmt.Errorf("tool call %d (%s) received arguments after its block ended", tc.index, s.msg.Content[st.content].Name))
		return false
	}
	blk := &s.msg.Content[st.content]
	if blk.ID == "" {
		blk.ID = tc.id
	}
	if blk.Name == "" {
		blk.Name = tc.name
	}
	if a := tc.argus; a != "" {
		st.args.WriteString(a)
		blk.Arguments = llm.ParsePartialJSON(st.args.String())
		return s.emit(llm.Event{Type: llm.EventToolCallDelta, ContentIndex: st.content, Delta: a, Partial: s.msg})
	}
	return true
}

// closeTools ends every open tool call in content order. Final arguments that are not a JSON
// object fail the stream, unless the model was cut off by the token limit: then the best-effort
// arguments stay and the stop reason (length) tells the loop not to run the calls.
func (s *streamer) closeTools() bool {
	for _, st := range s.tools {
		if !st.open {
			continue
		}
		st.open = false
		blk := &s.msg.Content[st.content]
		raw := strings.TrimSpace(st.args.String())
		if raw != "" && s.finish != "length" {
			var v map[string]any
			if err := json.Unmarshal([]byte(raw), &v); err != nil || v == nil {
				if err == nil {
					err = errors.New("not an object")
				}
				s.fail(llm.StopReasonError, fmt.Errorf("tool call %s arguments are not valid JSON: %w (received %s)",
					blk.Name, err, strconv.Quote(truncate(raw, 200))))
				return false
			}
			blk.Arguments = v
		}
		if blk.Arguments == nil {
			blk.Arguments = map[string]any{}
		}
		tc := *blk
		if !s.emit(llm.Event{Type: llm.EventToolCallEnd, ContentIndex: st.content, ToolCall: &tc, Partial: s.msg}) {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// end closes the open blocks and sends done, or an error for a finish reason that is not a
// normal stop.
func (s *streamer) end() {
	if s.finish == "" {
		s.fail(llm.StopReasonError, fmt.Errorf("%w (connection closed early?)", ErrTruncatedStream))
		return
	}
	if !s.closeOpen() || !s.closeTools() {
		return
	}
	var reason llm.StopReason
	switch s.finish {
	case "stop", "end_turn", "eos":
		reason = llm.StopReasonStop
		if len(s.tools) > 0 { // llama.cpp and others report "stop" after tool calls
			reason = llm.StopReasonToolUse
		}
	case "length", "max_tokens":
		reason = llm.StopReasonLength
	case "tool_calls", "function_call":
		reason = llm.StopReasonToolUse
	case "content_filter":
		s.fail(llm.StopReasonError, fmt.Errorf("%w (finish_reason content_filter)", ErrContentFilter))
		return
	default:
		s.fail(llm.StopReasonError, fmt.Errorf("%w %q", ErrUnknownFinishReason, s.finish))
		return
	}
	s.msg.StopReason = reason
	s.done = true
	s.yield(llm.Event{Type: llm.EventDone, Reason: reason, Message: s.msg})
}

// usage records token counts. OpenAI's prompt_tokens include cached tokens; DeepSeek reports
// its cache hits as prompt_cache_hit_tokens instead of prompt_tokens_details.cached_tokens.
func (s *streamer) usage(u gjson.Result) {
	var prompt, completion, cached, write, hit int64
	var hasHit bool
	u.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "prompt_tokens":
			prompt = v.Int()
		case "completion_tokens":
			completion = v.Int()
		case "prompt_tokens_details":
			if v.IsObject() {
				v.ForEach(func(k, v gjson.Result) bool {
					switch k.Str {
					case "cached_tokens":
						cached = v.Int()
					case "cache_write_tokens":
						write = v.Int()
					}
					return true
				})
			}
		case "prompt_cache_hit_tokens":
			if n, err := strconv.ParseInt(v.Raw, 10, 64); err == nil {
				hit, hasHit = n, true
			}
		}
		return true
	})
	if cached == 0 && hasHit {
		cached = hit
	}
	input := prompt - cached - write
	if input < 0 {
		input = 0
	}
	us := s.msg.Usage
	us.Input, us.Output = int(input), int(completion)
	us.CacheRead, us.CacheWrite = int(cached), int(write)
	us.TotalTokens = us.Input + us.Output + us.CacheRead + us.CacheWrite
	llm.CalculateCost(s.model, us)
}
