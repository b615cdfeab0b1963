package openai

import (
	"net/url"
	"strings"

	"github.com/agentbus/agentbus/pkg/llm"
)

// Thinking formats of Compat.ThinkingFormat.
const (
	ThinkingFormatOpenAI = "openai" // reasoning_effort
	ThinkingFormatZAI    = "zai"    // thinking: {type: enabled|disabled} (Zhipu / Z.ai)
	ThinkingFormatQwen   = "qwen"   // enable_thinking: bool (+ thinking_budget) (DashScope / Qwen)
)

// Max-tokens fields of Compat.MaxTokensField.
const (
	FieldMaxCompletionTokens = "max_completion_tokens"
	FieldMaxTokens           = "max_tokens"
)

// compat is llm.Compat with every switch decided: explicit settings win, the rest is detected
// from the base URL's host.
type compat struct {
	developerRole            bool
	store                    bool
	usageInStreaming         bool
	reasoningEffort          bool
	maxTokensField           string
	toolResultName           bool
	assistantAfterToolResult bool
	thinkingAsText           bool
	thinkingFormat           string
	promptCacheKey           bool
}

// detectCompat returns the defaults for a base URL. OpenAI itself gets the OpenAI behaviour;
// every other server gets the most widely accepted shape (role "system", "max_tokens", no
// "store"), because self-hosted servers (vLLM, llama.cpp, ...) and the Chinese vendors reject or
// ignore OpenAI-only fields in different ways.
func detectCompat(baseURL string) compat {
	c := compat{usageInStreaming: true, reasoningEffort: true, maxTokensField: FieldMaxTokens, thinkingFormat: ThinkingFormatOpenAI}
	host := ""
	if baseURL == "" {
		host = "api.openai.com"
	} else if u, err := url.Parse(baseURL); err == nil {
		host = strings.ToLower(u.Hostname())
	}
	switch {
	case host == "api.openai.com" || strings.HasSuffix(host, ".openai.azure.com"):
		c.developerRole, c.store, c.promptCacheKey = true, true, true
		c.maxTokensField = FieldMaxCompletionTokens
	case host == "api.deepseek.com":
		// DeepSeek reasons when the model is deepseek-reasoner; it takes no effort parameter.
		c.reasoningEffort = false
	case host == "open.bigmodel.cn" || host == "api.z.ai":
		c.thinkingFormat = ThinkingFormatZAI
	case strings.HasPrefix(host, "dashscope"): // dashscope.aliyuncs.com, dashscope-intl.aliyuncs.com
		c.thinkingFormat = ThinkingFormatQwen
	case strings.HasPrefix(host, "api.moonshot."):
		c.reasoningEffort = false
	}
	return c
}

func resolveCompat(m *llm.Model) compat {
	c := detectCompat(m.BaseURL)
	x := m.Compat
	if x == nil {
		return c
	}
	set := func(dst *bool, v *bool) {
		if v != nil {
			*dst = *v
		}
	}
	set(&c.developerRole, x.SupportsDeveloperRole)
	set(&c.store, x.SupportsStore)
	set(&c.usageInStreaming, x.SupportsUsageInStreaming)
	set(&c.reasoningEffort, x.SupportsReasoningEffort)
	if x.MaxTokensField != "" {
		c.maxTokensField = x.MaxTokensField
	}
	c.toolResultName = c.toolResultName || x.RequiresToolResultName
	c.assistantAfterToolResult = c.assistantAfterToolResult || x.RequiresAssistantAfterToolResult
	c.thinkingAsText = c.thinkingAsText || x.RequiresThinkingAsText
	if x.ThinkingFormat != "" {
		c.thinkingFormat = x.ThinkingFormat
	}
	return c
}
