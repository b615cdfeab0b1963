// Package llm is agentbus's model layer, shaped after pi's packages/ai: a Model describes an
// endpoint, a Context is everything the model sees (system prompt, messages, tools), and Stream
// turns the two into an ordered stream of events that always ends in exactly one done or error.
//
// Providers register per API value (openai-completions, anthropic-messages, ...); the vendor is
// configuration. The package knows nothing of NATS, IM platforms or storage, so it can be used
// on its own.
package llm

import (
	"encoding/json"
	"fmt"
)

// API values a provider implementation registers under.
const (
	APIOpenAICompletions = "openai-completions"
	APIOpenAIResponses   = "openai-responses"
	APIAnthropicMessages = "anthropic-messages"
	APIGoogleGenerative  = "google-generative-ai"
	APIOllamaChat        = "ollama-chat"
	APIFaux              = "faux"
)

// Input kinds a model accepts.
const (
	InputText  = "text"
	InputImage = "image"
	// InputAudio and InputVideo: the model takes audio / video parts (ContentAudio,
	// ContentVideo); providers turn those parts into text for a model without them.
	InputAudio = "audio"
	InputVideo = "video"
)

// Model describes one model at one endpoint. It is plain data: providers read it, nothing in it
// holds a connection.
type Model struct {
	ID            string            `json:"id"`
	Name          string            `json:"name,omitempty"`
	API           string            `json:"api"`
	Provider      string            `json:"provider"` // the ai.providers alias
	BaseURL       string            `json:"baseUrl,omitempty"`
	Reasoning     bool              `json:"reasoning,omitempty"`
	Input         []string          `json:"input,omitempty"` // InputText, InputImage
	Cost          ModelCost         `json:"cost"`
	ContextWindow int               `json:"contextWindow,omitempty"`
	MaxTokens     int               `json:"maxTokens,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	Compat        *Compat           `json:"compat,omitempty"`
}

// SupportsImages reports whether the model takes image input.
func (m *Model) SupportsImages() bool {
	for _, in := range m.Input {
		if in == InputImage {
			return true
		}
	}
	return false
}

// Accepts reports whether the model takes input of kind (InputImage, InputAudio, ...).
func (m *Model) Accepts(kind string) bool {
	for _, in := range m.Input {
		if in == kind {
			return true
		}
	}
	return false
}

// ModelCost is the price in US dollars per million tokens.
type ModelCost struct {
	Input      float64 `json:"input"`
	Output     float64 `json:"output"`
	CacheRead  float64 `json:"cacheRead"`
	CacheWrite float64 `json:"cacheWrite"`
}

// Compat switches differences between OpenAI-compatible servers. A nil pointer or zero value
// means "detect from the base URL / use the OpenAI default".
type Compat struct {
	// SupportsDeveloperRole sends the system prompt as role "developer" for reasoning models.
	SupportsDeveloperRole *bool `json:"supportsDeveloperRole,omitempty"`
	// SupportsStore sends store:false.
	SupportsStore *bool `json:"supportsStore,omitempty"`
	// SupportsUsageInStreaming asks for stream_options.include_usage.
	SupportsUsageInStreaming *bool `json:"supportsUsageInStreaming,omitempty"`
	// SupportsReasoningEffort sends reasoning_effort for reasoning models.
	SupportsReasoningEffort *bool `json:"supportsReasoningEffort,omitempty"`
	// MaxTokensField is "max_completion_tokens" (default) or "max_tokens".
	MaxTokensField string `json:"maxTokensField,omitempty"`
	// RequiresToolResultName adds the tool name to tool result messages.
	RequiresToolResultName bool `json:"requiresToolResultName,omitempty"`
	// RequiresAssistantAfterToolResult inserts an assistant message between a tool result and a
	// following user message (some servers reject the sequence otherwise).
	RequiresAssistantAfterToolResult bool `json:"requiresAssistantAfterToolResult,omitempty"`
	// RequiresThinkingAsText replays thinking blocks as plain text.
	RequiresThinkingAsText bool `json:"requiresThinkingAsText,omitempty"`
	// ThinkingFormat is "openai" (reasoning_effort), "zai" or "qwen" (enable_thinking flag).
	ThinkingFormat string `json:"thinkingFormat,omitempty"`
}

// Roles of the messages the model understands. Any other role is a custom message kind that
// ConvertToLLM must filter or translate before a provider sees it.
const (
	RoleUser       = "user"
	RoleAssistant  = "assistant"
	RoleToolResult = "toolResult"
)

// Content block types.
const (
	ContentText     = "text"
	ContentImage    = "image"
	ContentAudio    = "audio" // Data (base64), MimeType (audio/wav, audio/mpeg, ...)
	ContentVideo    = "video" // Data (base64), MimeType (video/mp4, ...)
	ContentThinking = "thinking"
	ContentToolCall = "toolCall"
)

// Content is one content block. Which fields are meaningful depends on Type:
//
//	text:     Text (+ TextSignature)
//	image:    Data (base64), MimeType
//	thinking: Thinking, ThinkingSignature, Redacted (Thinking then holds the opaque payload)
//	toolCall: ID, Name, Arguments (never nil once parsed), ThoughtSignature
//
// It is one flat struct rather than an interface so that a message is cheap to build and copy.
type Content struct {
	Type              string         `json:"type"`
	Text              string         `json:"text,omitempty"`
	TextSignature     string         `json:"textSignature,omitempty"`
	Thinking          string         `json:"thinking,omitempty"`
	ThinkingSignature string         `json:"thinkingSignature,omitempty"`
	Redacted          bool           `json:"redacted,omitempty"`
	Data              string         `json:"data,omitempty"`
	MimeType          string         `json:"mimeType,omitempty"`
	ID                string         `json:"id,omitempty"`
	Name              string         `json:"name,omitempty"`
	Arguments         map[string]any `json:"arguments,omitempty"`
	ThoughtSignature  string         `json:"thoughtSignature,omitempty"`
}

// MarshalJSON writes a toolCall's arguments even when empty, so a reader always finds an object.
func (c Content) MarshalJSON() ([]byte, error) {
	type plain Content
	if c.Type == ContentToolCall && c.Arguments == nil {
		c.Arguments = map[string]any{}
	}
	if c.Type == ContentToolCall && len(c.Arguments) == 0 {
		return json.Marshal(struct {
			plain
			Arguments map[string]any `json:"arguments"`
		}{plain(c), c.Arguments})
	}
	return json.Marshal(plain(c))
}

// Text returns a text block.
func Text(s string) Content { return Content{Type: ContentText, Text: s} }

// Image returns an image block from base64 data.
func Image(base64Data, mimeType string) Content {
	return Content{Type: ContentImage, Data: base64Data, MimeType: mimeType}
}

// Audio is an audio block (base64 data) for a model with InputAudio.
func Audio(base64Data, mimeType string) Content {
	return Content{Type: ContentAudio, Data: base64Data, MimeType: mimeType}
}

// Video is a video block (base64 data) for a model with InputVideo.
func Video(base64Data, mimeType string) Content {
	return Content{Type: ContentVideo, Data: base64Data, MimeType: mimeType}
}

// ToolCall returns a toolCall block.
func ToolCall(id, name string, args map[string]any) Content {
	if args == nil {
		args = map[string]any{}
	}
	return Content{Type: ContentToolCall, ID: id, Name: name, Arguments: args}
}

// StopReason says why an assistant message ended.
type StopReason string

const (
	StopReasonStop    StopReason = "stop"
	StopReasonLength  StopReason = "length"
	StopReasonToolUse StopReason = "toolUse"
	StopReasonError   StopReason = "error"
	StopReasonAborted StopReason = "aborted"
)

// Usage counts tokens and what they cost.
type Usage struct {
	Input       int       `json:"input"`
	Output      int       `json:"output"`
	CacheRead   int       `json:"cacheRead"`
	CacheWrite  int       `json:"cacheWrite"`
	TotalTokens int       `json:"totalTokens"`
	Cost        UsageCost `json:"cost"`
}

// UsageCost is the cost of a Usage in US dollars.
type UsageCost struct {
	Input      float64 `json:"input"`
	Output     float64 `json:"output"`
	CacheRead  float64 `json:"cacheRead"`
	CacheWrite float64 `json:"cacheWrite"`
	Total      float64 `json:"total"`
}

// CalculateCost fills u.Cost from the model's prices and returns it.
func CalculateCost(m *Model, u *Usage) UsageCost {
	u.Cost.Input = m.Cost.Input / 1e6 * float64(u.Input)
	u.Cost.Output = m.Cost.Output / 1e6 * float64(u.Output)
	u.Cost.CacheRead = m.Cost.CacheRead / 1e6 * float64(u.CacheRead)
	u.Cost.CacheWrite = m.Cost.CacheWrite / 1e6 * float64(u.CacheWrite)
	u.Cost.Total = u.Cost.Input + u.Cost.Output + u.Cost.CacheRead + u.Cost.CacheWrite
	return u.Cost
}

// Message is any message of a conversation: user, assistant, toolResult, or a custom kind (any
// other Role) that the agent keeps in its history but the model never sees unless ConvertToLLM
// translates it.
//
// Fields that do not apply to a role are zero. Timestamp is Unix milliseconds.
type Message struct {
	Role      string    `json:"role"`
	Content   []Content `json:"content"`
	Timestamp int64     `json:"timestamp"`

	// assistant
	API          string     `json:"api,omitempty"`
	Provider     string     `json:"provider,omitempty"`
	Model        string     `json:"model,omitempty"`
	ResponseID   string     `json:"responseId,omitempty"`
	Usage        *Usage     `json:"usage,omitempty"`
	StopReason   StopReason `json:"stopReason,omitempty"`
	ErrorMessage string     `json:"errorMessage,omitempty"`

	// toolResult
	ToolCallID string          `json:"toolCallId,omitempty"`
	ToolName   string          `json:"toolName,omitempty"`
	IsError    bool            `json:"isError,omitempty"`
	Details    json.RawMessage `json:"details,omitempty"`

	// custom kinds: free-form payload owned by whoever defined the role.
	Custom json.RawMessage `json:"custom,omitempty"`
}

// IsLLM reports whether the message has a role the model understands.
func (m *Message) IsLLM() bool {
	return m.Role == RoleUser || m.Role == RoleAssistant || m.Role == RoleToolResult
}

// TextContent joins the message's text blocks.
func (m *Message) TextContent() string {
	n := 0
	var only string
	for i := range m.Content {
		if m.Content[i].Type == ContentText {
			n++
			only = m.Content[i].Text
		}
	}
	if n <= 1 {
		return only
	}
	var b []byte
	for i := range m.Content {
		if m.Content[i].Type == ContentText {
			b = append(b, m.Content[i].Text...)
		}
	}
	return string(b)
}

// ToolCalls returns the message's toolCall blocks.
func (m *Message) ToolCalls() []Content {
	var out []Content
	for i := range m.Content {
		if m.Content[i].Type == ContentToolCall {
			out = append(out, m.Content[i])
		}
	}
	return out
}

// Clone returns a deep enough copy that the caller can keep it while the original is mutated
// (a streaming partial message is mutated by its provider until done).
func (m *Message) Clone() Message {
	c := *m
	c.Content = make([]Content, len(m.Content))
	copy(c.Content, m.Content)
	for i := range c.Content {
		if a := c.Content[i].Arguments; a != nil {
			cp := make(map[string]any, len(a))
			for k, v := range a {
				cp[k] = v
			}
			c.Content[i].Arguments = cp
		}
	}
	if m.Usage != nil {
		u := *m.Usage
		c.Usage = &u
	}
	return c
}

// UserText returns a user message with one text block.
func UserText(text string, timestampMs int64) Message {
	return Message{Role: RoleUser, Content: []Content{Text(text)}, Timestamp: timestampMs}
}

// Tool is what the model is told about a tool: its name, what it does, and its parameters as a
// JSON Schema object.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// Context is everything a model sees on one call. It is JSON-serializable so a turn can be
// persisted and replayed.
type Context struct {
	SystemPrompt string    `json:"systemPrompt,omitempty"`
	Messages     []Message `json:"messages"`
	Tools        []Tool    `json:"tools,omitempty"`
}

// ThinkingLevel is the provider-independent reasoning effort of StreamSimple.
type ThinkingLevel string

const (
	ThinkingOff     ThinkingLevel = ""
	ThinkingMinimal ThinkingLevel = "minimal"
	ThinkingLow     ThinkingLevel = "low"
	ThinkingMedium  ThinkingLevel = "medium"
	ThinkingHigh    ThinkingLevel = "high"
	ThinkingXHigh   ThinkingLevel = "xhigh"
)

// ParseThinkingLevel validates a level from configuration.
func ParseThinkingLevel(s string) (ThinkingLevel, error) {
	switch l := ThinkingLevel(s); l {
	case ThinkingOff, ThinkingMinimal, ThinkingLow, ThinkingMedium, ThinkingHigh, ThinkingXHigh:
		return l, nil
	case "off", "none":
		return ThinkingOff, nil
	}
	return "", fmt.Errorf("thinking level %q: want minimal, low, medium, high or xhigh", s)
}

// TextContentOf joins the text blocks of content.
func TextContentOf(cs []Content) string {
	m := Message{Content: cs}
	return m.TextContent()
}
