package models

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/llm"
)

func TestScore(t *testing.T) {
	tests := []struct {
		id   string
		want int
	}{
		{"claude-opus-4-1", 96},
		{"gpt-5", 95},
		{"gpt-5-mini", 86},
		{"claude-sonnet-4-6", 93},
		{"cu/claude-4.6-sonnet", 93},
		{"claude-sonnet-4-5-20250929", 92},
		{"o3", 91},
		{"claude-3-5-sonnet-20241022", 88}, // the date's 4 is not a version
		{"claude-3-7-sonnet-20250219", 90},
		{"claude-sonnet-4-20250514", 92},
		{"gemini-2.5-pro", 90},
		{"openai/o3-mini", 87},
		{"gpt-4o", 88},
		{"gpt-4o-mini", 75},
		{"gemini-1.5-pro", 88},
		{"deepseek-r1", 85},
		{"qwen-max-latest", 85},
		{"kimi-k2", 82},
		{"grok-3", 80},
		{"glm-4-plus", 78},
		{"qwen3:14b", 83},
		{"qwen3:8b", 60},        // small: capped by SmallScore
		{"llama3.2:3b", 46},     // 40 + (3-1)/7*20, rounded
		{"qwen2.5:0.5b", 40},    // ≤ 1B
		{"some-model:8b", 60},   // small without a family rule
		{"mystery-model", 65},   // unknown, medium
		{"GPT-4O", 88},          // case-insensitive
		{"deepseek-r1:70b", 85}, // large parameter count keeps the family score
	}
	for _, tt := range tests {
		if got := Score(tt.id); got != tt.want {
			t.Errorf("Score(%q) = %d, want %d", tt.id, got, tt.want)
		}
	}
}

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		pat, s string
		want   bool
	}{
		{"*", "", true},
		{"open*", "openai", true},
		{"open*", "xopenai", false},
		{"*claude*sonnet*4?6*", "claude-sonnet-4-6", true},
		{"*claude*sonnet*4?6*", "claude-sonnet-4-5", false},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false},
	}
	for _, tt := range tests {
		if got := globMatch(tt.pat, tt.s); got != tt.want {
			t.Errorf("globMatch(%q, %q) = %v", tt.pat, tt.s, got)
		}
	}
}

// testRegistry has an allowlisted provider with a vision model, a discovered one, a provider
// with nothing known and an image driver.
func testRegistry(t *testing.T) (config.AI, *llm.Registry) {
	t.Helper()
	cfg, err := config.Parse([]byte(`
ai:
  providers:
    openai-main:
      api: openai-completions
      apiKey: sk-x
      models:
        - gpt-4o-mini
        - id: gpt-4o
          input: [text, image]
        - o3
    local:
      api: ollama-chat
      host: http://127.0.0.1:11434
    empty:
      api: openai-completions
      baseUrl: http://127.0.0.1:9/v1
    draw:
      driver: zhipu
  agents:
    zhin:
      provider: local
    vision:
      provider: openai-main
      model: gpt-4o
      priority: 100
      match: {hasMedia: [image]}
    lowvision:
      provider: local
      priority: 5
      match: {hasMedia: [image]}
`))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := NewRegistry(cfg.AI.Providers)
	if err != nil {
		t.Fatal(err)
	}
	disc := []llm.Model{InferCapabilities("llama3.2:3b"), InferCapabilities("qwen3:14b"), InferCapabilities("llava:7b")}
	if err := reg.SetModels("local", disc); err != nil {
		t.Fatal(err)
	}
	return cfg.AI, reg
}

func TestSelectModels(t *testing.T) {
	_, reg := testRegistry(t)
	tests := []struct {
		provider string
		kind     Kind
		n        int
		want     []string
		wantErr  error
	}{
		{"openai-main", KindChat, 0, []string{"o3", "gpt-4o", "gpt-4o-mini"}, nil},
		{"openai-main", KindChat, 2, []string{"o3", "gpt-4o"}, nil},
		{"openai-main", KindVision, 0, []string{"gpt-4o"}, nil}, // allowlist entries without input are text-only
		{"local", KindChat, 0, []string{"qwen3:14b", "llava:7b", "llama3.2:3b"}, nil},
		{"local", KindVision, 0, []string{"llava:7b"}, nil},
		{"empty", KindChat, 0, []string{}, nil},
		{"nope", KindChat, 0, nil, llm.ErrUnknownProvider},
	}
	for _, tt := range tests {
		got, err := SelectModels(reg, tt.provider, tt.kind, tt.n)
		if !errors.Is(err, tt.wantErr) {
			t.Fatalf("%s/%s: err %v, want %v", tt.provider, tt.kind, err, tt.wantErr)
		}
		if err == nil && !slices.Equal(ids(got), tt.want) {
			t.Errorf("%s/%s/%d = %v, want %v", tt.provider, tt.kind, tt.n, ids(got), tt.want)
		}
	}
	if _, err := SelectModel(reg, "empty", KindChat); !errors.Is(err, ErrNoCandidate) {
		t.Errorf("empty provider: %v, want ErrNoCandidate", err)
	}
	m, err := SelectModel(reg, "local", KindVision)
	if err != nil || m.ID != "llava:7b" || m.Provider != "local" || m.API != llm.APIOllamaChat {
		t.Errorf("SelectModel vision = %+v, %v", m, err)
	}
}

func TestRoute(t *testing.T) {
	ai, reg := testRegistry(t)
	noZhin := ai
	noZhin.Agents = map[string]config.AgentBinding{"main": {Provider: "openai-main", Model: "gpt-4o-mini"}}
	none := ai
	none.Agents = nil
	badModel := ai
	badModel.Agents = map[string]config.AgentBinding{"zhin": {Provider: "openai-main", Model: "gpt-3"}}
	tests := []struct {
		name    string
		ai      config.AI
		media   []string
		binding string
		model   string
		errIs   error
	}{
		{"text turn uses zhin, tier-selected", ai, nil, "zhin", "local/qwen3:14b", nil},
		{"image turn uses highest priority vision binding", ai, []string{"image"}, "vision", "openai-main/gpt-4o", nil},
		{"audio matches no binding", ai, []string{"audio"}, "zhin", "local/qwen3:14b", nil},
		{"no zhin: binding without match", noZhin, nil, "main", "openai-main/gpt-4o-mini", nil},
		{"no bindings: best overall", none, nil, "zhin", "openai-main/o3", nil},
		{"no bindings, image: best vision", none, []string{"image"}, "zhin", "openai-main/gpt-4o", nil},
		{"model outside allowlist", badModel, nil, "zhin", "", llm.ErrUnknownModel},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name, m, err := Route(tt.ai, reg, tt.media)
			if !errors.Is(err, tt.errIs) {
				t.Fatalf("err = %v, want %v", err, tt.errIs)
			}
			if name != tt.binding {
				t.Errorf("binding = %q, want %q", name, tt.binding)
			}
			if err == nil && modelRef(m) != tt.model {
				t.Errorf("model = %s, want %s", modelRef(m), tt.model)
			}
		})
	}
	if k := MediaKinds([]llm.Message{llm.UserText("x", 1), {Role: llm.RoleUser, Content: []llm.Content{llm.Image("aGk=", "image/png")}}}); !slices.Equal(k, []string{"image"}) {
		t.Errorf("MediaKinds = %v", k)
	}
	if k := MediaKinds([]llm.Message{llm.UserText("x", 1)}); k != nil {
		t.Errorf("MediaKinds(text) = %v", k)
	}
	// A vision binding without a model picks its provider's vision model.
	low := ai
	low.Agents = map[string]config.AgentBinding{"zhin": {Provider: "openai-main", Model: "o3"}, "v": {Provider: "local", Match: config.AgentMatch{HasMedia: []string{"image"}}}}
	if _, m, err := Route(low, reg, []string{"image"}); err != nil || m.ID != "llava:7b" {
		t.Errorf("vision binding without model = %v, %v", m, err)
	}
}

func TestReport(t *testing.T) {
	ai, reg := testRegistry(t)
	status := []ProviderStatus{{Alias: "empty", Source: SourceNone, Err: "model discovery failed: connection refused"}}
	out := Report(ai, reg, nil, status)
	for _, want := range []string{
		"- openai-main (openai-completions, allowlist):",
		"    o3  tier 91",
		"    gpt-4o  tier 88 (vision)",
		"- local (ollama-chat, discovered):",
		"    llava:7b  tier 57 (vision)",
		"- empty (openai-completions, none; last discovery failed: model discovery failed: connection refused): no models known yet",
		"- draw: image generation (zhipu)",
		"- zhin → local/qwen3:14b (tier-selected)",
		"- vision → openai-main/gpt-4o [media: image, priority 100]",
		"- lowvision → local/llava:7b (tier-selected) [media: image, priority 5]",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	// o3 is listed before gpt-4o (tier order).
	if strings.Index(out, "o3  tier") > strings.Index(out, "gpt-4o  tier") {
		t.Errorf("not in tier order:\n%s", out)
	}
}
