// Package google implements the llm API "google-generative-ai": the Gemini API's streaming
// generateContent through the official SDK (google.golang.org/genai, Gemini API backend).
//
// What it maps:
//   - thought parts (Part.Thought) become thinking blocks; thought signatures are kept
//     base64-encoded: on a thinking block in ThinkingSignature, on text in TextSignature, on a
//     function call in ThoughtSignature, and sent back on the next turn to the same model;
//     Gemini 3 gets the placeholder SkipSignature on function calls another model made;
//   - Gemini sends every function call whole, so a call is toolcall_start, one toolcall_delta
//     with the whole JSON, toolcall_end; missing args become {}; ids are synthesized when the
//     server sends none (the Gemini API usually does not);
//   - images (inline base64 data), tool results as functionResponse parts ({"output": ...} or
//     {"error": ...}), consecutive results in one content;
//   - thinking: Gemini 3 models get a thinkingLevel from opts.Thinking, earlier ones a
//     thinkingBudget from opts.ThinkingBudgets; includeThoughts is set so thoughts stream;
//   - finish reasons: STOP → stop (toolUse when there are calls), MAX_TOKENS → length, anything
//     else (SAFETY, RECITATION, MALFORMED_FUNCTION_CALL, ...) → error naming the reason;
//   - usage: promptTokenCount minus cachedContentTokenCount is input, the cached part is cache
//     read, candidates plus thoughts tokens are output.
//
// The model's BaseURL may carry the API version (".../v1beta"); the SDK's own retries are off
// and 429/5xx are retried by the transport before the stream starts.
package google

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"google.golang.org/genai"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/internal/retry"
	"github.com/agentbus/agentbus/pkg/llm/providers/internal/streambuild"
)

// vendor is the key and base URL the provider uses by default.
var vendor = streambuild.Vendor{Name: "google", DefaultBaseURL: DefaultBaseURL, KeyEnv: []string{"GEMINI_API_KEY", "GOOGLE_API_KEY"}}

// DefaultBaseURL is used when the model has no BaseURL.
const DefaultBaseURL = "https://generativelanguage.googleapis.com/v1beta"

// Provider streams from the Gemini API. The zero value is ready to use.
type Provider struct {
	// HTTPClient is used when opts.HTTPClient is nil (nil = retry.DefaultClient, which keeps
	// idle connections for concurrent calls).
	HTTPClient *http.Client
}

// New returns a Provider.
func New() *Provider { return &Provider{} }

// Register registers a Provider for llm.APIGoogleGenerative.
func Register() { llm.RegisterAPI(llm.APIGoogleGenerative, New()) }

// Stream implements llm.Provider.
func (p *Provider) Stream(ctx context.Context, model *llm.Model, c *llm.Context, opts *llm.StreamOptions) iter.Seq[llm.Event] {
	return vendor.Stream(ctx, model, opts, func(b *streambuild.Builder, key string, opts *llm.StreamOptions) {
		contents, config, err := buildRequest(model, c, opts)
		if err != nil {
			b.Fail(ctx, fmt.Errorf("google: %w", err))
			return
		}
		client, err := genai.NewClient(ctx, p.clientConfig(model, opts, key))
		if err != nil {
			b.Fail(ctx, fmt.Errorf("google: %s", streambuild.Redact(err.Error(), key)))
			return
		}
		st := &state{b: b}
		started := false
		for resp, err := range client.Models.GenerateContentStream(ctx, model.ID, contents, config) {
			if err != nil {
				if started {
					st.closeOpen()
				}
				b.Fail(ctx, describeError(err, key))
				return
			}
			if !started {
				started = true
				if !b.Start() {
					return
				}
			}
			if !st.handle(resp) {
				return
			}
		}
		if ctx.Err() != nil {
			b.Fail(ctx, ctx.Err())
			return
		}
		if !started {
			if !b.Start() {
				return
			}
		}
		st.finish()
	})
}

func (p *Provider) clientConfig(model *llm.Model, opts *llm.StreamOptions, key string) *genai.ClientConfig {
	base := model.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	base = strings.TrimSuffix(base, "/")
	version := ""
	if i := strings.LastIndex(base, "/"); i >= 0 && apiVersion.MatchString(base[i+1:]) {
		base, version = base[:i], base[i+1:]
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = p.HTTPClient
	}
	if hc == nil {
		hc = retry.DefaultClient() // not http.DefaultClient: 2 idle connections per host
	}
	client := *hc
	client.Transport = &retry.Transport{Base: hc.Transport, Policy: retry.Policy{MaxDelay: opts.MaxRetryDelay}}
	headers := http.Header{}
	for k, v := range model.Headers {
		headers.Set(k, v)
	}
	for k, v := range opts.Headers {
		headers.Set(k, v)
	}
	return &genai.ClientConfig{
		APIKey: key, Backend: genai.BackendGeminiAPI, HTTPClient: &client,
		HTTPOptions: genai.HTTPOptions{BaseURL: base + "/", APIVersion: version, Headers: headers},
	}
}

// SkipSignature is the documented placeholder thought signature Gemini 3 accepts on function
// calls that have none (calls made by another model, replayed after a handoff); without it
// Gemini 3 rejects the request.
const SkipSignature = "skip_thought_signature_validator"

// skipMissingSignatures puts SkipSignature on every functionCall part of the request body that
// has no thoughtSignature. It works on the body map because the literal is not base64, and
// genai would base64-encode a []byte signature.
func skipMissingSignatures(body map[string]any) map[string]any {
	forEach := func(v any, f func(map[string]any)) {
		switch xs := v.(type) {
		case []any:
			for _, x := range xs {
				if m, ok := x.(map[string]any); ok {
					f(m)
				}
			}
		case []map[string]any:
			for _, m := range xs {
				f(m)
			}
		}
	}
	forEach(body["contents"], func(content map[string]any) {
		forEach(content["parts"], func(part map[string]any) {
			if _, isCall := part["functionCall"]; !isCall {
				return
			}
			if sig, _ := part["thoughtSignature"].(string); sig == "" {
				part["thoughtSignature"] = SkipSignature
			}
		})
	})
	return body
}

var apiVersion = regexp.MustCompile(`^v\d+(alpha|beta)?\d*$`)

func describeError(err error, key string) error {
	var herr *retry.HTTPError
	if errors.As(err, &herr) {
		return fmt.Errorf("google: %s", streambuild.Redact(herr.Error(), key))
	}
	var apiErr genai.APIError
	if errors.As(err, &apiErr) {
		return fmt.Errorf("google: %d %s: %s", apiErr.Code, apiErr.Status, streambuild.Redact(apiErr.Message, key))
	}
	return errors.New("google: " + streambuild.Redact(err.Error(), key))
}

// state follows the streamed responses. Consecutive text (or thought) parts extend one block.
type state struct {
	b        *streambuild.Builder
	cur      int // the open text/thinking block when haveOpen
	curType  string
	calls    int
	reason   genai.FinishReason
	haveOpen bool
}

func (s *state) closeOpen() bool {
	if s.haveOpen {
		s.haveOpen = false
		return s.b.CloseBlock(s.cur)
	}
	return true
}

func (s *state) handle(resp *genai.GenerateContentResponse) bool {
	b := s.b
	if resp.ResponseID != "" {
		b.Msg.ResponseID = resp.ResponseID
	}
	if u := resp.UsageMetadata; u != nil {
		cached := int(u.CachedContentTokenCount)
		b.Usage(llm.Usage{
			Input:     int(u.PromptTokenCount) - cached,
			Output:    int(u.CandidatesTokenCount) + int(u.ThoughtsTokenCount),
			CacheRead: cached,
		})
	}
	if len(resp.Candidates) == 0 {
		return true
	}
	cand := resp.Candidates[0]
	if cand.FinishReason != "" {
		s.reason = cand.FinishReason
	}
	if cand.Content == nil {
		return true
	}
	for _, part := range cand.Content.Parts {
		if part == nil {
			continue
		}
		sig := ""
		if len(part.ThoughtSignature) > 0 {
			sig = base64.StdEncoding.EncodeToString(part.ThoughtSignature)
		}
		switch {
		case part.FunctionCall != nil:
			if !s.closeOpen() {
				return false
			}
			fc := part.FunctionCall
			s.calls++
			id := fc.ID
			if id == "" {
				id = fmt.Sprintf("%s_%s_%d", fc.Name, strconv.FormatInt(b.Msg.Timestamp, 36), s.calls)
			}
			args := fc.Args
			if args == nil {
				args = map[string]any{}
			}
			raw, err := jsonMarshal(args)
			if err != nil {
				raw = "{}"
			}
			i, ok := b.OpenBlock(llm.Content{Type: llm.ContentToolCall, ID: id, Name: fc.Name, ThoughtSignature: sig})
			if !ok || !b.Delta(i, raw) || !b.CloseBlock(i) {
				return false
			}
		case part.Text == "" && sig != "" && s.haveOpen:
			// A closing part that only carries the signature of what streamed before it.
			if s.curType == llm.ContentThinking {
				b.Msg.Content[s.cur].ThinkingSignature = sig
			} else {
				b.Msg.Content[s.cur].TextSignature = sig
			}
		case part.Text != "" || (part.Thought && sig != ""):
			typ := llm.ContentText
			if part.Thought {
				typ = llm.ContentThinking
			}
			if !s.haveOpen || s.curType != typ {
				if !s.closeOpen() {
					return false
				}
				i, ok := b.OpenBlock(llm.Content{Type: typ})
				if !ok {
					return false
				}
				s.cur, s.curType, s.haveOpen = i, typ, true
			}
			if sig != "" {
				if typ == llm.ContentThinking {
					b.Msg.Content[s.cur].ThinkingSignature = sig
				} else {
					b.Msg.Content[s.cur].TextSignature = sig
				}
			}
			if part.Text != "" && !b.Delta(s.cur, part.Text) {
				return false
			}
		}
	}
	return true
}

func (s *state) finish() {
	if !s.closeOpen() {
		return
	}
	b := s.b
	switch s.reason {
	case genai.FinishReasonStop, "", genai.FinishReasonUnspecified:
		if s.calls > 0 {
			b.Finish(llm.StopReasonToolUse)
		} else {
			b.Finish(llm.StopReasonStop)
		}
	case genai.FinishReasonMaxTokens:
		b.Finish(llm.StopReasonLength)
	default:
		b.Fail(context.Background(), fmt.Errorf("google: generation stopped: finish reason %s", s.reason))
	}
}

var idUnsafe = regexp.MustCompile(`[^a-zA-Z0-9_-]`)

// normalizeID keeps tool-call ids to what the Gemini API accepts.
func normalizeID(id string) string {
	id = idUnsafe.ReplaceAllString(id, "_")
	if len(id) > 64 {
		id = id[:64]
	}
	return id
}
