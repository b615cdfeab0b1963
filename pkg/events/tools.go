package events

import (
	"encoding/json"
	"time"

	"github.com/agentbus/agentbus/pkg/llm"
)

// Tool traffic types.
const (
	TypeToolCall   = "tool.call"   // TOOL_CALLS   tool.call.<tool>
	TypeToolResult = "tool.result" // TOOL_RESULTS tool.result.<sk>, call id in HeaderCallID
)

// Caller is who a tool call acts for: the gating inputs a tool worker checks against the tool's
// registry entry (platforms, scopes, roles) before it executes anything.
type Caller struct {
	Platform string   `json:"platform"`
	Bot      string   `json:"bot,omitempty"`
	Scope    string   `json:"scope"`
	SenderID string   `json:"senderId,omitempty"`
	Roles    []string `json:"roles,omitempty"`
}

// ToolCall asks a tool worker to run one call (TOOL_CALLS, type "tool.call"), published on
// ToolCallSubject(Tool) with Nats-Msg-Id = CallID. The result goes to
// ToolResultSubject(SessionKey, CallID). Meta.Session and Meta.Turn carry the correlation.
type ToolCall struct {
	CallID string         `json:"callId"`
	Tool   string         `json:"tool"`
	Args   map[string]any `json:"args"`
	// SessionKey is the session to answer (the <sk> of the result subject).
	SessionKey SessionKey `json:"sessionKey"`
	Turn       string     `json:"turn,omitempty"`
	Caller     Caller     `json:"caller"`
	// Deadline is when the caller stops waiting, Unix ms (0 = the worker's default timeout).
	// A worker that picks the call up after the deadline answers with an error result.
	Deadline int64 `json:"deadline,omitempty"`
	// Idempotent (from the registry) says a redelivered call may run again; a non-idempotent
	// call that may have started before a crash is answered with an error instead.
	Idempotent bool `json:"idempotent,omitempty"`
	// Fresh is the caller's promise that this call id was never requested before (a turn that
	// was not taken over from a crashed owner). A tool worker then skips looking for a stored
	// result on the first delivery. Leave it false when unsure: the lookup keeps each call id
	// run at most once either way.
	Fresh bool `json:"fresh,omitempty"`
	// Model is the model serving the turn, "provider/model id" (empty from older callers).
	// Tools that adapt to the model read it; activate_skill sizes skill instructions by it.
	Model string `json:"model,omitempty"`
	// ModelSize is the turn worker's resolved size of Model (small | medium | large, from
	// ai.agent.modelHarness, modelSizeHint or the id) and SkillChars its resolved
	// skillInstructionMaxChars; empty / 0 lets the tool worker infer them from Model.
	ModelSize  string `json:"modelSize,omitempty"`
	SkillChars int    `json:"skillChars,omitempty"`
	// Step is the turn log's record of the step the call belongs to, when the turn did not
	// write it to AGENT_EVENTS (issue 40): a JSON array of the evt.* events (a turn_started
	// with steps, or message_end records) the turn would have appended there. The tool worker
	// copies it into the call's ToolResult, so the step is stored at every moment: in the
	// queued request until the result is stored, then in the result. Empty for calls whose
	// step is in AGENT_EVENTS (and for background tasks, subagents, pre-executed tools).
	Step json.RawMessage `json:"step,omitempty"`
}

func (ToolCall) EventType() string { return TypeToolCall }

// MsgID is the dedupe id (the call id).
func (c ToolCall) MsgID() string { return c.CallID }

// Expired reports whether the deadline has passed at now.
func (c ToolCall) Expired(now time.Time) bool { return c.Deadline > 0 && now.UnixMilli() > c.Deadline }

// Validate checks everything the worker and the gate need.
func (c ToolCall) Validate() error {
	switch {
	case c.CallID == "":
		return required("callId")
	case c.Tool == "":
		return required("tool")
	case c.Deadline < 0:
		return badField("deadline", "must not be negative")
	}
	if err := c.SessionKey.validate(); err != nil {
		return within("sessionKey", err)
	}
	switch {
	case c.Caller.Platform == "":
		return required("caller.platform")
	case c.Caller.Scope == "":
		return required("caller.scope")
	case !ValidScope(c.Caller.Scope):
		return badField("caller.scope", "%q must be private, group or channel", c.Caller.Scope)
	}
	return nil
}

// ToolResult is a call's outcome (TOOL_RESULTS, type "tool.result"), published on
// ToolResultSubject(key) with Nats-Msg-Id = "result/" + CallID and HeaderCallID = CallID. It becomes the
// toolResult message the model sees.
type ToolResult struct {
	CallID  string        `json:"callId"`
	Tool    string        `json:"tool"`
	Content []llm.Content `json:"content"`
	IsError bool          `json:"isError,omitempty"`
	// Details is tool-specific structured output for UIs and logs (not sent to the model).
	Details json.RawMessage `json:"details,omitempty"`
	// Worker that ran it and how long it took.
	Worker     string `json:"worker,omitempty"`
	DurationMs int64  `json:"durationMs,omitempty"`
	// Step is the request's ToolCall.Step, copied unchanged (see there).
	Step json.RawMessage `json:"step,omitempty"`
}

func (ToolResult) EventType() string { return TypeToolResult }

// MsgID is the dedupe id: "result/<callId>".
func (r ToolResult) MsgID() string { return "result/" + r.CallID }

// Message converts the result to the llm toolResult message.
func (r ToolResult) Message(ts int64) llm.Message {
	return llm.Message{Role: llm.RoleToolResult, Content: r.Content, Timestamp: ts,
		ToolCallID: r.CallID, ToolName: r.Tool, IsError: r.IsError, Details: r.Details}
}

// Validate requires call id and tool.
func (r ToolResult) Validate() error {
	switch {
	case r.CallID == "":
		return required("callId")
	case r.Tool == "":
		return required("tool")
	}
	for i, c := range r.Content {
		if c.Type == "" {
			return required("content[" + itoa(int64(i)) + "].type")
		}
	}
	return nil
}

// ToolEntry is a tool's record in KV "tools" (key = EncodeToken(Name)); not an event. Tool
// workers put it on start and refresh it before the bucket TTL drops it, so a tool whose
// workers are all gone disappears from the registry.
type ToolEntry struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Parameters is the JSON Schema of the arguments.
	Parameters json.RawMessage `json:"parameters"`
	// Platforms, Scopes and Roles gate who may call it; empty = no restriction.
	Platforms []string `json:"platforms,omitempty"`
	Scopes    []string `json:"scopes,omitempty"`
	Roles     []string `json:"roles,omitempty"`
	// Idempotent says a retried call is safe.
	Idempotent bool `json:"idempotent,omitempty"`
	// PreExecutable tools run (without arguments) before a turn; their output goes into the
	// system prompt.
	PreExecutable bool `json:"preExecutable,omitempty"`
	// TimeoutMs is the tool's own execution limit (0 = the worker default).
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
	// Workers lists the worker ids serving it; UpdatedAt is when the entry was last refreshed (Unix ms).
	Workers   []string `json:"workers,omitempty"`
	UpdatedAt int64    `json:"updatedAt"`
	// Source says where it comes from: builtin, mcp:<server>, file:<path>, ...
	Source string `json:"source,omitempty"`
	// Keywords rank the tool in the two-level selection against the user's message (any
	// language; matched as substrings, so Chinese keywords need no word boundaries).
	Keywords []string `json:"keywords,omitempty"`
	// StepWorkers lists the workers of Workers that copy a call's step into its result
	// (ToolCall.Step, issue 40): a turn carries a step on its requests only when every
	// worker serving the tool is listed here. A worker of an earlier version rewrites the
	// entry without it, which turns the carrying off for the tool.
	StepWorkers []string `json:"stepWorkers,omitempty"`
}

// Validate checks the entry (the error wraps ErrInvalid).
func (t ToolEntry) Validate() error {
	var err error
	switch {
	case t.Name == "":
		err = required("name")
	case len(t.Parameters) == 0:
		err = required("parameters")
	case !json.Valid(t.Parameters):
		err = badField("parameters", "is not valid JSON")
	}
	if err != nil {
		return &InvalidError{What: "tool entry", Reason: err.Error()}
	}
	return nil
}

// MarshalToolEntry validates and encodes a registry entry.
func MarshalToolEntry(t ToolEntry) ([]byte, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(t)
}

// UnmarshalToolEntry decodes and validates a registry entry.
func UnmarshalToolEntry(data []byte) (ToolEntry, error) {
	var t ToolEntry
	if err := json.Unmarshal(data, &t); err != nil {
		return ToolEntry{}, &InvalidError{What: "tool entry", Reason: "malformed JSON: " + err.Error(), Err: err}
	}
	return t, t.Validate()
}

func init() {
	register[ToolCall]()
	register[ToolResult]()
}
