package events

import (
	"github.com/agentbus/agentbus/pkg/llm"
)

// SESSION_IN inbox kinds, all published on AgentInSubject(key). The session actor reads the
// subject in stream-sequence order from the session record's cursor.
const (
	TypeUserMessage    = "inbox.user_message"    // a message addressed to the bot: starts (or joins) a turn
	TypeListen         = "inbox.listen"          // a group message not addressed to the bot: context only
	TypeCommand        = "inbox.command"         // /reset, /model, ... parsed by ingest
	TypeSteer          = "inbox.steer"           // inject into the running turn (master-only)
	TypeFollowUp       = "inbox.follow_up"       // queue after the running turn (master-only)
	TypeSubagentResult = "inbox.subagent_result" // a background subagent finished
	TypeScheduled      = "inbox.scheduled"       // a reminder / follow-up fired by a schedule
	TypeAbort          = "inbox.abort"           // stop the running turn
	TypeTaskResult     = "inbox.task_result"     // a deferred task (run_deferred_task) finished
)

// UserMessage is an inbound message that should get an answer (type "inbox.user_message").
type UserMessage struct {
	// Message is the normalized IM message exactly as in IM_IN (sender roles, reply target, media).
	Message IMMessage `json:"message"`
	// Text is the prompt after trigger processing (prefix such as "ai:" or the bot mention
	// stripped); empty means Message.Content.PlainText().
	Text string `json:"text,omitempty"`
	// IMSeq was the IM_IN stream sequence of Message. Since issue 40 ingest stores a message
	// that reaches a session in SESSION_IN only (this event is its one copy on the bus), so
	// it writes no IMSeq; the field is kept for events stored before.
	IMSeq uint64 `json:"imSeq,omitempty"`
}

func (UserMessage) EventType() string { return TypeUserMessage }

// Validate checks the message.
func (u UserMessage) Validate() error { return within("message", u.Message.Validate()) }

// Listen is a group message the bot only listens to (type "inbox.listen"): the actor may add it
// to the context as background, never answers it.
type Listen struct {
	Message IMMessage `json:"message"`
	IMSeq   uint64    `json:"imSeq,omitempty"` // see UserMessage.IMSeq
}

func (Listen) EventType() string { return TypeListen }

// Validate checks the message.
func (l Listen) Validate() error { return within("message", l.Message.Validate()) }

// Command is a chat command for the session (type "inbox.command"), e.g. /reset.
type Command struct {
	// Name without the prefix: "reset", "model", "steer", ...
	Name string `json:"name"`
	// Args are the parsed arguments; Raw is everything after the name, unparsed.
	Args []string `json:"args,omitempty"`
	Raw  string   `json:"raw,omitempty"`
	// Message is the IM message that carried the command (sender roles for permission checks,
	// reply target). Optional for commands issued by operators (agentbus sessions reset ...).
	Message *IMMessage `json:"message,omitempty"`
	// Sender is who issued it when there is no Message (an operator tool).
	Sender *Sender `json:"sender,omitempty"`
}

func (Command) EventType() string { return TypeCommand }

// From returns who issued the command.
func (c Command) From() Sender {
	if c.Message != nil {
		return c.Message.Sender
	}
	if c.Sender != nil {
		return *c.Sender
	}
	return Sender{}
}

// Validate requires a name and either a message or a sender.
func (c Command) Validate() error {
	switch {
	case c.Name == "":
		return required("name")
	case c.Message == nil && c.Sender == nil:
		return badField("message", "or sender is required (who issued the command)")
	}
	if c.Message != nil {
		return within("message", c.Message.Validate())
	}
	return within("sender", c.Sender.Validate())
}

// Steer injects text into the running turn (type "inbox.steer"). Only masters may steer
// (seed Grill #7); the actor checks Sender.Roles and ignores (with a reply) anyone else.
type Steer struct {
	Text   string `json:"text"`
	Sender Sender `json:"sender"`
	// ReplyTo is the platform message id to answer under, if any.
	ReplyTo string `json:"replyTo,omitempty"`
	// Message is the carrying IM message, when there is one.
	Message *IMMessage `json:"message,omitempty"`
}

func (Steer) EventType() string { return TypeSteer }

// Validate requires text and a sender.
func (s Steer) Validate() error { return validateTextFrom(s.Text, s.Sender, s.Message) }

// FollowUp queues text to run after the current turn (type "inbox.follow_up"). Master-only.
type FollowUp struct {
	Text    string     `json:"text"`
	Sender  Sender     `json:"sender"`
	ReplyTo string     `json:"replyTo,omitempty"`
	Message *IMMessage `json:"message,omitempty"`
}

func (FollowUp) EventType() string { return TypeFollowUp }

// Validate requires text and a sender.
func (f FollowUp) Validate() error { return validateTextFrom(f.Text, f.Sender, f.Message) }

func validateTextFrom(text string, s Sender, m *IMMessage) error {
	if text == "" {
		return required("text")
	}
	if err := s.Validate(); err != nil {
		return within("sender", err)
	}
	if m != nil {
		return within("message", m.Validate())
	}
	return nil
}

// SubagentResult returns a background subagent's outcome to its parent session
// (type "inbox.subagent_result").
type SubagentResult struct {
	TaskID string `json:"taskId"`
	// ParentTurn is the turn that spawned the task.
	ParentTurn string `json:"parentTurn,omitempty"`
	// ToolCallID is the parent's tool call that spawned it, if the spawn was a tool call.
	ToolCallID string        `json:"toolCallId,omitempty"`
	Content    []llm.Content `json:"content"`
	IsError    bool          `json:"isError,omitempty"`
	// Usage sums what the subagent spent.
	Usage *llm.Usage `json:"usage,omitempty"`
}

func (SubagentResult) EventType() string { return TypeSubagentResult }

// Validate requires a task id.
func (r SubagentResult) Validate() error {
	if r.TaskID == "" {
		return required("taskId")
	}
	return nil
}

// Scheduled is what a schedule delivers into the inbox when it fires (type "inbox.scheduled").
// The schedule message itself (on ScheduleSubject, in SESSION_IN) carries this event as its
// body; nats-server copies the body to agent.in.<sk> at the scheduled time. A repeating schedule
// delivers the same event id each time: use the stream sequence as the identity of a firing.
type Scheduled struct {
	ScheduleID string `json:"scheduleId"`
	// Text is the reminder / the prompt to run.
	Text string `json:"text"`
	// CreatedBy is who asked for it (permission checks happen again when it fires).
	CreatedBy Sender `json:"createdBy"`
	// ReplyTo is the platform message id to answer under, if any.
	ReplyTo string `json:"replyTo,omitempty"`
	// Schedule is the human-readable schedule ("@at 2026-12-01T09:00:00Z", "@every 1h", cron).
	Schedule string `json:"schedule,omitempty"`
	// Kind is ScheduleFollowUp (default when empty), ScheduleHeartbeat or ScheduleJob.
	Kind string `json:"kind,omitempty"`
}

// Scheduled kinds.
const (
	ScheduleFollowUp  = "followup"  // schedule_followup: a one-off reminder, one pending per session
	ScheduleHeartbeat = "heartbeat" // the HEARTBEAT.md check (ai.scheduler.heartbeat)
	ScheduleJob       = "job"       // a recurring job from ai.scheduler.jobs
)

func (Scheduled) EventType() string { return TypeScheduled }

// Validate requires an id, text and the creator.
func (s Scheduled) Validate() error {
	switch {
	case s.ScheduleID == "":
		return required("scheduleId")
	case s.Text == "":
		return required("text")
	}
	return within("createdBy", s.CreatedBy.Validate())
}

// Abort stops the running turn (type "inbox.abort"): from /stop, from an operator, or from
// the interrupt concurrency policy.
type Abort struct {
	// Turn is the turn to abort; empty = whatever runs.
	Turn   string `json:"turn,omitempty"`
	Reason string `json:"reason,omitempty"`
	Sender Sender `json:"sender"`
	// ReplyTo is the platform message id of the /cancel, answered when nothing was running.
	ReplyTo string `json:"replyTo,omitempty"`
}

func (Abort) EventType() string { return TypeAbort }

// Validate requires a sender.
func (a Abort) Validate() error { return within("sender", a.Sender.Validate()) }

// InboundMessage returns the inbound IM message ev carries, if any: an IM_IN event's message,
// or the message of an inbox event ingest made from one (user_message, listen, and command,
// steer and follow_up when they came from a chat message).
//
// Since issue 40 this is how an inbound message is found on the bus: ingest stores a message
// that reaches a session only inside its inbox events on SESSION_IN (one append instead of
// two), and in IM_IN only a message that reaches no session (ignored, a refused command, a
// /cancel, whose abort event does not carry it). A reader of "every inbound message" (the
// transcript archiver, the last message of a chat) reads both streams through this function.
// One message may cause two inbox events (dispatcher dual mode): both return it, readers
// keep it once by its platform message id. A fork's inputs (platform PlatformFork, copies of
// another session's messages made by the console) are not inbound messages.
func InboundMessage(ev Any) (*IMMessage, bool) {
	var m *IMMessage
	switch e := ev.(type) {
	case *Event[IMMessage]:
		m = &e.Data
	case *Event[UserMessage]:
		m = &e.Data.Message
	case *Event[Listen]:
		m = &e.Data.Message
	case *Event[Command]:
		m = e.Data.Message
	case *Event[Steer]:
		m = e.Data.Message
	case *Event[FollowUp]:
		m = e.Data.Message
	}
	if m == nil || m.Platform == PlatformFork {
		return nil, false
	}
	return m, true
}

// InboxRef points at one inbox event: its SESSION_IN stream sequence and event id.
type InboxRef struct {
	Seq  uint64 `json:"seq"`
	ID   string `json:"id,omitempty"`
	Type string `json:"type,omitempty"`
}

func init() {
	register[UserMessage]()
	register[Listen]()
	register[Command]()
	register[Steer]()
	register[FollowUp]()
	register[SubagentResult]()
	register[Scheduled]()
	register[Abort]()
	register[TaskResult]()
}
