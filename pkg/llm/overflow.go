package llm

import "strings"

// overflowPatterns are lower-case fragments of the errors servers return when the prompt does
// not fit the model's context window. Each names where it comes from; keep them specific
// enough not to match rate-limit errors ("tokens per min") or output-length limits.
var overflowPatterns = []string{
	"maximum context length",                // OpenAI chat completions, vLLM, DeepSeek, most OpenAI-compatible servers
	"context_length_exceeded",               // OpenAI error code
	"context length exceeded",               // OpenAI-compatible gateways
	"reduce the length of the messages",     // OpenAI
	"exceeds the context window",            // OpenAI Responses
	"prompt is too long",                    // Anthropic
	"exceed context limit",                  // Anthropic: input length and `max_tokens` exceed context limit
	"exceeds the maximum number of tokens",  // Google Gemini
	"exceeds the available context size",    // llama.cpp server
	"exceeds context size",                  // llama.cpp forks
	"exceeded max context length",           // Ollama (truncate: false)
	"exceeds maximum context length",        // Ollama
	"prompt too long",                       // Ollama, llama.cpp forks
	"contextwindowexceedederror",            // LiteLLM
	"longer than the maximum model length",  // vLLM
	"greater than the context length",       // LM Studio
	"input is too long for requested model", // Amazon Bedrock
	"maximum prompt length",                 // xAI
	"context window exceeds limit",          // MiniMax
	"exceeded model token limit",            // Moonshot Kimi
	"too large for model with",              // Groq/Cerebras: "Please reduce ... too large for model with N maximum context length"
}

// IsContextOverflow reports whether msg, an assistant message, shows that the prompt did not fit
// the model's context window, so the caller should compact the history and retry rather than
// report an error:
//
//   - an error message (StopReason error) matching a known overflow error of OpenAI, Anthropic,
//     Google, Ollama, llama.cpp, vLLM, LiteLLM and other OpenAI-compatible servers, or a bare
//     "413 (no body)" status;
//   - a successful message whose usage shows more input than the window holds
//     (Input+CacheRead > contextWindow): servers like Ollama truncate silently instead of
//     failing. contextWindow <= 0 skips this check.
func IsContextOverflow(msg *Message, contextWindow int) bool {
	if msg == nil {
		return false
	}
	if msg.StopReason == StopReasonError {
		return IsContextOverflowError(msg.ErrorMessage)
	}
	if msg.StopReason == StopReasonAborted || contextWindow <= 0 || msg.Usage == nil {
		return false
	}
	return msg.Usage.Input+msg.Usage.CacheRead > contextWindow
}

// IsContextOverflowError reports whether an error text is a context-overflow error.
func IsContextOverflowError(errText string) bool {
	if errText == "" {
		return false
	}
	lower := strings.ToLower(errText)
	for _, p := range overflowPatterns {
		if strings.Contains(lower, p) {
			return true
		}
	}
	// Google: "The input token count (1200000) exceeds the maximum number of tokens allowed".
	if strings.Contains(lower, "input token count") && strings.Contains(lower, "exceed") {
		return true
	}
	// Some servers answer an oversized request with a bare 413.
	if strings.Contains(lower, "413") && strings.Contains(lower, "(no body)") {
		return true
	}
	return false
}
