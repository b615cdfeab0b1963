package models

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/llm"
)

func TestNewRegistryFromConfig(t *testing.T) {
	cfg, err := config.Parse([]byte(`
ai:
  providers:
    openai:
      api: openai-completions
      apiKey: sk-configured
      models:
        - gpt-4o-mini
        - id: o3
          input: [text, image]
          cost: {input: 2, output: 8, cacheRead: 0.5}
    deepseek:
      api: openai-completions
      baseUrl: https://api.deepseek.com/v1
      compat: {supportsDeveloperRole: false, maxTokensField: max_tokens}
    local:
      api: ollama-chat
      host: http://127.0.0.1:11434
      num_ctx: 8192
      capabilities: {vision: true}
    claude:
      api: anthropic-messages
    gemini:
      api: google-generative-ai
    images:
      driver: cloudflare
`))
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRegistry(cfg.AI.Providers)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.Aliases(), ","); got != "claude,deepseek,gemini,local,openai" {
		t.Fatalf("aliases (drivers are not models): %s", got)
	}
	m, err := r.GetModel("openai", "o3")
	if err != nil || m.Cost.CacheRead != 0.5 || !m.SupportsImages() {
		t.Fatalf("allowlist entry: %+v %v", m, err)
	}
	m, err = r.GetModel("local", "llama3")
	if err != nil || m.BaseURL != "http://127.0.0.1:11434" || m.ContextWindow != 8192 || !m.SupportsImages() {
		t.Fatalf("ollama host/num_ctx/vision: %+v %v", m, err)
	}
	m, _ = r.GetModel("deepseek", "deepseek-chat")
	if m.Compat == nil || m.Compat.MaxTokensField != "max_tokens" {
		t.Fatalf("compat: %+v", m.Compat)
	}

	_, err = NewRegistry(map[string]config.Provider{"x": {API: "openai-completions", Compat: map[string]any{"supportsDevRole": true}}})
	if err == nil || !strings.Contains(err.Error(), "ai.providers.x.compat") || !strings.Contains(err.Error(), "supportsDevRole") {
		t.Fatalf("compat typo: %v", err)
	}
	_, err = NewRegistry(map[string]config.Provider{"noapi": {}})
	if err == nil || !strings.Contains(err.Error(), "ai.providers.noapi.api is required") {
		t.Fatalf("missing api: %v", err)
	}
	if _, err := r.GetModel("images", "x"); !errors.Is(err, llm.ErrUnknownProvider) {
		t.Fatalf("driver: %v", err)
	}

	t.Setenv("OPENAI_API_KEY", "sk-env-openai")
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant")
	t.Setenv("GEMINI_API_KEY", "")
	t.Setenv("GOOGLE_API_KEY", "g-key")
	t.Setenv("DEEPSEEK_API_KEY", "")
	keys := []struct{ alias, want string }{
		{"openai", "sk-configured"},
		{"claude", "sk-ant"},
		{"gemini", "g-key"},
		{"deepseek", ""}, // never the OpenAI key for a third-party base URL
		{"nope", ""},
	}
	for _, tt := range keys {
		if got := r.APIKey(tt.alias); got != tt.want {
			t.Errorf("APIKey(%s) = %q, want %q", tt.alias, got, tt.want)
		}
	}
	t.Setenv("DEEPSEEK_API_KEY", "ds-key")
	if got := r.APIKey("deepseek"); got != "ds-key" {
		t.Errorf("alias env: %q", got)
	}
	t.Setenv("GEMINI_API_KEY", "gem")
	if got := r.APIKey("gemini"); got != "gem" {
		t.Errorf("GEMINI_API_KEY first: %q", got)
	}
}
