package events

import (
	"crypto/rand"
	"encoding/hex"
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
	// HeaderTraceparent is the W3C trace context header (set when Trace is a valid trace id).
	HeaderTraceparent = "traceparent"
	// HeaderMsgID is JetStream's dedupe header.
	HeaderMsgID = nats.MsgIdHdr
)

// MsgIDer is implemented by payloads whose dedupe id is not the event id: IMMessage
// (platform/bot/message id), ToolCall (call id), Outbound (out id), Receipt, ToolResult, tasks.
type MsgIDer interface {
	MsgID() string
}

// MsgID returns the Nats-Msg-Id for ev: the payload's MsgID when it has one, else the event id.
func MsgID(ev Any) string {
	if m, ok := ev.EventPayload().(MsgIDer); ok {
		if id := m.MsgID(); id != "" {
			return id
		}
	}
	return ev.EventMeta().ID
}

// NewMsg marshals ev (validating it) into a message for subject with the correlation headers
// and Nats-Msg-Id = MsgID(ev).
func NewMsg(subject string, ev Any) (*nats.Msg, error) {
	data, err := Marshal(ev)
	if err != nil {
		return nil, err
	}
	m := ev.EventMeta()
	msg := &nats.Msg{Subject: subject, Data: data, Header: make(nats.Header, 7)}
	h := msg.Header
	typ := m.Type
	if typ == "" {
		typ = ev.EventPayload().EventType()
	}
	h[HeaderType] = []string{typ}
	h[HeaderEventID] = []string{m.ID}
	h[HeaderMsgID] = []string{MsgID(ev)}
	SetCorrelation(h, Correlation{Session: m.Session, Turn: m.Turn, Trace: m.Trace})
	return msg, nil
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
	if c.Session != "" {
		h[HeaderSession] = []string{c.Session}
	}
	if c.Turn != "" {
		h[HeaderTurn] = []string{c.Turn}
	}
	if c.Trace != "" {
		h[HeaderTrace] = []string{c.Trace}
		if validTraceID(c.Trace) {
			h[HeaderTraceparent] = []string{"00-" + c.Trace + "-" + newSpanID() + "-01"}
		}
	}
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

func newSpanID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
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
	if h == nil {
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
