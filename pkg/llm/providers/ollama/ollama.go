// Package ollama implements the llm API "ollama-chat": Ollama's native /api/chat endpoint,
// streamed as NDJSON over net/http (Ollama has no official Go SDK outside its own module).
//
// What it maps:
//   - the model's BaseURL is the provider's "host" from the configuration
//     (http://localhost:11434 when empty, or $OLLAMA_HOST); a trailing /api or /v1 is dropped;
//   - text, thinking (message.thinking), images (base64 in message.images), tools and tool calls.
//     Ollama sends each tool call whole, so a call is toolcall_start, one toolcall_delta with
//     the whole JSON, toolcall_end; ids are synthesized when the server sends none;
//   - "think": true for reasoning models when opts.Thinking is set (false when it is off, so
//     thinking models answer directly); models that take a level (gpt-oss) get "low",
//     "medium" or "high"; opts.Extra["ollama.think"] overrides (bool or level string);
//   - options.num_ctx from opts.Extra["ollama.num_ctx"], else the model's ContextWindow
//     (Ollama's own default is small and silently truncates); num_predict from MaxTokens;
//   - done_reason stop → stop (toolUse when the message has tool calls), length → length;
//     prompt_eval_count / eval_count → usage input / output.
//
// Failures (HTTP errors with Ollama's {"error": ...} quoted, an error line inside the stream, a
// cancelled ctx) arrive inside the stream; 429/5xx are retried before the stream starts.
package ollama

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/internal/retry"
	"github.com/agentbus/agentbus/pkg/llm/providers/internal/streambuild"
)

// DefaultHost is Ollama's default listen address.
const DefaultHost = "http://localhost:11434"

// Provider streams from Ollama's /api/chat. The zero value is ready to use.
type Provider struct {
	// HTTPClient is used when opts.HTTPClient is nil (nil = retry.DefaultClient, which keeps
	// idle connections for concurrent calls).
	HTTPClient *http.Client
}

// New returns a Provider.
func New() *Provider { return &Provider{} }

// Register registers a Provider for llm.APIOllamaChat.
func Register() { llm.RegisterAPI(llm.APIOllamaChat, New()) }

// Host returns the Ollama base address for model.
func Host(model *llm.Model) string {
	h := model.BaseURL
	if h == "" {
		h = os.Getenv("OLLAMA_HOST")
	}
	if h == "" {
		h = DefaultHost
	}
	if !strings.Contains(h, "://") {
		h = "http://" + h
	}
	h = strings.TrimSuffix(h, "/")
	for _, suffix := range []string{"/api", "/v1"} {
		h = strings.TrimSuffix(h, suffix)
	}
	return h
}

// Stream implements llm.Provider.
func (p *Provider) Stream(ctx context.Context, model *llm.Model, c *llm.Context, opts *llm.StreamOptions) iter.Seq[llm.Event] {
	if opts == nil {
		opts = &llm.StreamOptions{}
	}
	return func(yield func(llm.Event) bool) {
		b := streambuild.New(model, yield)
		body, err := json.Marshal(buildRequest(model, c, opts))
		if err != nil {
			b.Fail(ctx, fmt.Errorf("ollama: encode request: %w", err))
			return
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, Host(model)+"/api/chat", bytes.NewReader(body))
		if err != nil {
			b.Fail(ctx, fmt.Errorf("ollama: %w", err))
			return
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/x-ndjson")
		if opts.APIKey != "" { // Ollama behind an authenticating proxy, or ollama.com
			req.Header.Set("Authorization", "Bearer "+opts.APIKey)
		}
		for k, v := range model.Headers {
			req.Header.Set(k, v)
		}
		for k, v := range opts.Headers {
			req.Header.Set(k, v)
		}
		resp, err := p.client(opts).Do(req)
		if err != nil {
			b.Fail(ctx, describeError(err, opts.APIKey))
			return
		}
		defer resp.Body.Close()
		if !b.Start() {
			return
		}
		readStream(ctx, b, resp.Body)
	}
}

func (p *Provider) client(opts *llm.StreamOptions) *http.Client {
	base := opts.HTTPClient
	if base == nil {
		base = p.HTTPClient
	}
	if base == nil {
		base = retry.DefaultClient() // not http.DefaultClient: 2 idle connections per host
	}
	c := *base
	c.Transport = &retry.Transport{Base: base.Transport, Policy: retry.Policy{MaxDelay: opts.MaxRetryDelay}}
	return &c
}

func describeError(err error, key string) error {
	var herr *retry.HTTPError
	if errors.As(err, &herr) {
		return fmt.Errorf("ollama: %s", streambuild.Redact(herr.Error(), key))
	}
	return errors.New("ollama: " + streambuild.Redact(err.Error(), key))
}

// chunk is one NDJSON line of /api/chat.
type chunk struct {
	Message struct {
		Content   string     `json:"content"`
		Thinking  string     `json:"thinking"`
		ToolCalls []toolCall `json:"tool_calls"`
	} `json:"message"`
	Done            bool   `json:"done"`
	DoneReason      string `json:"done_reason"`
	PromptEvalCount int    `json:"prompt_eval_count"`
	EvalCount       int    `json:"eval_count"`
	Error           string `json:"error"`
}

type toolCall struct {
	ID       string `json:"id,omitempty"`
	Function struct {
		Index     *int            `json:"index,omitempty"`
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// readStream turns the NDJSON lines into events. One json.Decoder over the body reuses its
// buffer and decoder state across lines, and one chunk value is reused, so a delta costs a
// handful of allocations (the delta strings themselves).
func readStream(ctx context.Context, b *streambuild.Builder, r io.Reader) {
	dec := json.NewDecoder(r)
	cur := -1 // open text/thinking block
	curType := ""
	calls := 0
	switchTo := func(typ string) bool {
		if cur >= 0 && curType == typ {
			return true
		}
		if cur >= 0 && !b.CloseBlock(cur) {
			return false
		}
		i, ok := b.OpenBlock(llm.Content{Type: typ})
		cur, curType = i, typ
		return ok
	}
	var ch chunk
	for {
		ch = chunk{}
		if err := dec.Decode(&ch); err != nil {
			switch {
			case ctx.Err() != nil:
			case errors.Is(err, io.EOF):
				err = errors.New("stream ended before the done line")
			default:
				var syn *json.SyntaxError
				if errors.As(err, &syn) {
					err = fmt.Errorf("bad stream line: %w", err)
				}
			}
			b.Fail(ctx, fmt.Errorf("ollama: %w", err))
			return
		}
		if ch.Error != "" {
			b.Fail(ctx, fmt.Errorf("ollama: %s", ch.Error))
			return
		}
		{
			m := &ch.Message
			if m.Thinking != "" {
				if !switchTo(llm.ContentThinking) || !b.Delta(cur, m.Thinking) {
					return
				}
			}
			if m.Content != "" {
				if !switchTo(llm.ContentText) || !b.Delta(cur, m.Content) {
					return
				}
			}
			for _, tc := range m.ToolCalls {
				if cur >= 0 {
					if !b.CloseBlock(cur) {
						return
					}
					cur, curType = -1, ""
				}
				calls++
				id := tc.ID
				if id == "" {
					id = fmt.Sprintf("call_%d_%s", calls, strconv.FormatInt(b.Msg.Timestamp, 36))
				}
				args := string(tc.Function.Arguments)
				if args == "" || args == "null" {
					args = "{}"
				}
				i, ok := b.OpenBlock(llm.Content{Type: llm.ContentToolCall, ID: id, Name: tc.Function.Name})
				if !ok || !b.Delta(i, args) || !b.CloseBlock(i) {
					return
				}
			}
		}
		if ch.Done {
			b.Usage(llm.Usage{Input: ch.PromptEvalCount, Output: ch.EvalCount})
			reason := llm.StopReasonStop
			if ch.DoneReason == "length" {
				reason = llm.StopReasonLength
			}
			if calls > 0 {
				reason = llm.StopReasonToolUse
			}
			b.Finish(reason)
			return
		}
	}
}
