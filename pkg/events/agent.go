package events

import (
	"strconv"
	"strings"

	"github.com/agentbus/agentbus/pkg/llm"
)

// AGENT_EVENTS record types, published on AgentEvtSubject(key, kind), kind the part of the type
// after "evt." (the EvtKind* constants); the turn id is in the event and the Agentbus-Turn
// header. Together they let any worker rebuild a turn after a crash (DESIGN.md §5):
//
//	turn_started         input, model, context snapshot: the turn can be re-run from here
//	message_end          every finished message: never repeat an LLM step whose message is here
//	tool_call_requested  the call was put on TOOL_CALLS (same call id on resume)
//	tool_result          the result came back: do not re-request this call
//	outbound_published   part n went to IM_OUT: do not publish it again (msg id dedupes anyway)
//	turn_committed       the turn's messages are in AGENT_CTX: the turn is closed. A turn whose
//	                     turn_started is already stored (every turn that called a tool) writes
//	                     none: its AGENT_CTX commit closes it (store.WithClosing, docs/events.md)
//	turn_failed          the turn ended without commit (error, aborted, lease lost)
const (
	TypeTurnStarted        = "evt.turn_started"
	TypeMessageEnd         = "evt.message_end"
	TypeToolCallRequested  = "evt.tool_call_requested"
	TypeToolResultRecorded = "evt.tool_result"
	TypeOutboundPublished  = "evt.outbound_published"
	TypeTurnCommitted      = "evt.turn_committed"
	TypeTurnFailed         = "evt.turn_failed"
)

// Subject kind tokens of AGENT_EVENTS (the <kind> of agent.evt.<sk>.<turn>.<kind>).
const (
	EvtKindTurnStarted       = "turn_started"
	EvtKindMessageEnd        = "message_end"
	EvtKindToolCallRequested = "tool_call_requested"
	EvtKindToolResult        = "tool_result"
	EvtKindOutboundPublished = "outbound_published"
	EvtKindTurnCommitted     = "turn_committed"
	EvtKindTurnFailed        = "turn_failed"
)

// EvtKind returns the subject kind token of an AGENT_EVENTS type ("evt.message_end" ->
// "message_end"), or "" when typ is not one.
func EvtKind(typ string) string {
	if k, ok := strings.CutPrefix(typ, "evt."); ok {
		return k
	}
	return ""
}

// TurnStarted opens a turn (type "evt.turn_started"). Writing it is what lets the actor advance
// the inbox cursor past the trigger (DESIGN.md §4).
type TurnStarted struct {
	// Turn is the turn id (also Meta.Turn): a NUID, unique across sessions.
	Turn string `json:"turn"`
	// Trigger is the inbox event that started the turn; Merged lists further inbox events
	// folded into it (collect / interrupt policies).
	Trigger InboxRef   `json:"trigger"`
	Merged  []InboxRef `json:"merged,omitempty"`
	// Model is the model the turn runs on ("provider/model id" and its api).
	Model ModelRef `json:"model"`
	// ContextSeq is the AGENT_CTX stream sequence of the last context record the turn's
	// snapshot includes (0 = empty context). Resume loads exactly this snapshot.
	ContextSeq uint64 `json:"contextSeq"`
	// Input are the messages the turn adds before the first LLM call (the user prompt, listened
	// group messages, a subagent result...).
	Input []llm.Message `json:"input"`
	// Worker is the id of the worker that ran it; LeaseRevision is its fencing token.
	Worker        string `json:"worker,omitempty"`
	LeaseRevision uint64 `json:"leaseRevision,omitempty"`
	// Parent is set for a subagent's turn: the task that runs it.
	Parent string `json:"parent,omitempty"`
	// Resumed counts how often the turn was resumed after a crash (0 on the first run).
	Resumed int `json:"resumed,omitempty"`
	// Steps holds the turn's first finished messages (the assistant message that asked for
	// tools, and what came before it in the turn) when they were recorded together with the
	// start: a turn writes its turn_started with its first record instead of before its first
	// LLM call, which saves an append per turn. Readers treat each entry exactly like a
	// message_end record (store.TurnLog expands them into such records).
	Steps []MessageEnd `json:"steps,omitempty"`
}

func (TurnStarted) EventType() string { return TypeTurnStarted }

// Validate requires the turn id, the trigger and the model.
func (t TurnStarted) Validate() error {
	switch {
	case t.Turn == "":
		return required("turn")
	case t.Trigger.Seq == 0:
		return required("trigger.seq")
	case t.Model.ID == "":
		return required("model.id")
	}
	for i, m := range t.Steps {
		if err := m.Validate(); err != nil {
			return within("steps["+strconv.Itoa(i)+"]", err)
		}
	}
	return nil
}

// ModelRef names a model without its whole description.
type ModelRef struct {
	Provider string `json:"provider,omitempty"`
	ID       string `json:"id"`
	API      string `json:"api,omitempty"`
}

// MessageEnd persists one finished message of a turn (type "evt.message_end"): an assistant
// message with its usage and stop reason, a tool result, or an injected steer message.
type MessageEnd struct {
	// Index is the message's position among the turn's messages (0-based, Input first), so
	// resume can tell which LLM steps already happened.
	Index   int         `json:"index"`
	Message llm.Message `json:"message"`
}

func (MessageEnd) EventType() string { return TypeMessageEnd }

// Validate requires a role.
func (m MessageEnd) Validate() error {
	switch {
	case m.Index < 0:
		return badField("index", "must not be negative")
	case m.Message.Role == "":
		return required("message.role")
	}
	return nil
}

// ToolCallRequested records that a call was published to TOOL_CALLS (type
// "evt.tool_call_requested"). Resume re-publishes calls that have no ToolResultRecorded, with
// the same call id (TOOL_CALLS dedupes on it; tool workers check TOOL_RESULTS first).
type ToolCallRequested struct {
	CallID     string         `json:"callId"`
	Tool       string         `json:"tool"`
	Args       map[string]any `json:"args"`
	Idempotent bool           `json:"idempotent,omitempty"`
	// Seq is the TOOL_CALLS stream sequence of the request, if known.
	Seq uint64 `json:"seq,omitempty"`
}

func (ToolCallRequested) EventType() string { return TypeToolCallRequested }

// Validate requires call id and tool.
func (t ToolCallRequested) Validate() error {
	switch {
	case t.CallID == "":
		return required("callId")
	case t.Tool == "":
		return required("tool")
	}
	return nil
}

// ToolResultRecorded records a call's result in the turn log (type "evt.tool_result").
type ToolResultRecorded struct {
	Result ToolResult `json:"result"`
	// Seq is the TOOL_RESULTS stream sequence, if the result came over the bus.
	Seq uint64 `json:"seq,omitempty"`
}

func (ToolResultRecorded) EventType() string { return TypeToolResultRecorded }

// Validate checks the result.
func (t ToolResultRecorded) Validate() error { return within("result", t.Result.Validate()) }

// OutboundPublished records that reply part Part went to IM_OUT (type "evt.outbound_published").
type OutboundPublished struct {
	OutID string `json:"outId"`
	Part  int    `json:"part"`
	// Seq is the IM_OUT stream sequence.
	Seq uint64 `json:"seq,omitempty"`
}

func (OutboundPublished) EventType() string { return TypeOutboundPublished }

// Validate requires the out id.
func (o OutboundPublished) Validate() error {
	if o.OutID == "" {
		return required("outId")
	}
	return nil
}

// TurnCommitted closes a turn (type "evt.turn_committed"): its messages are in AGENT_CTX.
type TurnCommitted struct {
	// FirstSeq and LastSeq are the AGENT_CTX sequences the commit wrote (equal for a
	// one-message commit).
	FirstSeq uint64 `json:"firstSeq"`
	LastSeq  uint64 `json:"lastSeq"`
	// Messages is how many messages were committed.
	Messages int `json:"messages"`
	// Usage sums the turn's assistant messages.
	Usage *llm.Usage `json:"usage,omitempty"`
	// StopReason of the last assistant message.
	StopReason llm.StopReason `json:"stopReason,omitempty"`
	// Tail holds the turn's last messages (the final answer and the tool results before it)
	// that were not recorded as message_end records of their own: writing them with the commit
	// saves appends on the hot path. Readers treat each entry exactly like a message_end record
	// (store.TurnLog expands them into such records). A message that an LLM step must not
	// repeat, an assistant message with tool calls, is always recorded before its calls run.
	Tail []MessageEnd `json:"tail,omitempty"`
	// Started is the turn's start when the turn wrote no record before its commit (a turn that
	// made no tool call): one append for the whole turn. Readers treat it exactly like a
	// turn_started record before the tail (store.TurnLog expands it into one).
	Started *TurnStarted `json:"started,omitempty"`
}

func (TurnCommitted) EventType() string { return TypeTurnCommitted }

// Validate checks the sequence range and the tail's messages.
func (t TurnCommitted) Validate() error {
	if t.LastSeq < t.FirstSeq {
		return badField("lastSeq", "%d is before firstSeq %d", t.LastSeq, t.FirstSeq)
	}
	if t.Started != nil {
		if err := t.Started.Validate(); err != nil {
			return within("started", err)
		}
	}
	for i, m := range t.Tail {
		if err := m.Validate(); err != nil {
			return within("tail["+strconv.Itoa(i)+"]", err)
		}
	}
	return nil
}

// Reasons a turn failed.
const (
	FailError     = "error"      // the model or the loop failed
	FailAborted   = "aborted"    // an abort / interrupt stopped it
	FailTimeout   = "timeout"    // ai.agent.timeout elapsed
	FailLeaseLost = "lease_lost" // the worker lost the session lease; the new owner resumes
	FailFenced    = "fenced"     // the context commit was rejected as stale
)

// TurnFailed ends a turn without a commit (type "evt.turn_failed").
type TurnFailed struct {
	Reason string `json:"reason"` // Fail* constants
	Error  string `json:"error,omitempty"`
	// Retryable says whether another worker should resume the turn (lease_lost: yes).
	Retryable bool `json:"retryable,omitempty"`
}

func (TurnFailed) EventType() string { return TypeTurnFailed }

// Validate requires a reason.
func (t TurnFailed) Validate() error {
	if t.Reason == "" {
		return required("reason")
	}
	return nil
}

// AGENT_CTX record types, published on AgentCtxSubject(sessionID). Commits are fenced on the
// subject's last sequence (Nats-Expected-Last-Subject-Sequence), so a stale writer cannot
// append; a turn's messages are one atomic batch or one CtxMessages record.
const (
	TypeCtxMessages = "ctx.messages"
	TypeCtxSummary  = "ctx.summary"
	TypeCtxLeaf     = "ctx.leaf"
)

// CtxMessages appends messages to a session's context (type "ctx.messages"), the seed's
// agent_messages rows.
type CtxMessages struct {
	Messages []llm.Message `json:"messages"`
}

func (CtxMessages) EventType() string { return TypeCtxMessages }

// Validate requires at least one message, each with a role.
func (c CtxMessages) Validate() error {
	if len(c.Messages) == 0 {
		return badField("messages", "must have at least one message")
	}
	for i := range c.Messages {
		if c.Messages[i].Role == "" {
			return required("messages[" + itoa(int64(i)) + "].role")
		}
	}
	return nil
}

// CtxSummary records a compaction summary (type "ctx.summary"), the seed's agent_summaries:
// LoadContext = latest summary + the messages after its anchor.
type CtxSummary struct {
	Summary string `json:"summary"`
	// AnchorSeq is the AGENT_CTX sequence of the last message the summary covers.
	AnchorSeq uint64 `json:"anchorSeq"`
	// Covered counts the messages the summary replaces.
	Covered int `json:"covered,omitempty"`
	// Model that wrote the summary.
	Model string `json:"model,omitempty"`
	// Count numbers the compactions of this session id (1 = the first).
	Count int `json:"count,omitempty"`
}

func (CtxSummary) EventType() string { return TypeCtxSummary }

// Validate requires the summary text and its anchor.
func (c CtxSummary) Validate() error {
	switch {
	case c.Summary == "":
		return required("summary")
	case c.AnchorSeq == 0:
		return required("anchorSeq")
	}
	return nil
}

// CtxLeaf moves the active leaf of the session's message tree (type "ctx.leaf", the seed's
// /tree N and active_leaf_message_id): from this record on, the context continues after the
// record LeafSeq, and the records after LeafSeq that came before this one are a branch left
// behind (kept in the log, no longer loaded). BranchSummary, when set, summarizes that branch
// (the seed's branch summarization) and is loaded in its place, anchored to this record.
type CtxLeaf struct {
	// LeafSeq is the AGENT_CTX sequence of the record the conversation continues from.
	LeafSeq uint64 `json:"leafSeq"`
	// BranchFrom and BranchTo are the first and last records of the branch left behind.
	BranchFrom uint64 `json:"branchFrom,omitempty"`
	BranchTo   uint64 `json:"branchTo,omitempty"`
	// BranchSummary summarizes the branch left behind ("" = none).
	BranchSummary string `json:"branchSummary,omitempty"`
	// Model that wrote the branch summary.
	Model string `json:"model,omitempty"`
	// Messages, when the leaf returns to a branch left earlier, are that branch's messages
	// from LeafSeq (where it forks off) to the point returned to, copied in order: they are
	// loaded after the summary, as if committed by this record.
	Messages []llm.Message `json:"messages,omitempty"`
}

func (CtxLeaf) EventType() string { return TypeCtxLeaf }

// Validate requires the leaf.
func (c CtxLeaf) Validate() error {
	if c.LeafSeq == 0 {
		return required("leafSeq")
	}
	return nil
}

// TypeLiveDelta is published on core NATS agent.live.<sk> (not stored).
const TypeLiveDelta = "live.delta"

// LiveDelta is a streaming preview fragment (type "live.delta"). Losing one is harmless: the
// authoritative message arrives as evt.message_end and im.out.
type LiveDelta struct {
	// Kind is the llm stream event type: text_delta, thinking_delta, toolcall_delta, ...
	Kind         string `json:"kind"`
	ContentIndex int    `json:"contentIndex"`
	Delta        string `json:"delta,omitempty"`
	// Seq orders the deltas of one turn (a receiver drops out-of-order ones).
	Seq uint64 `json:"seq"`
	// Message is the index of the message within the turn (a turn with tool calls has several
	// assistant messages).
	Message int `json:"message,omitempty"`
}

func (LiveDelta) EventType() string { return TypeLiveDelta }

// Validate requires a kind.
func (l LiveDelta) Validate() error {
	if l.Kind == "" {
		return required("kind")
	}
	return nil
}

func init() {
	register[TurnStarted]()
	register[MessageEnd]()
	register[ToolCallRequested]()
	register[ToolResultRecorded]()
	register[OutboundPublished]()
	register[TurnCommitted]()
	register[TurnFailed]()
	register[CtxMessages]()
	register[CtxSummary]()
	register[CtxLeaf]()
	register[LiveDelta]()
}
