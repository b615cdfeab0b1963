package loop

import (
	"context"
	"encoding/json"
	"iter"

	"github.com/agentbus/agentbus/pkg/llm"
)

// EventType names an agent loop event.
type EventType string

const (
	EventAgentStart          EventType = "agent_start"
	EventAgentEnd            EventType = "agent_end"
	EventTurnStart           EventType = "turn_start"
	EventTurnEnd             EventType = "turn_end"
	EventMessageStart        EventType = "message_start"
	EventMessageUpdate       EventType = "message_update"
	EventMessageEnd          EventType = "message_end"
	EventToolExecutionStart  EventType = "tool_execution_start"
	EventToolExecutionUpdate EventType = "tool_execution_update"
	EventToolExecutionEnd    EventType = "tool_execution_end"
)

// Event is one step of an agent run. Which fields are set depends on Type:
//
//	agent_start, turn_start:  nothing
//	agent_end:                Messages (every message the run added, prompts included)
//	turn_end:                 Message (the assistant message), ToolResults (its toolResult messages)
//	message_start/_end:       Message
//	message_update:           Message (the streaming partial) and Update (the provider event)
//	tool_execution_start:     ToolCallID, ToolName, Args (the arguments as the model sent them)
//	tool_execution_update:    ToolCallID, ToolName, Args, Result (the partial result)
//	tool_execution_end:       ToolCallID, ToolName, Result, IsError
//
// Events are passed by value and share memory with the run: Message, Messages, ToolResults and
// Args must be treated as read-only. For an assistant message, message_start and message_update
// carry the provider's live partial message, which the provider keeps mutating after the callback
// returns: Clone it to keep it. message_end always carries the final, immutable message.
type Event struct {
	Type        EventType
	Message     *llm.Message
	Update      llm.Event
	ToolResults []llm.Message
	Messages    []llm.Message
	ToolCallID  string
	ToolName    string
	Args        map[string]any
	Result      ToolResult
	IsError     bool
}

// ToolResult is what a tool returns: content for the model, details for people and programs
// (never sent to the model), and whether it is an error.
type ToolResult struct {
	Content []llm.Content   `json:"content"`
	Details json.RawMessage `json:"details,omitempty"`
	IsError bool            `json:"isError,omitempty"`
}

// TextResult is a ToolResult with one text block.
func TextResult(text string) ToolResult {
	return ToolResult{Content: []llm.Content{llm.Text(text)}}
}

// ErrorResult is an isError ToolResult with one text block.
func ErrorResult(text string) ToolResult {
	return ToolResult{Content: []llm.Content{llm.Text(text)}, IsError: true}
}

// ExecuteFunc runs one tool call in process. args are already validated against the tool's
// schema. onUpdate (never nil) reports partial results as tool_execution_update events; it may
// be called from any goroutine until ExecuteFunc returns, later calls are dropped. Execute should
// return promptly once ctx is done. Returning an error, or a result with IsError, gives the model
// an isError toolResult; a panic is recovered and reported the same way.
type ExecuteFunc func(ctx context.Context, callID string, args map[string]any, onUpdate func(partial ToolResult)) (ToolResult, error)

// AgentTool is a tool the loop can run: what the model is told (llm.Tool) plus how to run it.
type AgentTool struct {
	llm.Tool
	// Label is a human-readable name for UIs.
	Label string
	// Execute runs the tool in process. A tool run by another ToolExecutor (over NATS, say) may
	// leave it nil.
	Execute ExecuteFunc
	// Sequential forces the whole batch this tool's call is part of to run one call at a time
	// (for tools that must not run next to others, like an interactive shell).
	Sequential bool
}

// ToolExecutionMode says how the calls of one assistant message are executed.
type ToolExecutionMode string

const (
	// Parallel runs the calls of one assistant message concurrently. tool_execution_end events
	// come in completion order; the toolResult messages come in the order of the calls.
	Parallel ToolExecutionMode = "parallel"
	// Sequential runs them one at a time, polling steering messages after each: when one arrives
	// the remaining calls are skipped with an isError result.
	Sequential ToolExecutionMode = "sequential"
)

// BeforeToolCallInfo is what BeforeToolCall sees. It must not be modified.
type BeforeToolCallInfo struct {
	AssistantMessage *llm.Message
	ToolCall         *llm.Content
	Args             map[string]any // validated arguments
	Context          *AgentContext  // Messages holds the history up to and including AssistantMessage
}

// BlockResult blocks a tool call. Reason becomes the text of the isError toolResult.
type BlockResult struct {
	Reason string
}

// AfterToolCallInfo is what AfterToolCall sees. It must not be modified.
type AfterToolCallInfo struct {
	AssistantMessage *llm.Message
	ToolCall         *llm.Content
	Args             map[string]any
	Result           ToolResult
	IsError          bool
	Context          *AgentContext
}

// ToolResultOverride replaces fields of a tool result; nil fields keep the original.
type ToolResultOverride struct {
	Content []llm.Content
	Details json.RawMessage
	IsError *bool
}

// StreamFunc streams one assistant message. llm.Stream is the default; tests and benchmarks
// inject their own.
type StreamFunc func(ctx context.Context, model *llm.Model, c *llm.Context, opts *llm.StreamOptions) iter.Seq[llm.Event]

// AgentContext is the conversation a run starts from. Run never modifies it (nor the backing
// array of Messages); the messages a run adds are returned and reported in events.
type AgentContext struct {
	SystemPrompt string
	Messages     []llm.Message
	Tools        []AgentTool
}

// Config configures a run. Only Model is required; every hook is optional.
//
// Hooks are called on the goroutine that called Run, except ToolExecutor.Execute, onUpdate and
// AfterToolCall, which run on a tool goroutine for parallel batches of more than one call.
type Config struct {
	Model *llm.Model
	// StreamOptions are passed to every LLM call (APIKey is replaced by GetAPIKey when that
	// returns a non-empty key).
	StreamOptions llm.StreamOptions
	// StreamFn defaults to llm.Stream.
	StreamFn StreamFunc

	// ConvertToLLM turns the agent's messages (custom kinds included) into the messages the
	// model sees. Default: keep user, assistant and toolResult messages, drop every other role.
	ConvertToLLM func(msgs []llm.Message) []llm.Message
	// TransformContext rewrites the messages before each LLM call (pruning, compaction, injected
	// context). It runs before ConvertToLLM and its result is used for that call only: it is not
	// persisted into the run's context. An error fails the step like a provider error.
	TransformContext func(ctx context.Context, msgs []llm.Message) ([]llm.Message, error)
	// GetAPIKey resolves the key per call (tokens that expire). Empty means StreamOptions.APIKey.
	GetAPIKey func(provider string) string

	// GetSteeringMessages is polled at the start of a run, after every tool batch (and, in
	// sequential mode, after every tool call). What it returns is injected before the next LLM
	// call.
	GetSteeringMessages func() []llm.Message
	// GetFollowUpMessages is polled when the run would end (no tool calls, no steering). What
	// it returns starts another turn.
	GetFollowUpMessages func() []llm.Message

	// BeforeToolCall runs after argument validation and before execution. A non-nil
	// BlockResult or an error turns the call into an isError toolResult.
	BeforeToolCall func(ctx context.Context, info BeforeToolCallInfo) (*BlockResult, error)
	// AfterToolCall may replace the content, details or error flag of a result.
	AfterToolCall func(ctx context.Context, info AfterToolCallInfo) *ToolResultOverride

	// StopAfterTools is called with the toolResult messages of each tool batch. True ends the
	// run after that batch without another LLM call, as when the model answered without tool
	// calls: steering already queued still runs, follow-ups are still polled. For tools whose
	// result is for the user, not the model (ask_user: the question goes to the chat and the
	// answer arrives as the next message).
	StopAfterTools func(results []llm.Message) bool

	// ToolExecution is Parallel (default) or Sequential.
	ToolExecution ToolExecutionMode
	// Executor runs validated tool calls. Default: InProcess (AgentTool.Execute).
	Executor ToolExecutor
	// MaxIterations caps the number of LLM calls in one run (0 = no cap). When the cap is hit
	// and the model asked for tools, the run ends after that turn's tool results (no further LLM
	// call, agent_end as usual) and Run returns ErrMaxIterations with the messages. Queued
	// steering and follow-up messages are not polled once the cap is reached.
	MaxIterations int
}
