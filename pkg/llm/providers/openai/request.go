package openai

import (
	"strings"

	"github.com/agentbus/agentbus/pkg/llm"
)

// Reasoning fields servers use for thinking deltas, in the order they are looked for. The field
// a thinking block came from is kept as its ThinkingSignature so it can be replayed in the same
// field (DeepSeek and vLLM want reasoning_content back on tool-call turns).
var reasoningFields = [...]string{"reasoning_content", "reasoning", "reasoning_text"}

func isReasoningField(s string) bool {
	for _, f := range reasoningFields {
		if s == f {
			return true
		}
	}
	return false
}

func emptyUser(blocks []llm.Content) bool {
	for _, b := range blocks {
		if b.Type == llm.ContentImage || b.Type == llm.ContentAudio || b.Type == llm.ContentVideo || (b.Type == llm.ContentText && b.Text != "") {
			return false
		}
	}
	return true
}

func textOf(blocks []llm.Content) string {
	var b strings.Builder
	for _, c := range blocks {
		if c.Type == llm.ContentText {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// audioFormat is the input_audio format of a MIME type: "wav", "mp3", or "" for others.
func audioFormat(mime string) string {
	switch strings.ToLower(strings.TrimSpace(mime)) {
	case "audio/wav", "audio/x-wav", "audio/wave", "audio/vnd.wave", "wav":
		return "wav"
	case "audio/mpeg", "audio/mp3", "audio/mpeg3", "mp3":
		return "mp3"
	}
	return ""
}
