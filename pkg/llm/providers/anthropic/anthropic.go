// Package anthropic implements the llm API "anthropic-messages": Anthropic's streaming Messages
// API through the official SDK (github.com/anthropics/anthropic-sdk-go).
//
// What it maps:
//   - text, thinking (with signatures) and redacted thinking (a thinking block with Redacted set
//     whose Thinking holds the opaque data), streamed tool input (arguments re-parsed from
//     partial JSON on every delta), base64 images, tool results (consecutive results are one
//     user message, as the API requires);
//   - thinking: opts.Thinking picks a budget from opts.ThinkingBudgets ("enabled" thinking);
//     models with adaptive thinking (Claude 4.6 and later, or opts.Extra["anthropic.adaptive"])
//     get {"type":"adaptive"} plus output_config.effort from the level instead;
//   - prompt caching is on by default: cache_control ephemeral on the system prompt and on the
//     last block of the last user message. opts.Extra["anthropic.cacheControl"] = false or "none"
//     turns it off, "1h" asks for the one-hour TTL;
//   - stop reasons: end_turn, stop_sequence, pause_turn → stop; max_tokens and
//     model_context_window_exceeded → length; tool_use → toolUse; refusal → error (the
//     message is kept, ErrorMessage says the model refused);
//   - usage: input, output, cache read and cache creation tokens, and their cost.
//
// Failures (HTTP errors with the body quoted, stream error events, a cancelled ctx) arrive
// inside the stream. The SDK's own retries are off; 429/5xx are retried by the transport with
// backoff honouring Retry-After (capped by opts.MaxRetryDelay).
package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"strings"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/internal/retry"
	"github.com/agentbus/agentbus/pkg/llm/providers/internal/streambuild"
)

// vendor is the key and base URL the provider uses by default.
var vendor = streambuild.Vendor{Name: "anthropic", DefaultBaseURL: DefaultBaseURL, KeyEnv: []string{"ANTHROPIC_API_KEY"}}

// DefaultBaseURL is used when the model has no BaseURL.
const DefaultBaseURL = "https://api.anthropic.com"

// Provider streams from the Anthropic Messages API. The zero value is ready to use.
type Provider struct {
	// HTTPClient is used when opts.HTTPClient is nil (nil = retry.DefaultClient, which keeps
	// idle connections for concurrent calls).
	HTTPClient *http.Client
}

// New returns a Provider.
func New() *Provider { return &Provider{} }

// Register registers a Provider for llm.APIAnthropicMessages.
func Register() { llm.RegisterAPI(llm.APIAnthropicMessages, New()) }

// Stream implements llm.Provider.
func (p *Provider) Stream(ctx context.Context, model *llm.Model, c *llm.Context, opts *llm.StreamOptions) iter.Seq[llm.Event] {
	return vendor.Stream(ctx, model, opts, func(b *streambuild.Builder, key string, opts *llm.StreamOptions) {
		params, err := buildParams(model, c, opts)
		if err != nil {
			b.Fail(ctx, fmt.Errorf("anthropic: %w", err))
			return
		}
		client := anthropic.NewClient(clientOptions(model, opts, key, p.HTTPClient)...)
		stream := client.Messages.NewStreaming(ctx, params)
		defer stream.Close()
		if !b.Start() {
			return
		}
		st := &state{b: b, blocks: map[int64]int{}}
		for stream.Next() {
			if !st.handle(stream.Current()) {
				return
			}
		}
		if err := stream.Err(); err != nil || ctx.Err() != nil {
			b.Fail(ctx, describeError(err, key))
			return
		}
		if !st.stopped {
			b.Fail(ctx, errors.New("anthropic: stream ended before message_stop"))
			return
		}
		if st.refusal { // an error event that keeps whatever was said before the refusal
			b.CloseAll()
			b.Fail(ctx, errors.New("anthropic: the model refused to answer (stop_reason refusal)"))
			return
		}
		b.Finish(st.reason)
	})
}

func clientOptions(model *llm.Model, opts *llm.StreamOptions, key string, hc *http.Client) []option.RequestOption {
	base := model.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	client := opts.HTTPClient
	if client == nil {
		client = hc
	}
	ro := []option.RequestOption{
		option.WithBaseURL(strings.TrimSuffix(base, "/") + "/"),
		option.WithAPIKey(key),
		option.WithMaxRetries(0), // retries are ours: backoff/v4 with a capped Retry-After
		option.WithMiddleware(retry.Middleware(retry.Policy{MaxDelay: opts.MaxRetryDelay})),
	}
	if client == nil {
		client = retry.DefaultClient() // not http.DefaultClient: 2 idle connections per host
	}
	ro = append(ro, option.WithHTTPClient(client))
	for k, v := range model.Headers {
		ro = append(ro, option.WithHeader(k, v))
	}
	for k, v := range opts.Headers {
		ro = append(ro, option.WithHeader(k, v))
	}
	return ro
}

// state follows the SSE events of one response.
type state struct {
	b       *streambuild.Builder
	blocks  map[int64]int // Anthropic block index → content index
	usage   llm.Usage
	reason  llm.StopReason
	stopped bool // message_stop seen
	refusal bool
}

func (s *state) handle(ev anthropic.MessageStreamEventUnion) bool {
	b := s.b
	switch ev.Type {
	case "message_start":
		b.Msg.ResponseID = ev.Message.ID
		u := ev.Message.Usage
		s.usage = llm.Usage{
			Input: int(u.InputTokens), Output: int(u.OutputTokens),
			CacheRead: int(u.CacheReadInputTokens), CacheWrite: int(u.CacheCreationInputTokens),
		}
		b.Usage(s.usage)
	case "content_block_start":
		cb := ev.ContentBlock
		var c llm.Content
		switch cb.Type {
		case "text":
			c = llm.Content{Type: llm.ContentText}
		case "thinking":
			c = llm.Content{Type: llm.ContentThinking, ThinkingSignature: cb.Signature}
		case "redacted_thinking":
			c = llm.Content{Type: llm.ContentThinking, Redacted: true, Thinking: cb.Data}
		case "tool_use":
			c = llm.Content{Type: llm.ContentToolCall, ID: cb.ID, Name: cb.Name, Arguments: map[string]any{}}
		default:
			return true // server tools and results are not part of the llm contract
		}
		i, ok := b.OpenBlock(c)
		s.blocks[ev.Index] = i
		if !ok {
			return false
		}
		if cb.Type == "text" && cb.Text != "" {
			return b.Delta(i, cb.Text)
		}
		if cb.Type == "thinking" && cb.Thinking != "" {
			return b.Delta(i, cb.Thinking)
		}
	case "content_block_delta":
		i, ok := s.blocks[ev.Index]
		if !ok {
			return true
		}
		d := ev.Delta
		switch d.Type {
		case "text_delta":
			return b.Delta(i, d.Text)
		case "thinking_delta":
			return b.Delta(i, d.Thinking)
		case "signature_delta":
			b.Msg.Content[i].ThinkingSignature += d.Signature
		case "input_json_delta":
			return b.Delta(i, d.PartialJSON)
		}
	case "content_block_stop":
		if i, ok := s.blocks[ev.Index]; ok {
			delete(s.blocks, ev.Index)
			return b.CloseBlock(i)
		}
	case "message_delta":
		u := ev.Usage
		if u.InputTokens > 0 {
			s.usage.Input = int(u.InputTokens)
		}
		if u.CacheReadInputTokens > 0 {
			s.usage.CacheRead = int(u.CacheReadInputTokens)
		}
		if u.CacheCreationInputTokens > 0 {
			s.usage.CacheWrite = int(u.CacheCreationInputTokens)
		}
		if u.OutputTokens > 0 {
			s.usage.Output = int(u.OutputTokens)
		}
		b.Usage(s.usage)
		if r := ev.Delta.StopReason; r != "" {
			s.reason, s.refusal = mapStopReason(r)
		}
	case "message_stop":
		s.stopped = true
		if s.reason == "" {
			s.reason = llm.StopReasonStop
		}
	}
	return true
}

func mapStopReason(r anthropic.StopReason) (llm.StopReason, bool) {
	switch r {
	case anthropic.StopReasonMaxTokens, anthropic.StopReasonModelContextWindowExceeded:
		return llm.StopReasonLength, false
	case anthropic.StopReasonToolUse:
		return llm.StopReasonToolUse, false
	case anthropic.StopReasonRefusal:
		return llm.StopReasonError, true
	}
	return llm.StopReasonStop, false // end_turn, stop_sequence, pause_turn and anything new
}

// describeError turns an SDK error into a message that quotes the server's body and never
// the key.
func describeError(err error, key string) error {
	if err == nil {
		return nil
	}
	var herr *retry.HTTPError
	if errors.As(err, &herr) {
		return fmt.Errorf("anthropic: %s", streambuild.Redact(herr.Error(), key))
	}
	var apiErr *anthropic.Error
	if errors.As(err, &apiErr) {
		body := apiErr.RawJSON()
		var env struct {
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		msg := streambuild.Clip(body, 2000)
		if json.Unmarshal([]byte(body), &env) == nil && env.Error.Message != "" {
			msg = env.Error.Type + ": " + env.Error.Message
		}
		status := 0
		if apiErr.Response != nil {
			status = apiErr.Response.StatusCode
		} else {
			status = apiErr.StatusCode
		}
		return fmt.Errorf("anthropic: %d %s: %s", status, http.StatusText(status), streambuild.Redact(msg, key))
	}
	return errors.New("anthropic: " + streambuild.Redact(err.Error(), key))
}
