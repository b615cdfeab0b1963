package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

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

// consume reads the SDK stream to its end and sends the terminal event.
func (s *streamer) consume(ctx context.Context, stream *ssestream.Stream[openai.ChatCompletionChunk]) {
	for stream.Next() {
		s.chunk(stream.Current())
		if s.done {
			return
		}
	}
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		s.fail(llm.StopReasonAborted, fmt.Errorf("%w: %w", errAborted, cause))
		return
	}
	if err := stream.Err(); err != nil {
		s.fail(llm.StopReasonError, describe(err))
		return
	}
	s.end()
}

// describe gives a stream error a message that says what went wrong and quotes the server.
func describe(err error) error {
	var herr *retry.HTTPError
	var serr *ssestream.StreamError
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &herr):
		return herr
	case errors.As(err, &serr):
		return fmt.Errorf("%w: %s", ErrStreamError, retry.ErrorMessage(serr.Event.Data))
	case errors.As(err, &syn), errors.As(err, &typ):
		return fmt.Errorf("%w: %w", ErrMalformedChunk, err)
	}
	return fmt.Errorf("request failed: %w", err)
}

// chunk applies one chunk. Only choice 0 is read: requests never ask for n > 1.
func (s *streamer) chunk(ch openai.ChatCompletionChunk) {
	if s.msg.ResponseID == "" && ch.ID != "" {
		s.msg.ResponseID = ch.ID
	}
	if ch.JSON.Usage.Valid() {
		s.usage(&ch.Usage)
	}
	if len(ch.Choices) == 0 {
		return
	}
	choice := &ch.Choices[0]
	d := &choice.Delta
	if len(d.JSON.ExtraFields) > 0 {
		for _, f := range reasoningFields {
			if text := stringField(d.JSON.ExtraFields[f].Raw()); text != "" {
				if !s.delta(kindThinking, text, f) {
					return
				}
				break // servers that send two of the fields send the same text twice
			}
		}
	}
	if d.Content != "" && !s.delta(kindText, d.Content, "") {
		return
	}
	if d.Refusal != "" && !s.delta(kindText, d.Refusal, "") {
		return
	}
	for i := range d.ToolCalls {
		if !s.toolDelta(&d.ToolCalls[i]) {
			return
		}
	}
	if choice.FinishReason != "" {
		s.finish = choice.FinishReason
	}
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

func (s *streamer) toolDelta(tc *openai.ChatCompletionChunkChoiceDeltaToolCall) bool {
	var st *toolState
	for _, t := range s.tools {
		if t.apiIndex == tc.Index {
			st = t // the latest call with this index wins (see below)
		}
	}
	// Some servers (Gemini's OpenAI endpoint) give every parallel call index 0; a new id under a
	// known index is a new call.
	if st != nil && tc.ID != "" && s.msg.Content[st.content].ID != "" && s.msg.Content[st.content].ID != tc.ID {
		st = nil
	}
	if st == nil {
		if !s.closeOpen() {
			return false
		}
		st = &toolState{apiIndex: tc.Index, content: len(s.msg.Content), open: true}
		s.tools = append(s.tools, st)
		s.msg.Content = append(s.msg.Content, llm.ToolCall(tc.ID, tc.Function.Name, nil))
		if !s.emit(llm.Event{Type: llm.EventToolCallStart, ContentIndex: st.content, Partial: s.msg}) {
			return false
		}
	} else if !st.open {
		s.fail(llm.StopReasonError, fmt.Errorf("tool call %d (%s) received arguments after its block ended", tc.Index, s.msg.Content[st.content].Name))
		return false
	}
	blk := &s.msg.Content[st.content]
	if blk.ID == "" {
		blk.ID = tc.ID
	}
	if blk.Name == "" {
		blk.Name = tc.Function.Name
	}
	if a := tc.Function.Arguments; a != "" {
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
func (s *streamer) usage(u *openai.CompletionUsage) {
	cached := u.PromptTokensDetails.CachedTokens
	if cached == 0 {
		if f, ok := u.JSON.ExtraFields["prompt_cache_hit_tokens"]; ok {
			if n, err := strconv.ParseInt(f.Raw(), 10, 64); err == nil {
				cached = n
			}
		}
	}
	write := u.PromptTokensDetails.CacheWriteTokens
	input := u.PromptTokens - cached - write
	if input < 0 {
		input = 0
	}
	us := s.msg.Usage
	us.Input, us.Output = int(input), int(u.CompletionTokens)
	us.CacheRead, us.CacheWrite = int(cached), int(write)
	us.TotalTokens = us.Input + us.Output + us.CacheRead + us.CacheWrite
	llm.CalculateCost(s.model, us)
}
