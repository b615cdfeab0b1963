package models

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/llm"
)

// Default endpoints used when a provider configures no baseUrl / host. Tests always pass their
// own base URL.
const (
	DefaultOpenAIBaseURL    = "https://api.openai.com/v1"
	DefaultAnthropicBaseURL = "https://api.anthropic.com"
	DefaultGoogleBaseURL    = "https://generativelanguage.googleapis.com"
	DefaultOllamaHost       = "http://localhost:11434"
)

// maxDiscoveryBody bounds a listing response (an aggregator may list thousands of models).
const maxDiscoveryBody = 16 << 20

// maxPages bounds paginated listings (Anthropic, Google).
const maxPages = 20

// showConcurrency bounds parallel Ollama /api/show requests.
const showConcurrency = 4

// DiscoverOptions tune Discover. The zero value is usable.
type DiscoverOptions struct {
	// APIKey overrides the provider's apiKey (the registry resolves environment fallbacks).
	APIKey string
	// HTTPClient is used for every request (default http.DefaultClient). The caller bounds the
	// whole discovery with ctx.
	HTTPClient *http.Client
}

// Discover lists the models a provider serves, as llm.Models with what the listing tells
// (context window, image input, reasoning) and what the model id implies where the listing is
// silent (see InferCapabilities). It does not consult the provider's models allowlist: callers
// skip discovery for allowlisted providers (Manager does).
//
// Listing per api:
//   - openai-completions, openai-responses: GET {baseUrl}/models, Authorization: Bearer key.
//     Extra fields some servers add (context_length, max_model_len, architecture.input_modalities)
//     are read when present.
//   - ollama-chat: GET {host}/api/tags, then POST {host}/api/show per model for the context
//     length (model_info "<arch>.context_length") and capabilities (vision, thinking, tools).
//     A failing /api/show keeps the model with name-based guesses.
//   - anthropic-messages: GET {baseUrl}/v1/models (x-api-key, anthropic-version), paginated.
//   - google-generative-ai: GET {baseUrl}/v1beta/models (x-goog-api-key), paginated; only models
//     that support generateContent are kept.
//
// Errors wrap ErrDiscovery (or ErrUnsupportedAPI); the key never appears in them.
func Discover(ctx context.Context, alias string, p config.Provider, opts DiscoverOptions) ([]llm.Model, error) {
	d := discoverer{alias: alias, p: p, key: opts.APIKey, hc: opts.HTTPClient}
	if d.key == "" {
		d.key = p.APIKey
	}
	if d.hc == nil {
		d.hc = http.DefaultClient
	}
	var (
		ms  []llm.Model
		err error
	)
	switch p.API {
	case llm.APIOpenAICompletions, llm.APIOpenAIResponses:
		ms, err = d.openai(ctx)
	case llm.APIOllamaChat:
		ms, err = d.ollama(ctx)
	case llm.APIAnthropicMessages:
		ms, err = d.anthropic(ctx)
	case llm.APIGoogleGenerative:
		ms, err = d.google(ctx)
	default:
		return nil, fmt.Errorf("%w %q (provider %s)", ErrUnsupportedAPI, p.API, alias)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: provider %s: %w", ErrDiscovery, alias, err)
	}
	for i := range ms {
		ms[i].API, ms[i].Provider = p.API, alias
		if ms[i].Name == "" {
			ms[i].Name = ms[i].ID
		}
	}
	return ms, nil
}

type discoverer struct {
	alias string
	p     config.Provider
	key   string
	hc    *http.Client
}

func (d *discoverer) base(def string) string {
	b := d.p.BaseURL
	if d.p.API == llm.APIOllamaChat && d.p.Host != "" {
		b = d.p.Host
	}
	if b == "" {
		b = def
	}
	return strings.TrimRight(b, "/")
}

// getJSON sends a request and decodes a JSON answer into v.
func (d *discoverer) do(ctx context.Context, method, u string, body any, hdr map[string]string, v any) error {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = strings.NewReader(string(raw))
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, val := range d.p.Headers {
		req.Header.Set(k, val)
	}
	for k, val := range hdr {
		req.Header.Set(k, val)
	}
	resp, err := d.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, redact(u), unwrapURLError(err))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxDiscoveryBody))
	if err != nil {
		return fmt.Errorf("%s %s: read body: %w", method, redact(u), err)
	}
	if resp.StatusCode >= 400 {
		return fmt.Errorf("%s %s: HTTP %d: %s", method, redact(u), resp.StatusCode, snippet(raw))
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s %s: decode: %w", method, redact(u), err)
	}
	return nil
}

// redact drops the query (a key may travel there) from a URL for error messages.
func redact(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i]
	}
	return u
}

func unwrapURLError(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// openaiModel is one entry of GET /models. Only id is standard; the rest are extensions of
// OpenRouter, vLLM, LiteLLM and friends.
type openaiModel struct {
	ID            string `json:"id"`
	Name          string `json:"name"`
	ContextLength int    `json:"context_length"`
	ContextWindow int    `json:"context_window"`
	MaxModelLen   int    `json:"max_model_len"`
	Architecture  struct {
		InputModalities []string `json:"input_modalities"`
	} `json:"architecture"`
	TopProvider struct {
		MaxCompletionTokens int `json:"max_completion_tokens"`
	} `json:"top_provider"`
}

func (d *discoverer) openai(ctx context.Context) ([]llm.Model, error) {
	var out struct {
		Data []openaiModel `json:"data"`
	}
	hdr := map[string]string{}
	if d.key != "" {
		hdr["Authorization"] = "Bearer " + d.key
	}
	if err := d.do(ctx, http.MethodGet, d.base(DefaultOpenAIBaseURL)+"/models", nil, hdr, &out); err != nil {
		return nil, err
	}
	ms := make([]llm.Model, 0, len(out.Data))
	for _, e := range out.Data {
		if e.ID == "" || !isChatModel(e.ID) {
			continue
		}
		m := InferCapabilities(e.ID)
		if e.Name != "" {
			m.Name = e.Name
		}
		m.ContextWindow = firstPositive(e.ContextLength, e.ContextWindow, e.MaxModelLen)
		m.MaxTokens = e.TopProvider.MaxCompletionTokens
		if len(e.Architecture.InputModalities) > 0 {
			m.Input = inputsFrom(e.Architecture.InputModalities)
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// isChatModel drops ids an OpenAI-style listing mixes in that cannot chat (embeddings, audio,
// moderation, image generation).
func isChatModel(id string) bool {
	l := strings.ToLower(id)
	for _, s := range []string{"embed", "whisper", "tts", "moderation", "dall-e", "gpt-image", "davinci-0", "babbage-0", "rerank", "-transcribe", "cogview", "flux"} {
		if strings.Contains(l, s) {
			return false
		}
	}
	return true
}

func inputsFrom(mods []string) []string {
	in := []string{llm.InputText}
	for _, m := range mods {
		if strings.EqualFold(m, "image") {
			in = append(in, llm.InputImage)
			break
		}
	}
	return in
}

func (d *discoverer) ollama(ctx context.Context) ([]llm.Model, error) {
	base := d.base(DefaultOllamaHost)
	hdr := map[string]string{}
	if d.key != "" {
		hdr["Authorization"] = "Bearer " + d.key
	}
	var tags struct {
		Models []struct {
			Name    string `json:"name"`
			Model   string `json:"model"`
			Details struct {
				ParameterSize string `json:"parameter_size"`
				Family        string `json:"family"`
			} `json:"details"`
		} `json:"models"`
	}
	if err := d.do(ctx, http.MethodGet, base+"/api/tags", nil, hdr, &tags); err != nil {
		return nil, err
	}
	ms := make([]llm.Model, 0, len(tags.Models))
	for _, t := range tags.Models {
		id := t.Name
		if id == "" {
			id = t.Model
		}
		if id == "" || strings.Contains(strings.ToLower(id), "embed") {
			continue
		}
		ms = append(ms, InferCapabilities(id))
	}
	// /api/show per model, a few at a time; a failure keeps the name-based guess.
	var wg sync.WaitGroup
	sem := make(chan struct{}, showConcurrency)
	for i := range ms {
		wg.Add(1)
		sem <- struct{}{}
		go func(m *llm.Model) {
			defer wg.Done()
			defer func() { <-sem }()
			var show struct {
				Capabilities []string       `json:"capabilities"`
				ModelInfo    map[string]any `json:"model_info"`
			}
			if err := d.do(ctx, http.MethodPost, base+"/api/show", map[string]string{"model": m.ID, "name": m.ID}, hdr, &show); err != nil {
				return
			}
			for k, v := range show.ModelInfo {
				if strings.HasSuffix(k, ".context_length") {
					if f, ok := v.(float64); ok && f > 0 {
						m.ContextWindow = int(f)
					}
				}
			}
			if show.Capabilities != nil {
				m.Input = []string{llm.InputText}
				m.Reasoning = false
				for _, c := range show.Capabilities {
					switch c {
					case "vision":
						m.Input = append(m.Input, llm.InputImage)
					case "thinking":
						m.Reasoning = true
					}
				}
			}
		}(&ms[i])
	}
	wg.Wait()
	return ms, nil
}

func (d *discoverer) anthropic(ctx context.Context) ([]llm.Model, error) {
	base := strings.TrimSuffix(d.base(DefaultAnthropicBaseURL), "/v1")
	hdr := map[string]string{"anthropic-version": "2023-06-01"}
	if d.key != "" {
		hdr["x-api-key"] = d.key
	}
	var ms []llm.Model
	after := ""
	for page := 0; page < maxPages; page++ {
		u := base + "/v1/models?limit=1000"
		if after != "" {
			u += "&after_id=" + url.QueryEscape(after)
		}
		var out struct {
			Data []struct {
				ID          string `json:"id"`
				DisplayName string `json:"display_name"`
			} `json:"data"`
			HasMore bool   `json:"has_more"`
			LastID  string `json:"last_id"`
		}
		if err := d.do(ctx, http.MethodGet, u, nil, hdr, &out); err != nil {
			return nil, err
		}
		for _, e := range out.Data {
			m := InferCapabilities(e.ID)
			m.Name = e.DisplayName
			ms = append(ms, m)
		}
		if !out.HasMore || out.LastID == "" {
			break
		}
		after = out.LastID
	}
	return ms, nil
}

func (d *discoverer) google(ctx context.Context) ([]llm.Model, error) {
	base := strings.TrimSuffix(d.base(DefaultGoogleBaseURL), "/v1beta")
	hdr := map[string]string{}
	if d.key != "" {
		hdr["x-goog-api-key"] = d.key
	}
	var ms []llm.Model
	token := ""
	for page := 0; page < maxPages; page++ {
		u := base + "/v1beta/models?pageSize=1000"
		if token != "" {
			u += "&pageToken=" + url.QueryEscape(token)
		}
		var out struct {
			Models []struct {
				Name                       string   `json:"name"`
				DisplayName                string   `json:"displayName"`
				InputTokenLimit            int      `json:"inputTokenLimit"`
				OutputTokenLimit           int      `json:"outputTokenLimit"`
				SupportedGenerationMethods []string `json:"supportedGenerationMethods"`
				Thinking                   bool     `json:"thinking"`
			} `json:"models"`
			NextPageToken string `json:"nextPageToken"`
		}
		if err := d.do(ctx, http.MethodGet, u, nil, hdr, &out); err != nil {
			return nil, err
		}
		for _, e := range out.Models {
			gen := false
			for _, g := range e.SupportedGenerationMethods {
				gen = gen || g == "generateContent"
			}
			id := strings.TrimPrefix(e.Name, "models/")
			if !gen || id == "" || strings.Contains(id, "-image") {
				continue
			}
			m := InferCapabilities(id)
			m.Name = e.DisplayName
			m.ContextWindow, m.MaxTokens = e.InputTokenLimit, e.OutputTokenLimit
			m.Reasoning = m.Reasoning || e.Thinking
			ms = append(ms, m)
		}
		if out.NextPageToken == "" {
			break
		}
		token = out.NextPageToken
	}
	return ms, nil
}

func firstPositive(vs ...int) int {
	for _, v := range vs {
		if v > 0 {
			return v
		}
	}
	return 0
}

// visionHints and reasoningHints are lower-case fragments of model ids that imply image input
// and reasoning, for listings that do not say (GET /v1/models returns ids only).
var (
	visionHints = []string{
		"gpt-4o", "gpt-4.1", "gpt-4-turbo", "gpt-5", "o1", "o3", "o4", "claude-3", "claude-opus", "claude-sonnet",
		"claude-haiku", "claude-4", "gemini", "gemma3", "gemma-3", "vision", "-vl", "vl-", "llava", "pixtral",
		"glm-4v", "glm-4.5v", "glm-4.6v", "minicpm-v", "moondream", "qwen2.5vl", "qwen3-vl", "llama4", "grok-4", "kimi-vl",
	}
	reasoningHints = []string{
		"o1", "o3", "o4", "gpt-5", "deepseek-r1", "deepseek-reasoner", "qwq", "qwen3", "thinking", "reasoner",
		"claude-opus-4", "claude-sonnet-4", "claude-3-7", "claude-3.7", "claude-4", "gemini-2.5", "gemini-3", "grok-3-mini", "grok-4",
		"magistral", "glm-4.5", "glm-4.6", "glm-z1", "kimi-k2-thinking",
	}
)

// InferCapabilities returns a Model for id with image input and reasoning guessed from the id
// (for example gpt-4o, claude-*, gemini-*, *-vl*, llava take images; o3, deepseek-r1, qwen3,
// *thinking* reason). Provider capabilities in configuration override the guess (llm.Registry
// applies them).
func InferCapabilities(id string) llm.Model {
	l := strings.ToLower(id)
	base := l
	if i := strings.LastIndexByte(base, '/'); i >= 0 {
		base = base[i+1:]
	}
	m := llm.Model{ID: id, Input: []string{llm.InputText}}
	for _, h := range visionHints {
		if hasFamily(base, h) {
			m.Input = append(m.Input, llm.InputImage)
			break
		}
	}
	for _, h := range reasoningHints {
		if hasFamily(base, h) {
			m.Reasoning = true
			break
		}
	}
	return m
}

// hasFamily reports whether hint occurs in id as a whole word (so "o3" matches "o3-mini" and
// "openai-o3" but not "foo3" or "o3x"); a hint that starts or ends with punctuation ("-vl")
// needs no boundary on that side.
func hasFamily(id, hint string) bool {
	for i := 0; ; {
		j := strings.Index(id[i:], hint)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(hint)
		startOK := j == 0 || !isAlnum(id[j-1]) || !isAlnum(hint[0])
		endOK := end == len(id) || !isAlnum(id[end]) || !isAlnum(hint[len(hint)-1])
		if startOK && endOK {
			return true
		}
		i = j + 1
	}
}

func isAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }

// parseFloat is strconv.ParseFloat without the error, for parameter counts.
func parseFloat(s string) float64 {
	f, _ := strconv.ParseFloat(s, 64)
	return f
}
