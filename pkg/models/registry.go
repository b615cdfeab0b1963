package models

import (
	"fmt"
	"maps"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/llm"
)

// NewRegistry builds the model registry from ai.providers. Image-generation drivers (a provider
// with `driver` and no `api`) are not models and are left out. It fails on a provider without
// an api or driver and on a compat block that does not parse, naming the YAML path. Keys the
// configuration leaves empty are looked up in the environment (EnvKey).
func NewRegistry(providers map[string]config.Provider) (*llm.Registry, error) {
	settings := make(map[string]llm.ProviderSettings, len(providers))
	var errs []string
	for _, alias := range slices.Sorted(maps.Keys(providers)) {
		p := providers[alias]
		if p.API == "" && p.Driver != "" {
			continue
		}
		s, err := Settings(alias, p)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		settings[alias] = s
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("model registry: %s", strings.Join(errs, "; "))
	}
	return llm.NewRegistry(settings, llm.WithKeyLookup(EnvKey))
}

// Settings maps one ai.providers entry onto the registry's settings: ollama's host and num_ctx
// become its base URL and context window, capabilities.vision/thinking override the models.
func Settings(alias string, p config.Provider) (llm.ProviderSettings, error) {
	if p.API == "" {
		return llm.ProviderSettings{}, fmt.Errorf("ai.providers.%s.api is required", alias)
	}
	s := llm.ProviderSettings{
		API: p.API, BaseURL: p.BaseURL, APIKey: p.APIKey, Headers: p.Headers,
		ContextWindow: p.ContextWindow, MaxTokens: p.MaxTokens,
		Vision: p.Capabilities.Vision, Thinking: p.Capabilities.Thinking,
	}
	if s.BaseURL == "" {
		s.BaseURL = p.Host
	}
	if p.API == llm.APIOllamaChat && s.ContextWindow == 0 {
		s.ContextWindow = p.NumCtx
	}
	if len(p.Compat) > 0 {
		c, err := llm.ParseCompat(p.Compat)
		if err != nil {
			return llm.ProviderSettings{}, fmt.Errorf("ai.providers.%s.compat: %w", alias, err)
		}
		s.Compat = c
	}
	for _, m := range p.Models {
		s.Models = append(s.Models, llm.ModelSpec{
			ID: m.ID, Name: m.Name, Reasoning: m.Reasoning, Input: m.Input,
			ContextWindow: m.ContextWindow, MaxTokens: m.MaxTokens,
			Cost: llm.ModelCost{Input: m.Cost.Input, Output: m.Cost.Output, CacheRead: m.Cost.CacheRead, CacheWrite: m.Cost.CacheWrite},
		})
	}
	return s, nil
}

// EnvKey is the key lookup agentbus gives the registry for a provider whose configuration has
// no apiKey: the environment variable <ALIAS>_API_KEY (alias upper-cased, other characters as
// "_"); else the variable conventional for the api (OPENAI_API_KEY, ANTHROPIC_API_KEY,
// GEMINI_API_KEY or GOOGLE_API_KEY, OLLAMA_API_KEY) — the last only when the provider talks to
// that vendor's own endpoint (no base URL, or the vendor's host), so an OpenAI key is never sent
// to a third-party server.
func EnvKey(alias string, s llm.ProviderSettings) string {
	if v := os.Getenv(aliasEnvVar(alias)); v != "" {
		return v
	}
	vars, host := vendorKeyEnv(s.API)
	if s.BaseURL != "" {
		u, err := url.Parse(s.BaseURL)
		if err != nil || host == "" || !strings.EqualFold(u.Hostname(), host) {
			return ""
		}
	}
	for _, v := range vars {
		if k := os.Getenv(v); k != "" {
			return k
		}
	}
	return ""
}

// aliasVars memoizes aliasEnvVar: EnvKey runs on every model call (GetAPIKey), and the
// aliases are the handful in ai.providers. The variable's value is still read every time.
var aliasVars sync.Map // alias -> variable name

func aliasEnvVar(alias string) string {
	if v, ok := aliasVars.Load(alias); ok {
		return v.(string)
	}
	v := makeAliasEnvVar(alias)
	aliasVars.Store(alias, v)
	return v
}

func makeAliasEnvVar(alias string) string {
	b := []byte(strings.ToUpper(alias))
	for i, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	return string(b) + "_API_KEY"
}

// vendorKeyEnv returns the conventional key variables of an api and the vendor host they
// belong to.
func vendorKeyEnv(api string) ([]string, string) {
	switch api {
	case llm.APIOpenAICompletions, llm.APIOpenAIResponses:
		return []string{"OPENAI_API_KEY"}, "api.openai.com"
	case llm.APIAnthropicMessages:
		return []string{"ANTHROPIC_API_KEY"}, "api.anthropic.com"
	case llm.APIGoogleGenerative:
		return []string{"GEMINI_API_KEY", "GOOGLE_API_KEY"}, "generativelanguage.googleapis.com"
	case llm.APIOllamaChat:
		return []string{"OLLAMA_API_KEY"}, "ollama.com"
	}
	return nil, ""
}
