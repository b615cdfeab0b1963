package events

import (
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"strings"

	"github.com/nats-io/nats.go"
)

// NATS headers set by NewMsg. The body is the source of truth; the headers let routers,
// tracing and operators (nats stream view) see correlation without parsing JSON.
const (
	HeaderType    = "Agentbus-Type"
	HeaderEventID = "Agentbus-Event-Id"
	HeaderSession = "Agentbus-Session"
	HeaderTurn    = "Agentbus-Turn"
	HeaderTrace   = "Agentbus-Trace"
	// HeaderOutID on a receipt (IM_SENT) is the out id of the part it records: receipts share
	// their chat's subject, so this header says which part each one is for.
	HeaderOutID = "Agentbus-Out-Id"
	// HeaderCallID on a tool result (TOOL_RESULTS) is the call id it answers: results share
	// their session's subject, so this header says which call each one is for.
	HeaderCallID = "Agentbus-Call-Id"
	// HeaderWakeAck on a doorbell ring (AgentWakeSubject) is the ack subject of the JetStream
	// delivery the ring hands over to the owner.
	HeaderWakeAck = "Agentbus-Wake-Ack"
	// HeaderTraceparent is the W3C trace context header (set when Trace is a valid trace id).
	HeaderTraceparent = "traceparent"
	// HeaderSpanContext carries the span context of the span that published the event, as a
	// W3C traceparent value ("00-<trace>-<span>-<flags>"), when the publisher records spans
	// (pkg/tracing). It is not named traceparent because nats-server builds a map of every
	// header of each message whose traceparent is sampled (its own message tracing,
	// docs/benchmarks.md); under this name the server passes it through untouched.
	HeaderSpanContext = "Agentbus-Traceparent"
	// HeaderMsgID is JetStream's dedupe header.
	HeaderMsgID = nats.MsgIdHdr
)

// MsgIDer is implemented by payloads whose dedupe id is not the event id: IMMessage
// (platform/bot/message id), ToolCall (call id), Outbound (out id), Receipt, ToolResult, tasks.
type MsgIDer interface {
	MsgID() string
}

// MsgID returns the Nats-Msg-Id for ev: the payload's MsgID when it has one, else the event id.
func MsgID(ev Any) string { return ev.msgID() }

// msgHeaders is how many headers NewMsg sets at most.
const msgHeaders = 7

// NewMsg marshals ev (validating it) into a message for subject with the correlation headers
// and Nats-Msg-Id = MsgID(ev).
func NewMsg(subject string, ev Any) (*nats.Msg, error) {
	data, err := Marshal(ev)
	if err != nil {
		return nil, err
	}
	m := ev.EventMeta()
	typ := m.Type
	if typ == "" {
		typ = ev.payloadType()
	}
	// The message and its header values are one allocation: the values live as long as the
	// message does (a published message may be held for a retry, PubAckFuture.Msg).
	mv := &msgWithVals{}
	hb := headerBuilder{h: make(nats.Header, msgHeaders), vals: mv.vals[:0]}
	hb.set(HeaderType, typ)
	hb.set(HeaderEventID, m.ID)
	hb.set(HeaderMsgID, ev.msgID())
	hb.correlation(m.Session, m.Turn, m.Trace)
	mv.msg = nats.Msg{Subject: subject, Data: data, Header: hb.h}
	return &mv.msg, nil
}

// msgWithVals is what NewMsg allocates: a message and the backing array of its header values.
type msgWithVals struct {
	msg  nats.Msg
	vals [msgHeaders]string
}

// headerBuilder fills a header whose values share one backing array: one allocation for all
// of them instead of one per header.
type headerBuilder struct {
	h    nats.Header
	vals []string
}

func (b *headerBuilder) set(key, val string) {
	b.vals = append(b.vals, val)
	n := len(b.vals)
	b.h[key] = b.vals[n-1 : n : n] // capped, so an append by a later user copies
}

func (b *headerBuilder) correlation(session, turn, trace string) {
	if session != "" {
		b.set(HeaderSession, session)
	}
	if turn != "" {
		b.set(HeaderTurn, turn)
	}
	if trace != "" {
		b.set(HeaderTrace, trace)
		if validTraceID(trace) {
			b.set(HeaderTraceparent, traceparent(trace))
		}
	}
}

// Correlation is the set of ids that tie events together.
type Correlation struct {
	Session string
	Turn    string
	Trace   string
}

// CorrelationOf returns ev's correlation ids.
func CorrelationOf(m *Meta) Correlation {
	return Correlation{Session: m.Session, Turn: m.Turn, Trace: m.Trace}
}

// SetCorrelation writes c into h (empty fields are not written). A valid trace id also sets a
// W3C traceparent with a fresh span id, so OpenTelemetry-aware consumers join the trace.
func SetCorrelation(h nats.Header, c Correlation) {
	hb := headerBuilder{h: h, vals: make([]string, 0, 4)}
	hb.correlation(c.Session, c.Turn, c.Trace)
}

// traceparent returns "00-<trace>-<new span id>-00" for a valid trace id. The sampled flag is
// off: agentbus records no spans, so it does not claim the trace was recorded, and a sampled
// traceparent makes nats-server build a map of every header of the message to look for account
// message tracing (about a tenth of the allocations of a whole turn, docs/benchmarks.md). To have
// NATS trace a message, publish it with a Nats-Trace-Dest header.
func traceparent(trace string) string {
	var b [len("00-") + 32 + len("-") + 16 + len("-00")]byte
	n := copy(b[:], "00-")
	n += copy(b[n:], trace)
	b[n] = '-'
	n++
	var span [8]byte
	binary.BigEndian.PutUint64(span[:], newSpanID())
	n += hex.Encode(b[n:], span[:])
	copy(b[n:], "-00")
	return string(b[:])
}

// CorrelationFromHeader reads correlation ids back from message headers. Trace falls back to
// the trace id inside traceparent when Agentbus-Trace is absent (a third-party publisher that
// only speaks W3C trace context).
func CorrelationFromHeader(h nats.Header) Correlation {
	if h == nil {
		return Correlation{}
	}
	c := Correlation{Session: h.Get(HeaderSession), Turn: h.Get(HeaderTurn), Trace: h.Get(HeaderTrace)}
	if c.Trace == "" {
		if tp := h.Get(HeaderTraceparent); tp != "" {
			c.Trace = TraceIDFromTraceparent(tp)
		}
	}
	return c
}

// TraceIDFromTraceparent returns the trace id of a W3C traceparent ("00-<trace>-<span>-<flags>"),
// or "" when it is malformed.
func TraceIDFromTraceparent(tp string) string {
	parts := strings.Split(strings.TrimSpace(tp), "-")
	if len(parts) < 4 || len(parts[0]) != 2 || !validTraceID(parts[1]) || len(parts[2]) != 16 {
		return ""
	}
	return parts[1]
}

func validTraceID(s string) bool {
	if len(s) != 32 || s == "00000000000000000000000000000000" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// newSpanID returns a random non-zero W3C span id. Span and trace ids only need to be unique
// (they are not secrets), so they come from the runtime's fast per-thread generator
// (ChaCha8, seeded by the OS) rather than from a crypto/rand system call per message.
func newSpanID() uint64 {
	for {
		if id := rand.Uint64(); id != 0 {
			return id
		}
	}
}

// DecodeMsg decodes a message body with Decode and fills missing correlation ids from the
// headers (body values win when both are set).
func DecodeMsg(msg *nats.Msg) (Any, error) {
	ev, err := Decode(msg.Data)
	if err != nil {
		return nil, err
	}
	fillCorrelation(ev.EventMeta(), msg.Header)
	return ev, nil
}

// UnmarshalMsg is Unmarshal for a message, filling missing correlation ids from the headers.
func UnmarshalMsg[P Payload](msg *nats.Msg, ev *Event[P]) error {
	if err := Unmarshal(msg.Data, ev); err != nil {
		return err
	}
	fillCorrelation(&ev.Meta, msg.Header)
	return nil
}

func fillCorrelation(m *Meta, h nats.Header) {
	if h == nil || m.Session != "" && m.Turn != "" && m.Trace != "" {
		return
	}
	c := CorrelationFromHeader(h)
	if m.Session == "" {
		if _, err := ParseSessionID(c.Session); err == nil {
			m.Session = c.Session
		}
	}
	if m.Turn == "" {
		m.Turn = c.Turn
	}
	if m.Trace == "" {
		m.Trace = c.Trace
	}
}
