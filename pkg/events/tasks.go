package events

import (
	"encoding/json"
	"unicode/utf8"
)

// TASKS (work queue) and DEAD_LETTERS types.
const (
	TypeSubagentTask = "task.subagent" // task.subagent.<id>
	TypeDeferredTask = "task.deferred" // task.deferred.<id>
	TypeDeadLetter   = "dead_letter"   // dlq.<role>.<reason>
)

// SubagentTask runs a background agent (type "task.subagent"), published on
// TaskSubagentSubject(TaskID) with Nats-Msg-Id = TaskID. When done, the runner publishes an
// inbox.subagent_result into the parent session's inbox.
type SubagentTask struct {
	TaskID string `json:"taskId"`
	// Parent is the session that asked; the result goes to AgentInSubject(Parent).
	Parent     SessionKey `json:"parent"`
	ParentTurn string     `json:"parentTurn,omitempty"`
	ToolCallID string     `json:"toolCallId,omitempty"`
	Prompt     string     `json:"prompt"`
	// Tools the subagent may use (empty = ai.agent.subagentTools).
	Tools         []string `json:"tools,omitempty"`
	Model         string   `json:"model,omitempty"`
	MaxIterations int      `json:"maxIterations,omitempty"`
	// Agent names the *.agent.md preset the task runs with, and SystemPrompt is that preset's
	// body: the subagent's system prompt (seed: "Body 作为 systemPrompt 注入"). Prompt is then
	// the task alone. Empty for a task without a preset.
	Agent        string `json:"agent,omitempty"`
	SystemPrompt string `json:"systemPrompt,omitempty"`
	Caller       Caller `json:"caller"`
	Deadline     int64  `json:"deadline,omitempty"`
}

func (SubagentTask) EventType() string { return TypeSubagentTask }

// MsgID is the task id.
func (t SubagentTask) MsgID() string { return t.TaskID }

// Validate requires id, parent and prompt.
func (t SubagentTask) Validate() error {
	switch {
	case t.TaskID == "":
		return required("taskId")
	case t.Prompt == "":
		return required("prompt")
	}
	return within("parent", t.Parent.validate())
}

// DeferredTask is durable background work of a named kind (type "task.deferred"), e.g. a
// compaction or an archive job, published on TaskDeferredSubject(TaskID) with Nats-Msg-Id =
// TaskID. Kind DeferredKindTool (run_deferred_task) carries a DeferredToolCall as Payload and
// delivers its result into Parent's inbox as an inbox.task_result.
type DeferredTask struct {
	TaskID string `json:"taskId"`
	// Kind selects the handler: "tool", "compact", "archive", ...
	Kind    string          `json:"kind"`
	Session string          `json:"session,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
	// NotBefore delays execution until this Unix ms (the runner NAKs with delay until then).
	NotBefore int64 `json:"notBefore,omitempty"`
	// Parent is the session the result goes to (kind "tool").
	Parent *SessionKey `json:"parent,omitempty"`
	// Caller is who asked; the work runs with their permissions. For kind "tool" the turn
	// worker does not take it from the task: it derives the caller from Turn's records.
	Caller *Caller `json:"caller,omitempty"`
	// Turn and ToolCallID (the bus id) are the call that queued the task (kind "tool"): the
	// turn worker runs the task only if that turn of Parent made that call.
	Turn       string `json:"turn,omitempty"`
	ToolCallID string `json:"toolCallId,omitempty"`
	// Label is a short name shown in /tasks and with the result.
	Label string `json:"label,omitempty"`
	// Deadline (Unix ms) is the time limit; past it the task fails with a clear message.
	Deadline int64 `json:"deadline,omitempty"`
}

// DeferredKindTool is a DeferredTask that runs one tool call (run_deferred_task).
const DeferredKindTool = "tool"

// DeferredToolCall is the payload of a DeferredKindTool task.
type DeferredToolCall struct {
	Tool string         `json:"tool"`
	Args map[string]any `json:"args,omitempty"`
}

func (DeferredTask) EventType() string { return TypeDeferredTask }

// MsgID is the task id.
func (t DeferredTask) MsgID() string { return t.TaskID }

// Validate requires id and kind.
func (t DeferredTask) Validate() error {
	switch {
	case t.TaskID == "":
		return required("taskId")
	case t.Kind == "":
		return required("kind")
	case len(t.Payload) > 0 && !json.Valid(t.Payload):
		return badField("payload", "is not valid JSON")
	case t.Kind == DeferredKindTool && t.Parent == nil:
		return required("parent")
	}
	if t.Parent != nil {
		return within("parent", t.Parent.validate())
	}
	return nil
}

// Roles that dead-letter (the <role> of dlq.<role>.<reason>).
const (
	RoleIngest     = "ingest"
	RoleTurnWorker = "turn-worker"
	RoleToolWorker = "tool-worker"
	RoleEgress     = "egress"
	RoleArchiver   = "archiver"
)

// Dead-letter reasons (the <reason> token).
const (
	DLQInvalid       = "invalid"        // the event failed validation (Error says which field)
	DLQPoison        = "poison"         // processing fails permanently (e.g. platform rejects the message)
	DLQMaxDeliveries = "max_deliveries" // redelivered too often
	DLQUnknownTool   = "unknown_tool"   // nobody serves the tool
	DLQExpired       = "expired"        // past its deadline
)

// DeadLetter records a message a component gave up on (DEAD_LETTERS, type "dead_letter"),
// published on DeadLetterSubject(Role, Reason). Nothing is dropped silently: the original bytes,
// where they came from and why they were rejected are all here.
type DeadLetter struct {
	Role   string `json:"role"`
	Reason string `json:"reason"`
	// Error is the full error text ("im.message event: sender.id is required").
	Error string `json:"error"`
	// Subject, Stream and Seq locate the original message; Deliveries is how often it was tried.
	Subject    string              `json:"subject"`
	Stream     string              `json:"stream,omitempty"`
	Seq        uint64              `json:"seq,omitempty"`
	Deliveries uint64              `json:"deliveries,omitempty"`
	Headers    map[string][]string `json:"headers,omitempty"`
	// JSON holds the original body when it is valid JSON; otherwise Text holds it when it is
	// valid UTF-8, otherwise Bytes (base64).
	JSON  json.RawMessage `json:"json,omitempty"`
	Text  string          `json:"text,omitempty"`
	Bytes []byte          `json:"bytes,omitempty"`
}

func (DeadLetter) EventType() string { return TypeDeadLetter }

// SetBody stores the original body in the most readable field that can hold it exactly.
func (d *DeadLetter) SetBody(b []byte) {
	d.JSON, d.Text, d.Bytes = nil, "", nil
	switch {
	case len(b) == 0:
	case json.Valid(b):
		d.JSON = append(json.RawMessage(nil), b...)
	case utf8.Valid(b):
		d.Text = string(b)
	default:
		d.Bytes = append([]byte(nil), b...)
	}
}

// Body returns the original body.
func (d DeadLetter) Body() []byte {
	switch {
	case len(d.JSON) > 0:
		return d.JSON
	case d.Text != "":
		return []byte(d.Text)
	}
	return d.Bytes
}

// Validate requires role, reason, error and subject.
func (d DeadLetter) Validate() error {
	switch {
	case d.Role == "":
		return required("role")
	case d.Reason == "":
		return required("reason")
	case d.Error == "":
		return required("error")
	case d.Subject == "":
		return required("subject")
	}
	return nil
}

func init() {
	register[SubagentTask]()
	register[DeferredTask]()
	register[DeadLetter]()
}
