package llm

import (
	"errors"
	"strings"
	"testing"
)

func ptr[T any](v T) *T { return &v }

func testRegistry(t *testing.T) *Registry {
	t.Helper()
	r, err := NewRegistry(map[string]ProviderSettings{
		"openai": {API: APIOpenAICompletions, APIKey: "sk-configured", Headers: map[string]string{"X-Team": "bots"},
			Models: []ModelSpec{{ID: "gpt-4o-mini"}, {ID: "o3", Name: "OpenAI o3", Reasoning: true, Input: []string{"text", "image"},
				ContextWindow: 200000, MaxTokens: 100000, Cost: ModelCost{Input: 2, Output: 8, CacheRead: 0.5}}}},
		"deepseek": {API: APIOpenAICompletions, BaseURL: "https://api.deepseek.com/v1", ContextWindow: 64000, MaxTokens: 8000,
			Compat: &Compat{SupportsDeveloperRole: ptr(false), MaxTokensField: "max_tokens"}},
		"local":  {API: APIOllamaChat, BaseURL: "http://127.0.0.1:11434", ContextWindow: 8192, Vision: ptr(true)},
		"claude": {API: APIAnthropicMessages},
		"gemini": {API: APIGoogleGenerative},
	}, WithKeyLookup(func(alias string, s ProviderSettings) string {
		if alias == "claude" {
			return "looked-up"
		}
		return ""
	}))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRegistryGetModel(t *testing.T) {
	r := testRegistry(t)
	m, err := r.GetModel("openai", "o3")
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != "o3" || m.Name != "OpenAI o3" || m.API != APIOpenAICompletions || m.Provider != "openai" || !m.Reasoning ||
		!m.SupportsImages() || m.ContextWindow != 200000 || m.MaxTokens != 100000 || m.Cost.Output != 8 || m.Cost.CacheRead != 0.5 ||
		m.Headers["X-Team"] != "bots" {
		t.Fatalf("o3: %+v", m)
	}
	m, err = r.GetModel("openai", "")
	if err != nil || m.ID != "gpt-4o-mini" || m.SupportsImages() || m.Name != "gpt-4o-mini" {
		t.Fatalf("default model: %+v %v", m, err)
	}
	m.Headers["X-Team"] = "mutated"
	if m2, _ := r.GetModel("openai", "gpt-4o-mini"); m2.Headers["X-Team"] != "bots" {
		t.Fatal("GetModel returned shared headers")
	}

	// Without an allowlist any id is accepted and synthesized from the provider config.
	m, err = r.GetModel("deepseek", "deepseek-chat")
	if err != nil {
		t.Fatal(err)
	}
	if m.BaseURL != "https://api.deepseek.com/v1" || m.ContextWindow != 64000 || m.MaxTokens != 8000 ||
		m.Compat == nil || m.Compat.SupportsDeveloperRole == nil || *m.Compat.SupportsDeveloperRole || m.Compat.MaxTokensField != "max_tokens" {
		t.Fatalf("deepseek: %+v %+v", m, m.Compat)
	}
	m, err = r.GetModel("local", "qwen3:8b")
	if err != nil || m.BaseURL != "http://127.0.0.1:11434" || m.ContextWindow != 8192 || !m.SupportsImages() || m.API != APIOllamaChat {
		t.Fatalf("ollama: %+v %v", m, err)
	}
}

func TestRegistryErrors(t *testing.T) {
	r := testRegistry(t)
	_, err := r.GetModel("nope", "x")
	if !errors.Is(err, ErrUnknownProvider) || !strings.Contains(err.Error(), "claude, deepseek, gemini, local, openai") {
		t.Fatalf("unknown alias: %v", err)
	}
	_, err = r.GetModel("openai", "gpt-3")
	if !errors.Is(err, ErrUnknownModel) || !strings.Contains(err.Error(), "allowed: gpt-4o-mini, o3") {
		t.Fatalf("not allowlisted: %v", err)
	}
	if _, err := r.GetModel("images", "x"); !errors.Is(err, ErrUnknownProvider) {
		t.Fatalf("unregistered: %v", err)
	}
	if _, err := r.GetModel("claude", ""); err == nil || !strings.Contains(err.Error(), "no model id") {
		t.Fatalf("no default: %v", err)
	}
	if _, err = ParseCompat(map[string]any{"supportsDevRole": true}); err == nil || !strings.Contains(err.Error(), "supportsDevRole") {
		t.Fatalf("compat typo: %v", err)
	}
	_, err = NewRegistry(map[string]ProviderSettings{"noapi": {}})
	if err == nil || !strings.Contains(err.Error(), "provider noapi: api is required") {
		t.Fatalf("missing api: %v", err)
	}
	if _, err := NewRegistry(nil, WithKeyLookup(nil)); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("nil lookup: %v", err)
	}
	if _, err := (&Registry{providers: map[string]*providerEntry{}}).GetModel("a", "b"); err == nil || !strings.Contains(err.Error(), "no providers are registered") {
		t.Fatalf("empty: %v", err)
	}
}

func TestRegistrySetModels(t *testing.T) {
	r := testRegistry(t)
	if err := r.SetModels("nope", nil); !errors.Is(err, ErrUnknownProvider) {
		t.Fatal(err)
	}
	if err := r.SetModels("local", []Model{
		{ID: "llama3.2", ContextWindow: 131072, Reasoning: false},
		{ID: "qwen3:8b", Reasoning: true, Input: []string{InputText}},
	}); err != nil {
		t.Fatal(err)
	}
	ms, err := r.Models("local")
	if err != nil || len(ms) != 2 || ms[0].ID != "llama3.2" {
		t.Fatalf("%+v %v", ms, err)
	}
	m, _ := r.GetModel("local", "qwen3:8b")
	if !m.Reasoning || m.ContextWindow != 8192 || !m.SupportsImages() || m.Provider != "local" {
		t.Fatalf("discovered + config: %+v", m)
	}
	m, _ = r.GetModel("local", "")
	if m.ID != "llama3.2" {
		t.Fatalf("first discovered: %+v", m)
	}
	// With an allowlist, discovery adds details but cannot widen the list.
	_ = r.SetModels("openai", []Model{{ID: "gpt-4o-mini", ContextWindow: 128000, Cost: ModelCost{Input: 0.15}}, {ID: "gpt-5"}})
	if _, err := r.GetModel("openai", "gpt-5"); !errors.Is(err, ErrUnknownModel) {
		t.Fatal(err)
	}
	m, _ = r.GetModel("openai", "gpt-4o-mini")
	if m.ContextWindow != 128000 || m.Cost.Input != 0.15 {
		t.Fatalf("details: %+v", m)
	}
	if ms, _ := r.Models("openai"); len(ms) != 2 || ms[1].ID != "o3" {
		t.Fatalf("allowlist models: %+v", ms)
	}
}

func TestRegistryAPIKey(t *testing.T) {
	r := testRegistry(t)
	tests := []struct{ alias, want string }{
		{"openai", "sk-configured"}, // configured wins, the lookup is not asked
		{"claude", "looked-up"},
		{"gemini", ""},
		{"nope", ""},
	}
	for _, tt := range tests {
		if got := r.APIKey(tt.alias); got != tt.want {
			t.Errorf("APIKey(%s) = %q, want %q", tt.alias, got, tt.want)
		}
	}
}
