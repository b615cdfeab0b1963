package events

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/llm"
)

// TaskResult is what a deferred task delivers into its session's inbox when it ends (type
// "inbox.task_result", published on AgentInSubject(parent) with Nats-Msg-Id "task-result-" +
// TaskID). The session actor posts Content to the chat as a message of its own (out ids
// "task-<id>-<part>", so a redelivered result is not sent twice) and adds it to the context;
// no model call is made.
type TaskResult struct {
	TaskID string `json:"taskId"`
	// Kind is the task kind ("tool" for run_deferred_task).
	Kind  string `json:"kind,omitempty"`
	Label string `json:"label,omitempty"`
	// Content is the result; for a failure, the message for the chat.
	Content []llm.Content `json:"content"`
	IsError bool          `json:"isError,omitempty"`
}

func (TaskResult) EventType() string { return TypeTaskResult }

// Validate requires a task id.
func (r TaskResult) Validate() error {
	if r.TaskID == "" {
		return required("taskId")
	}
	return nil
}

// BucketTasks is KV tasks: one record per background task (deferred tool runs, subagents,
// reminders), key TaskKey(session, id). It is what /tasks lists besides the pending schedules.
const BucketTasks = "tasks"

// DefaultTasksTTL is how long a task record is kept (recent tasks in /tasks).
const DefaultTasksTTL = 7 * 24 * time.Hour

// Task states.
const (
	TaskPending   = "pending"
	TaskRunning   = "running"
	TaskDone      = "done"
	TaskFailed    = "failed"
	TaskCancelled = "cancelled"
)

// TaskRecord is the value of KV tasks.
type TaskRecord struct {
	ID string `json:"id"`
	// Kind: "deferred", "subagent", "followup", "job", "heartbeat".
	Kind    string     `json:"kind"`
	Session SessionKey `json:"session"`
	Label   string     `json:"label,omitempty"`
	State   string     `json:"state"`
	// Owner is the sender id who created the task (may cancel it next to the masters).
	Owner     string `json:"owner,omitempty"`
	CreatedAt int64  `json:"createdAt"`
	UpdatedAt int64  `json:"updatedAt"`
	// Attempts counts the runs that started (a crash makes it more than one).
	Attempts int    `json:"attempts,omitempty"`
	Error    string `json:"error,omitempty"`
	// Worker is the replica that runs (or ran) it.
	Worker string `json:"worker,omitempty"`
	// DueAt (Unix ms) is when a reminder fires.
	DueAt int64 `json:"dueAt,omitempty"`
}

// Terminal reports whether the task has ended.
func (r TaskRecord) Terminal() bool {
	return r.State == TaskDone || r.State == TaskFailed || r.State == TaskCancelled
}

// TaskKey is the KV tasks key of task id in session k: <sk>.<id>, so that one session's tasks
// are listed with the filter <sk>.>.
func TaskKey(k SessionKey, id string) string { return k.Token() + "." + EncodeToken(id) }

// MarshalTaskRecord encodes a record.
func MarshalTaskRecord(r TaskRecord) ([]byte, error) {
	if r.ID == "" || r.State == "" {
		return nil, fmt.Errorf("%w: task record: id and state are required", ErrInvalid)
	}
	return json.Marshal(r)
}

// UnmarshalTaskRecord decodes a record.
func UnmarshalTaskRecord(b []byte) (TaskRecord, error) {
	var r TaskRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%w: task record: %v", ErrInvalid, err)
	}
	return r, nil
}

// ScheduleID returns the schedule id of kind with an optional name: "followup",
// "heartbeat", "job-<name>".
func ScheduleID(kind, name string) string {
	if name == "" {
		return kind
	}
	return kind + "-" + name
}

// ScheduleKindOf is the kind of a schedule id made by ScheduleID.
func ScheduleKindOf(id string) string {
	kind, _, _ := strings.Cut(id, "-")
	return kind
}
