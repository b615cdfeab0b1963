// Package openairesponses implements the llm API "openai-responses": OpenAI's Responses API,
// streamed through the official SDK (github.com/openai/openai-go/v3, client.Responses.NewStreaming).
//
// What it maps:
//   - reasoning items: their summary streams as thinking; the whole item (id, summary,
//     encrypted_content) is kept as JSON in the thinking block's ThinkingSignature and sent
//     back as a reasoning input item on the next turn to the same model. Requests use
//     store:false and include reasoning.encrypted_content, so nothing depends on server state;
//   - message items stream as text; the item id is kept in TextSignature and replayed;
//   - function_call items: the tool-call id is "call_id|item_id"; arguments stream through
//     response.function_call_arguments.delta and are re-parsed on every delta;
//   - images as input_image data URLs; tool results as function_call_output;
//   - thinking: opts.Thinking is reasoning.effort (summary "auto") for reasoning models;
//   - status: completed → stop (toolUse with calls); incomplete with max_output_tokens →
//     length, any other incomplete reason, failed or cancelled → error naming it;
//   - usage: input_tokens minus cached_tokens is input, cached tokens are cache read.
//
// The SDK's retries are off; 429/5xx are retried with backoff honouring Retry-After (capped)
// through the shared retry middleware. opts.SessionID becomes prompt_cache_key.
package openairesponses

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/internal/retry"
	"github.com/agentbus/agentbus/pkg/llm/providers/internal/streambuild"
)

// vendor is the key and base URL the provider uses by default.
var vendor = streambuild.Vendor{Name: "openai-responses", DefaultBaseURL: DefaultBaseURL, KeyEnv: []string{"OPENAI_API_KEY"}}

// DefaultBaseURL is used when the model has no BaseURL.
const DefaultBaseURL = "https://api.openai.com/v1"

// Provider streams from the Responses API. The zero value is ready to use.
type Provider struct {
	// HTTPClient is used when opts.HTTPClient is nil (nil = retry.DefaultClient, which keeps
	// idle connections for concurrent calls).
	HTTPClient *http.Client
}

// New returns a Provider.
func New() *Provider { return &Provider{} }

// Register registers a Provider for llm.APIOpenAIResponses.
func Register() { llm.RegisterAPI(llm.APIOpenAIResponses, New()) }

// Stream implements llm.Provider.
func (p *Provider) Stream(ctx context.Context, model *llm.Model, c *llm.Context, opts *llm.StreamOptions) iter.Seq[llm.Event] {
	return vendor.Stream(ctx, model, opts, func(b *streambuild.Builder, key string, opts *llm.StreamOptions) {
		params, err := buildParams(model, c, opts)
		if err != nil {
			b.Fail(ctx, fmt.Errorf("openai-responses: %w", err))
			return
		}
		client := openai.NewClient(p.clientOptions(model, opts, key)...)
		stream := client.Responses.NewStreaming(ctx, params)
		defer stream.Close()
		if !b.Start() {
			return
		}
		st := &state{b: b, items: map[string]int{}}
		for stream.Next() {
			if !st.handle(stream.Current()) {
				return
			}
			if st.err != nil {
				b.Fail(ctx, st.err)
				return
			}
		}
		if err := stream.Err(); err != nil || ctx.Err() != nil {
			b.Fail(ctx, describeError(err, key))
			return
		}
		if !st.done {
			b.Fail(ctx, errors.New("openai-responses: stream ended before response.completed"))
			return
		}
		b.Finish(st.reason)
	})
}

func (p *Provider) clientOptions(model *llm.Model, opts *llm.StreamOptions, key string) []option.RequestOption {
	base := model.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	ro := []option.RequestOption{
		option.WithBaseURL(strings.TrimSuffix(base, "/") + "/"),
		option.WithAPIKey(key),
		option.WithMaxRetries(0), // retries are ours: backoff/v4 with a capped Retry-After
		option.WithMiddleware(retry.Middleware(retry.Policy{MaxDelay: opts.MaxRetryDelay})),
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = p.HTTPClient
	}
	if hc == nil {
		hc = retry.DefaultClient() // not http.DefaultClient: 2 idle connections per host
	}
	ro = append(ro, option.WithHTTPClient(hc))
	for k, v := range model.Headers {
		ro = append(ro, option.WithHeader(k, v))
	}
	for k, v := range opts.Headers {
		ro = append(ro, option.WithHeader(k, v))
	}
	return ro
}

func describeError(err error, key string) error {
	if err == nil {
		return nil
	}
	var herr *retry.HTTPError
	if errors.As(err, &herr) {
		return fmt.Errorf("openai-responses: %s", streambuild.Redact(herr.Error(), key))
	}
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		msg := apiErr.Message
		if msg == "" {
			msg = streambuild.Clip(apiErr.RawJSON(), 2000)
		}
		if apiErr.Code != "" {
			msg += " (" + apiErr.Code + ")"
		}
		return fmt.Errorf("openai-responses: %d %s: %s", apiErr.StatusCode, http.StatusText(apiErr.StatusCode), streambuild.Redact(msg, key))
	}
	return errors.New("openai-responses: " + streambuild.Redact(err.Error(), key))
}

// state follows the stream's events.
type state struct {
	b      *streambuild.Builder
	items  map[string]int // output item id → content index
	parts  map[string]int // reasoning item id → summary parts seen
	calls  int
	reason llm.StopReason
	done   bool
	err    error
}

func (s *state) handle(ev responses.ResponseStreamEventUnion) bool {
	b := s.b
	switch ev.Type {
	case "response.created":
		b.Msg.ResponseID = ev.Response.ID
	case "response.output_item.added":
		it := ev.Item
		var c llm.Content
		switch it.Type {
		case "reasoning":
			c = llm.Content{Type: llm.ContentThinking}
		case "message":
			c = llm.Content{Type: llm.ContentText, TextSignature: it.ID}
		case "function_call":
			s.calls++
			c = llm.Content{Type: llm.ContentToolCall, ID: it.CallID + "|" + it.ID, Name: it.Name}
		default:
			return true
		}
		i, ok := b.OpenBlock(c)
		s.items[it.ID] = i
		return ok
	case "response.reasoning_summary_part.added":
		if i, ok := s.items[ev.ItemID]; ok {
			if s.parts == nil {
				s.parts = map[string]int{}
			}
			s.parts[ev.ItemID]++
			if s.parts[ev.ItemID] > 1 {
				return b.Delta(i, "\n\n")
			}
		}
	case "response.reasoning_summary_text.delta", "response.reasoning_text.delta",
		"response.output_text.delta", "response.refusal.delta", "response.function_call_arguments.delta":
		if i, ok := s.items[ev.ItemID]; ok {
			return b.Delta(i, ev.Delta)
		}
	case "response.output_item.done":
		it := ev.Item
		i, ok := s.items[it.ID]
		if !ok {
			return true
		}
		delete(s.items, it.ID)
		c := &b.Msg.Content[i]
		switch it.Type {
		case "reasoning":
			c.ThinkingSignature = it.RawJSON()
			if c.Thinking == "" { // no streamed summary: take the final one
				var parts []string
				for _, sp := range it.Summary {
					parts = append(parts, sp.Text)
				}
				c.Thinking = strings.Join(parts, "\n\n")
			}
		case "function_call":
			if args := it.Arguments.OfString; args != "" {
				b.Raw[i] = []byte(args)
			}
		}
		return b.CloseBlock(i)
	case "response.completed", "response.incomplete", "response.failed", "response.cancelled":
		r := ev.Response
		u := r.Usage
		cached := int(u.InputTokensDetails.CachedTokens)
		b.Usage(llm.Usage{Input: int(u.InputTokens) - cached, Output: int(u.OutputTokens), CacheRead: cached})
		if r.ID != "" {
			b.Msg.ResponseID = r.ID
		}
		s.done = true
		switch r.Status {
		case responses.ResponseStatusCompleted, "":
			s.reason = llm.StopReasonStop
			if s.calls > 0 {
				s.reason = llm.StopReasonToolUse
			}
		case responses.ResponseStatusIncomplete:
			if r.IncompleteDetails.Reason == "max_output_tokens" || r.IncompleteDetails.Reason == "" {
				s.reason = llm.StopReasonLength
			} else {
				s.err = fmt.Errorf("openai-responses: response incomplete: %s", r.IncompleteDetails.Reason)
			}
		default:
			msg := r.Error.Message
			if r.Error.Code != "" {
				msg = fmt.Sprintf("%s (%s)", msg, r.Error.Code)
			}
			s.err = fmt.Errorf("openai-responses: response %s: %s", r.Status, strings.TrimSpace(msg))
		}
	case "error":
		msg := ev.Message
		if ev.Code != "" {
			msg += " (" + ev.Code + ")"
		}
		s.err = fmt.Errorf("openai-responses: %s", msg)
	}
	return true
}
