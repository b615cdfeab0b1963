package llm

import "testing"

func TestIsContextOverflow(t *testing.T) {
	errMsg := func(s string) *Message {
		return &Message{Role: RoleAssistant, StopReason: StopReasonError, ErrorMessage: s, Usage: &Usage{}}
	}
	tests := []struct {
		name   string
		msg    *Message
		window int
		want   bool
	}{
		{"openai", errMsg("400 This model's maximum context length is 128000 tokens. However, your messages resulted in 131245 tokens. Please reduce the length of the messages."), 0, true},
		{"openai code", errMsg(`POST "https://api.openai.com/v1/chat/completions": 400 Bad Request {"message":"...","type":"invalid_request_error","code":"context_length_exceeded"}`), 0, true},
		{"openai responses", errMsg("Your input exceeds the context window of this model. Please adjust your input and try again."), 0, true},
		{"anthropic prompt", errMsg(`400 {"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 213462 tokens > 200000 maximum"}}`), 0, true},
		{"anthropic max_tokens", errMsg("input length and `max_tokens` exceed context limit: 197000 + 8192 > 200000, decrease input length or `max_tokens` and try again"), 0, true},
		{"google", errMsg("Error 400, Message: The input token count (1234567) exceeds the maximum number of tokens allowed (1048576)., Status: INVALID_ARGUMENT"), 0, true},
		{"ollama", errMsg("prompt too long; exceeded max context length by 1024 tokens"), 0, true},
		{"ollama embed", errMsg("input length exceeds maximum context length"), 0, true},
		{"llama.cpp", errMsg(`{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}`), 0, true},
		{"vllm", errMsg("This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion."), 0, true},
		{"vllm decoder", errMsg("The decoder prompt (length 5000) is longer than the maximum model length of 4096. Make sure that `max_model_len` is no smaller than the number of text tokens."), 0, true},
		{"litellm", errMsg("litellm.ContextWindowExceededError: litellm.BadRequestError: ContextWindowExceededError: OpenAIException - ..."), 0, true},
		{"lm studio", errMsg("Trying to keep the first 5000 tokens when context the overflows. However, the model is loaded with context length of 4096, which is greater than the context length"), 0, true},
		{"bedrock", errMsg("ValidationException: Input is too long for requested model."), 0, true},
		{"bare 413", errMsg("413 status code (no body)"), 0, true},

		{"rate limit is not overflow", errMsg("429 Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 29000, Requested 5000."), 0, false},
		{"auth error", errMsg("401 Incorrect API key provided"), 0, false},
		{"server error", errMsg("500 Internal Server Error"), 0, false},
		{"empty error", errMsg(""), 0, false},

		{"silent overflow", &Message{StopReason: StopReasonStop, Usage: &Usage{Input: 3000, CacheRead: 1500}}, 4096, true},
		{"silent overflow on tool use", &Message{StopReason: StopReasonToolUse, Usage: &Usage{Input: 5000}}, 4096, true},
		{"fits", &Message{StopReason: StopReasonStop, Usage: &Usage{Input: 4000, Output: 500}}, 4096, false},
		{"no window", &Message{StopReason: StopReasonStop, Usage: &Usage{Input: 999999}}, 0, false},
		{"aborted", &Message{StopReason: StopReasonAborted, ErrorMessage: "prompt is too long", Usage: &Usage{Input: 999999}}, 10, false},
		{"no usage", &Message{StopReason: StopReasonStop}, 10, false},
		{"nil", nil, 10, false},
	}
	for _, tt := range tests {
		if got := IsContextOverflow(tt.msg, tt.window); got != tt.want {
			t.Errorf("%s: IsContextOverflow = %v, want %v", tt.name, got, tt.want)
		}
	}
}
