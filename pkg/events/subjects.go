package events

import (
	"strconv"
	"strings"
)

// Subjects (DESIGN.md §3). Every variable token is passed through EncodeToken, so ids and names
// may hold any bytes; <sk> is SessionKey.Token(). Builders never fail; parsers return an error
// wrapping ErrInvalid for anything a builder could not have produced.
//
//	im.in.<platform>.<bot>.<scope>.<scene>     IM_IN        normalized inbound message
//	agent.in.<sk>                              SESSION_IN   per-session inbox
//	schedule.<sk>.<id>                         SESSION_IN   schedule holder, fires into agent.in.<sk>
//	agent.evt.<sk>.<turn>.<kind>               AGENT_EVENTS turn event log
//	agent.ctx.<sk>.<epoch>                     AGENT_CTX    committed context log of one session id
//	tool.call.<tool>                           TOOL_CALLS   tool call requests (work queue)
//	tool.result.<sk>                           TOOL_RESULTS tool results (call id in Agentbus-Call-Id)
//	im.out.<platform>.<bot>.<scope>.<scene>    IM_OUT       outbound replies
//	im.sent.<platform>.<bot>.<scope>.<scene>   IM_SENT      delivery receipts
//	im.sent.batch.<bucket>                     IM_SENT      receipts of several parts (im.sent.batch)
//	task.subagent.<id> / task.deferred.<id>    TASKS        background work (work queue)
//	dlq.<role>.<reason>                        DEAD_LETTERS poison messages with the reason
//	agent.live.<sk>                            core NATS    live token deltas, not persisted
//	agent.wake.<worker>                        core NATS    doorbell: "an event of a session you own is in its inbox"
//	tool.attempt.<instance>                    core NATS    "are you still running call X?" to one tool-worker process
const (
	PrefixIMIn        = "im.in"
	PrefixAgentIn     = "agent.in"
	PrefixSchedule    = "schedule"
	PrefixAgentEvt    = "agent.evt"
	PrefixAgentCtx    = "agent.ctx"
	PrefixToolCall    = "tool.call"
	PrefixToolResult  = "tool.result"
	PrefixIMOut       = "im.out"
	PrefixIMSent      = "im.sent"
	PrefixTask        = "task"
	PrefixDeadLetter  = "dlq"
	PrefixAgentLive   = "agent.live"
	PrefixAgentWake   = "agent.wake"
	PrefixToolAttempt = "tool.attempt"
	TaskKindSubagent  = "subagent"
	TaskKindDeferred  = "deferred"
	wildcardAllTokens = ">"
)

// ---- builders ----

// sceneSubject builds prefix.<platform>.<bot>.<scope>.<scene>.
func sceneSubject(prefix string, k SessionKey) string {
	return prefix + "." + EncodeToken(k.Platform) + "." + EncodeToken(k.Bot) + "." +
		EncodeToken(k.Scope) + "." + EncodeToken(k.Scene)
}

// IMInSubject is im.in.<platform>.<bot>.<scope>.<scene>.
func IMInSubject(k SessionKey) string { return sceneSubject(PrefixIMIn, k) }

// IMOutSubject is im.out.<platform>.<bot>.<scope>.<scene>.
func IMOutSubject(k SessionKey) string { return sceneSubject(PrefixIMOut, k) }

// IMSentSubject is im.sent.<platform>.<bot>.<scope>.<scene>: the subject of every receipt of
// the chat, the out id in HeaderOutID (issue 41: subjects grow with chats, not parts).
func IMSentSubject(k SessionKey) string { return sceneSubject(PrefixIMSent, k) }

// IMSentPartSubject is im.sent.<platform>.<bot>.<scope>.<scene>.<out>, <out> the token of the
// out id: the subject receipts had before issue 41, one per delivered part. Nothing publishes on
// it any more; IM_SENT keeps such receipts until they age out, and store.FindReceipt still
// reads them.
func IMSentPartSubject(k SessionKey, outID string) string {
	return sceneSubject(PrefixIMSent, k) + "." + EncodeToken(outID)
}

// IMSentBatchSubject is im.sent.batch.<bucket>: the subject of every ReceiptBatch of receipt
// bucket bucket (ReceiptBucket). It has fewer tokens than any chat's subject, so the two never
// meet.
func IMSentBatchSubject(bucket uint64) string {
	return PrefixIMSent + ".batch." + strconv.FormatUint(bucket, 10)
}

// IsIMSentBatchSubject says whether subj is an IMSentBatchSubject.
func IsIMSentBatchSubject(subj string) bool {
	rest, ok := strings.CutPrefix(subj, PrefixIMSent+".batch.")
	if !ok || rest == "" {
		return false
	}
	for _, c := range rest {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// AgentInSubject is agent.in.<sk>, the session's inbox.
func AgentInSubject(k SessionKey) string { return k.subject(PrefixAgentIn) }

// ScheduleSubject is schedule.<sk>.<id>: the subject that holds schedule id of session k (one
// message per schedule, replaced on update). It lives in SESSION_IN; see SessionInStream.
func ScheduleSubject(k SessionKey, id string) string {
	return k.subject(PrefixSchedule, EncodeToken(id))
}

// AgentEvtSubject is agent.evt.<sk>.<kind>; kind is an EvtKind* constant. The turn id is in
// the event (Meta.Turn) and its HeaderTurn, not in the subject: a session has one subject per
// kind, whatever the number of its turns, so the server's subject index grows with sessions,
// not with turns (issue 41). Readers of one turn scan the session's events from the turn's
// first sequence and keep those of the turn (store.TurnLog.ReadTurn).
func AgentEvtSubject(k SessionKey, kind string) string {
	return k.subject(PrefixAgentEvt, EncodeToken(kind))
}

// AgentEvtKindFilter matches the events of one kind of every session: agent.evt.*.<kind>.
// Events stored by versions before issue 41 match AgentEvtLegacyKindFilter instead.
func AgentEvtKindFilter(kind string) string {
	return PrefixAgentEvt + ".*." + EncodeToken(kind)
}

// AgentEvtTurnSubject is agent.evt.<sk>.<turn>.<kind>: the subject turn events had before
// issue 41 (one subject per turn and kind). Nothing publishes on it any more; AGENT_EVENTS
// keeps such events until they age out (EventsMaxAge), and every reader reads both layouts.
func AgentEvtTurnSubject(k SessionKey, turn, kind string) string {
	return k.subject(PrefixAgentEvt, EncodeToken(turn), EncodeToken(kind))
}

// AgentEvtTurnFilter matches every event of one turn in the layout before issue 41:
// agent.evt.<sk>.<turn>.*
func AgentEvtTurnFilter(k SessionKey, turn string) string {
	return k.subject(PrefixAgentEvt, EncodeToken(turn), "*")
}

// AgentEvtLegacyKindFilter matches the events of one kind stored in the layout before issue
// 41: agent.evt.*.*.<kind>.
func AgentEvtLegacyKindFilter(kind string) string {
	return PrefixAgentEvt + ".*.*." + EncodeToken(kind)
}

// AgentEvtSessionFilter matches every turn event of a session: agent.evt.<sk>.>
func AgentEvtSessionFilter(k SessionKey) string {
	return k.subject(PrefixAgentEvt, ">")
}

// AgentCtxSubject is agent.ctx.<sk>.<epoch>: the context log of one session id. Commits fence
// on this subject's last sequence.
func AgentCtxSubject(id SessionID) string {
	return id.Key.subject(PrefixAgentCtx, strconv.FormatUint(id.Epoch, 10))
}

// ToolCallSubject is tool.call.<tool>.
func ToolCallSubject(tool string) string { return PrefixToolCall + "." + EncodeToken(tool) }

// ToolResultSubject is tool.result.<sk>: every tool result of a session. The call id is in
// the result (ToolResult.CallID), its HeaderCallID and its Nats-Msg-Id, not in the subject: a
// session has one result subject whatever the number of its calls, so the server's subject
// index grows with sessions, not with calls (issue 41). "Has call X a result?" is a search of
// the session's results stored since the call was requested (store.FindToolResult).
func ToolResultSubject(k SessionKey) string {
	return k.subject(PrefixToolResult)
}

// ToolResultCallSubject is tool.result.<sk>.<callId>: the subject tool results had before
// issue 41 (one subject per call). Nothing publishes on it any more; TOOL_RESULTS keeps such
// results until they age out (ToolResultsMaxAge), and every reader reads both layouts.
func ToolResultCallSubject(k SessionKey, callID string) string {
	return k.subject(PrefixToolResult, EncodeToken(callID))
}

// ToolResultSessionFilter matches every tool result of a session in the current layout; it is
// ToolResultSubject. ToolResultLegacySessionFilter matches those of the layout before issue
// 41.
func ToolResultSessionFilter(k SessionKey) string { return ToolResultSubject(k) }

// ToolResultLegacySessionFilter matches a session's results stored before issue 41:
// tool.result.<sk>.*
func ToolResultLegacySessionFilter(k SessionKey) string {
	return k.subject(PrefixToolResult, "*")
}

// TaskSubject is task.<kind>.<id> with kind TaskKindSubagent or TaskKindDeferred.
func TaskSubject(kind, id string) string {
	return PrefixTask + "." + EncodeToken(kind) + "." + EncodeToken(id)
}

// TaskSubagentSubject is task.subagent.<id>.
func TaskSubagentSubject(id string) string { return TaskSubject(TaskKindSubagent, id) }

// TaskDeferredSubject is task.deferred.<id>.
func TaskDeferredSubject(id string) string { return TaskSubject(TaskKindDeferred, id) }

// AgentWakeSubject is agent.wake.<worker> (core NATS, not stored): the doorbell of one
// turn-worker replica. A replica that got an inbox delivery for a session another replica owns
// rings the owner's bell (WakeBody, or AppendWake lines for several) instead of making the
// delivery wait; the owner reads the session's inbox from its cursor. A ring may hand the
// delivery over: its HeaderWakeAck (or the line's ack) names the delivery's ack subject, and
// the owner holds the delivery from then on (in-progress acks, and the ack once its cursor has
// passed it), so the ringer forgets it. A ring's reply subject, when it is the ringer's own
// doorbell, is where the owner sends word of the sessions it did not run; a request is
// answered. A lost ring costs only speed: the delivery was never acked and comes back to
// JetStream. An empty request is a liveness probe: "no responders" means the process is gone.
func AgentWakeSubject(worker string) string { return PrefixAgentWake + "." + EncodeToken(worker) }

// WakeBody is the doorbell's payload: the session key token and the inbox sequence that waits.
func WakeBody(k SessionKey, seq uint64) []byte {
	return []byte(k.Token() + " " + strconv.FormatUint(seq, 10))
}

// ParseWakeBody reverses WakeBody.
func ParseWakeBody(b []byte) (SessionKey, uint64, error) {
	tok, num, ok := strings.Cut(string(b), " ")
	if !ok {
		return SessionKey{}, 0, &InvalidError{What: "wake body", Reason: "want \"<sk> <seq>\", got " + strconv.Quote(string(b))}
	}
	seq, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return SessionKey{}, 0, &InvalidError{What: "wake body", Reason: "bad sequence in " + strconv.Quote(string(b)), Err: err}
	}
	k, err := ParseSessionKeyToken(tok)
	if err != nil {
		return SessionKey{}, 0, err
	}
	return k, seq, nil
}

// WakeEntry is one delivery a doorbell ring (AgentWakeSubject) tells the owner of: the session,
// the inbox sequence that waits, and the ack subject of the delivery the ring hands over (""
// hands over nothing, the owner only learns that seq is in the log).
type WakeEntry struct {
	Session SessionKey
	Seq     uint64
	Ack     string
}

// AppendWake appends e to the body of a ring that hands over several deliveries at once, as one
// line "<sk token> <seq> <ack>\n". A ringer batches the deliveries for one owner that came
// while its previous ring to that owner was on its way; a ring of one delivery keeps the
// WakeBody form with the ack in HeaderWakeAck. The owner's answer to a batch lists, one token
// per line, the sessions it did not run (it claims them now); an empty answer says it ran all.
func AppendWake(b []byte, e WakeEntry) []byte {
	b = append(b, e.Session.Token()...)
	b = append(b, ' ')
	b = strconv.AppendUint(b, e.Seq, 10)
	b = append(b, ' ')
	b = append(b, e.Ack...)
	return append(b, '\n')
}

// ParseWake reverses AppendWake, one entry per line; a body without a newline is the WakeBody
// form of one entry, whose ack (HeaderWakeAck) the caller supplies.
func ParseWake(body []byte, ack string) ([]WakeEntry, error) {
	s := string(body)
	if !strings.Contains(s, "\n") {
		k, seq, err := ParseWakeBody(body)
		if err != nil {
			return nil, err
		}
		return []WakeEntry{{Session: k, Seq: seq, Ack: ack}}, nil
	}
	out := make([]WakeEntry, 0, strings.Count(s, "\n"))
	for line := range strings.SplitSeq(strings.TrimSuffix(s, "\n"), "\n") {
		rest, ack, ok := cutLast(line)
		if !ok {
			return nil, &InvalidError{What: "wake body", Reason: "want \"<sk> <seq> <ack>\" lines, got " + strconv.Quote(line)}
		}
		k, seq, err := ParseWakeBody([]byte(rest))
		if err != nil {
			return nil, err
		}
		out = append(out, WakeEntry{Session: k, Seq: seq, Ack: ack})
	}
	return out, nil
}

// cutLast splits line at its last space.
func cutLast(line string) (before, after string, ok bool) {
	i := strings.LastIndexByte(line, ' ')
	if i < 0 {
		return line, "", false
	}
	return line[:i], line[i+1:], true
}

// ToolAttemptSubject is tool.attempt.<instance> (core NATS, not stored): the probe of one
// tool-worker process, named by the instance token its non-idempotent calls' started markers
// carry. The request body is a call id; the process answers ToolAttemptRunning while it still
// handles that call and ToolAttemptIdle otherwise. "No responders" means the process is gone
// (a killed process's connection closes with it), so a later attempt of the call can answer it
// at once instead of waiting for the earlier attempt's timeout.
func ToolAttemptSubject(instance string) string {
	return PrefixToolAttempt + "." + EncodeToken(instance)
}

// Answers to a ToolAttemptSubject probe.
const (
	ToolAttemptRunning = "running"
	ToolAttemptIdle    = "idle"
)

// AgentLiveSubject is agent.live.<sk> (core NATS, not stored).
func AgentLiveSubject(k SessionKey) string { return k.subject(PrefixAgentLive) }

// DeadLetterSubject is dlq.<role>.<reason>, e.g. dlq.egress.poison. Role is the component that
// gave up (ingest, turn-worker, tool-worker, egress, archiver); reason is a short code
// (invalid, poison, max_deliveries, unknown_tool, ...). The full story is in the DeadLetter body.
func DeadLetterSubject(role, reason string) string {
	return PrefixDeadLetter + "." + EncodeToken(role) + "." + EncodeToken(reason)
}

// ---- parsers ----

func splitSubject(subj, prefix string, n int) ([]string, error) {
	if !strings.HasPrefix(subj, prefix+".") {
		return nil, invalid("subject", "%q: want prefix %s.", subj, prefix)
	}
	toks := strings.Split(subj[len(prefix)+1:], ".")
	if len(toks) != n {
		return nil, invalid("subject", "%q: want %d tokens after %s, got %d", subj, n, prefix, len(toks))
	}
	return toks, nil
}

func decodeTokens(subj string, toks []string) ([]string, error) {
	out := make([]string, len(toks))
	for i, t := range toks {
		s, err := DecodeToken(t)
		if err != nil {
			return nil, invalid("subject", "%q: token %d: %v", subj, i, err)
		}
		out[i] = s
	}
	return out, nil
}

func parseScene(subj, prefix string) (SessionKey, error) {
	toks, err := splitSubject(subj, prefix, 4)
	if err != nil {
		return SessionKey{}, err
	}
	v, err := decodeTokens(subj, toks)
	if err != nil {
		return SessionKey{}, err
	}
	k := SessionKey{Platform: v[0], Bot: v[1], Scope: v[2], Scene: v[3]}
	if err := k.validate(); err != nil {
		return SessionKey{}, invalid("subject", "%q: %v", subj, err)
	}
	return k, nil
}

func parseSK(subj, tok string) (SessionKey, error) {
	k, err := ParseSessionKeyToken(tok)
	if err != nil {
		return SessionKey{}, invalid("subject", "%q: session key: %v", subj, err)
	}
	return k, nil
}

// ParseIMInSubject reverses IMInSubject.
func ParseIMInSubject(subj string) (SessionKey, error) { return parseScene(subj, PrefixIMIn) }

// ParseIMOutSubject reverses IMOutSubject.
func ParseIMOutSubject(subj string) (SessionKey, error) { return parseScene(subj, PrefixIMOut) }

// ParseIMSentSubject reverses IMSentSubject, and IMSentPartSubject without the out id.
func ParseIMSentSubject(subj string) (SessionKey, error) {
	k, _, err := ParseIMSentPartSubject(subj)
	return k, err
}

// ParseIMSentPartSubject reverses IMSentPartSubject; an older receipt's subject (IMSentSubject,
// no out id) gives an empty out id.
func ParseIMSentPartSubject(subj string) (SessionKey, string, error) {
	if strings.Count(subj, ".") != 6 {
		k, err := parseScene(subj, PrefixIMSent)
		return k, "", err
	}
	i := strings.LastIndexByte(subj, '.')
	k, err := parseScene(subj[:i], PrefixIMSent)
	if err != nil {
		return SessionKey{}, "", err
	}
	out, err := DecodeToken(subj[i+1:])
	if err != nil {
		return SessionKey{}, "", invalid("subject", "%q: out id: %v", subj, err)
	}
	return k, out, nil
}

// ParseAgentInSubject reverses AgentInSubject.
func ParseAgentInSubject(subj string) (SessionKey, error) {
	toks, err := splitSubject(subj, PrefixAgentIn, 1)
	if err != nil {
		return SessionKey{}, err
	}
	return parseSK(subj, toks[0])
}

// ParseScheduleSubject reverses ScheduleSubject.
func ParseScheduleSubject(subj string) (k SessionKey, id string, err error) {
	toks, err := splitSubject(subj, PrefixSchedule, 2)
	if err != nil {
		return SessionKey{}, "", err
	}
	if k, err = parseSK(subj, toks[0]); err != nil {
		return SessionKey{}, "", err
	}
	v, err := decodeTokens(subj, toks[1:])
	if err != nil {
		return SessionKey{}, "", err
	}
	return k, v[0], nil
}

// ParseAgentEvtSubject reverses AgentEvtSubject (turn "") and AgentEvtTurnSubject (the
// layout before issue 41, turn set).
func ParseAgentEvtSubject(subj string) (k SessionKey, turn, kind string, err error) {
	toks, err := splitSubject(subj, PrefixAgentEvt, 2)
	if err != nil {
		toks, err = splitSubject(subj, PrefixAgentEvt, 3)
	}
	if err != nil {
		return SessionKey{}, "", "", err
	}
	if k, err = parseSK(subj, toks[0]); err != nil {
		return SessionKey{}, "", "", err
	}
	v, err := decodeTokens(subj, toks[1:])
	if err != nil {
		return SessionKey{}, "", "", err
	}
	if len(v) == 1 {
		return k, "", v[0], nil
	}
	return k, v[0], v[1], nil
}

// ParseAgentCtxSubject reverses AgentCtxSubject.
func ParseAgentCtxSubject(subj string) (SessionID, error) {
	toks, err := splitSubject(subj, PrefixAgentCtx, 2)
	if err != nil {
		return SessionID{}, err
	}
	k, err := parseSK(subj, toks[0])
	if err != nil {
		return SessionID{}, err
	}
	epoch, ok := parseEpoch(toks[1])
	if !ok {
		return SessionID{}, invalid("subject", "%q: epoch %q must be a positive decimal integer", subj, toks[1])
	}
	return SessionID{Key: k, Epoch: epoch}, nil
}

// ParseToolCallSubject reverses ToolCallSubject.
func ParseToolCallSubject(subj string) (tool string, err error) {
	toks, err := splitSubject(subj, PrefixToolCall, 1)
	if err != nil {
		return "", err
	}
	v, err := decodeTokens(subj, toks)
	if err != nil {
		return "", err
	}
	return v[0], nil
}

// ParseToolResultSubject reverses ToolResultSubject (callID "": it is in the message's
// HeaderCallID) and ToolResultCallSubject.
func ParseToolResultSubject(subj string) (k SessionKey, callID string, err error) {
	toks, err := splitSubject(subj, PrefixToolResult, 1)
	if err != nil {
		if toks, err = splitSubject(subj, PrefixToolResult, 2); err != nil {
			return SessionKey{}, "", err
		}
	}
	if k, err = parseSK(subj, toks[0]); err != nil {
		return SessionKey{}, "", err
	}
	if len(toks) == 1 {
		return k, "", nil
	}
	v, err := decodeTokens(subj, toks[1:])
	if err != nil {
		return SessionKey{}, "", err
	}
	return k, v[0], nil
}

// ParseTaskSubject reverses TaskSubject.
func ParseTaskSubject(subj string) (kind, id string, err error) {
	toks, err := splitSubject(subj, PrefixTask, 2)
	if err != nil {
		return "", "", err
	}
	v, err := decodeTokens(subj, toks)
	if err != nil {
		return "", "", err
	}
	if v[0] != TaskKindSubagent && v[0] != TaskKindDeferred {
		return "", "", invalid("subject", "%q: task kind %q must be subagent or deferred", subj, v[0])
	}
	return v[0], v[1], nil
}

// ParseAgentLiveSubject reverses AgentLiveSubject.
func ParseAgentLiveSubject(subj string) (SessionKey, error) {
	toks, err := splitSubject(subj, PrefixAgentLive, 1)
	if err != nil {
		return SessionKey{}, err
	}
	return parseSK(subj, toks[0])
}

// ParseDeadLetterSubject reverses DeadLetterSubject.
func ParseDeadLetterSubject(subj string) (role, reason string, err error) {
	toks, err := splitSubject(subj, PrefixDeadLetter, 2)
	if err != nil {
		return "", "", err
	}
	v, err := decodeTokens(subj, toks)
	if err != nil {
		return "", "", err
	}
	return v[0], v[1], nil
}

// all returns prefix.> (the stream subject filter for a prefix).
func all(prefix string) string { return prefix + "." + wildcardAllTokens }
