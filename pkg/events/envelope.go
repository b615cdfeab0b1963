package events

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"time"

	"github.com/nats-io/nuid"
)

// Version is the schema version this build writes in every event's "v". Readers accept any v
// from 1 to Version. Versioning rules (docs/events.md): adding an optional field or a new event
// type keeps v; removing or renaming a field, changing its meaning or making it required bumps
// v, and readers keep decoding the older versions they know.
const Version = 1

// Meta is the envelope every event carries next to its payload. On the wire it is flat:
//
//	{"type":"im.message","v":1,"id":"...","time":1767000000000,"session":"...","turn":"...","trace":"...","data":{...}}
//
// Session, Turn and Trace are the correlation ids; they are mirrored into NATS headers by
// NewMsg (HeaderSession, HeaderTurn, HeaderTrace, traceparent).
type Meta struct {
	// Type names the payload (Type* constants); it decides how data is read.
	Type string `json:"type"`
	// V is the schema version (Version).
	V int `json:"v"`
	// ID is unique per event (a NUID by default). Republishing the same event keeps its ID,
	// which is also the default Nats-Msg-Id, so a retried publish is deduplicated.
	ID string `json:"id"`
	// Time is when the event was created, Unix milliseconds.
	Time int64 `json:"time"`
	// Session is the session id "platform:botId:scope:sceneId#epoch" when known, otherwise the
	// bare session key (e.g. on im.message, before a worker picked the epoch).
	Session string `json:"session,omitempty"`
	// Turn is the turn id the event belongs to, if any.
	Turn string `json:"turn,omitempty"`
	// Trace is the W3C trace id (32 lower-case hex digits) shared by everything one inbound
	// message causes.
	Trace string `json:"trace,omitempty"`
}

// Payload is implemented by every event payload type (value receivers).
type Payload interface {
	// EventType returns the payload's Type* constant.
	EventType() string
	// Validate reports the first problem, naming the field relative to the payload.
	Validate() error
}

// Event is one typed event: the envelope plus a payload of type P.
type Event[P Payload] struct {
	Meta
	Data P `json:"data"`
}

// Any is implemented by every *Event[P]; Decode returns it and callers type-switch:
//
//	switch ev := ev.(type) {
//	case *events.Event[events.UserMessage]: ...
//	}
type Any interface {
	EventMeta() *Meta
	EventPayload() Payload
	isNil() bool // seals Any to *Event[P] and lets Marshal reject a typed nil
	// appendFast writes the event with envelope m through the fast codec; false when P has
	// none or a value needs encoding/json.
	appendFast(b []byte, m Meta) ([]byte, bool)
	// payloadType, validatePayload and msgID are EventPayload().EventType(),
	// EventPayload().Validate() and MsgID(ev) without copying the payload into an interface.
	payloadType() string
	validatePayload() error
	msgID() string
}

func (e *Event[P]) isNil() bool { return e == nil }

func (e *Event[P]) appendFast(b []byte, m Meta) ([]byte, bool) {
	p, ok := any(&e.Data).(fastEncoder)
	if !ok || !fastCodec {
		return b, false
	}
	return appendEvent(b, &m, p)
}

func (e *Event[P]) payloadType() string { return e.Data.EventType() }

func (e *Event[P]) validatePayload() error { return e.Data.Validate() }

func (e *Event[P]) msgID() string {
	if m, ok := any(&e.Data).(MsgIDer); ok {
		if id := m.MsgID(); id != "" {
			return id
		}
	}
	return e.ID
}

// EventMeta returns the envelope.
func (e *Event[P]) EventMeta() *Meta { return &e.Meta }

// EventPayload returns the payload.
func (e *Event[P]) EventPayload() Payload { return e.Data }

// Option adjusts a new event.
type Option func(*Meta)

// WithSession sets the correlation session (use SessionID.String() or SessionKey.String()).
func WithSession(s string) Option { return func(m *Meta) { m.Session = s } }

// WithTurn sets the turn id.
func WithTurn(turn string) Option { return func(m *Meta) { m.Turn = turn } }

// WithTrace sets the trace id.
func WithTrace(trace string) Option { return func(m *Meta) { m.Trace = trace } }

// WithID sets the event id (default: a new NUID). Use it for ids that must be stable across
// retries, e.g. the out id of an outbound part.
func WithID(id string) Option { return func(m *Meta) { m.ID = id } }

// WithTime sets the event time (Unix ms).
func WithTime(ms int64) Option { return func(m *Meta) { m.Time = ms } }

// WithCorrelation copies session, turn and trace from another event's meta.
func WithCorrelation(from *Meta) Option {
	return func(m *Meta) { m.Session, m.Turn, m.Trace = from.Session, from.Turn, from.Trace }
}

// New wraps p in an envelope: type from p, v = Version, a fresh id, time = now.
func New[P Payload](p P, opts ...Option) *Event[P] {
	ev := &Event[P]{Meta: Meta{Type: p.EventType(), V: Version, ID: NewID(), Time: time.Now().UnixMilli()}, Data: p}
	for _, o := range opts {
		o(&ev.Meta)
	}
	return ev
}

// NewID returns a new unique id (a NUID: 22 characters of [0-9A-Za-z], subject-safe).
func NewID() string { return nuid.Next() }

// NewTraceID returns a random W3C trace id (32 lower-case hex digits, never all zero).
func NewTraceID() string {
	var raw [16]byte
	binary.BigEndian.PutUint64(raw[:8], newSpanID()) // never zero
	binary.BigEndian.PutUint64(raw[8:], rand.Uint64())
	var b [32]byte
	hex.Encode(b[:], raw[:])
	return string(b[:])
}

// Marshal validates ev and returns its JSON. Blank Type and V are filled from the payload and
// Version in the output (ev itself is not changed); a Type that does not match the payload, a
// missing id or time, or an invalid payload is an error wrapping ErrInvalid.
func Marshal(ev Any) ([]byte, error) {
	if ev == nil || ev.isNil() {
		return nil, invalid("event", "nil event")
	}
	m := ev.EventMeta()
	want := ev.payloadType()
	fixed := *m
	if fixed.Type == "" {
		fixed.Type = want
	}
	if fixed.V == 0 {
		fixed.V = Version
	}
	if err := checkMeta(&fixed, want); err != nil {
		return nil, err
	}
	if err := ev.validatePayload(); err != nil {
		return nil, payloadError(want, err)
	}
	if out, ok := marshalFast(ev, fixed); ok {
		return out, nil
	}
	if fixed == *m {
		return json.Marshal(ev)
	}
	return json.Marshal(struct {
		Meta
		Data Payload `json:"data"`
	}{fixed, ev.EventPayload()})
}

// Unmarshal decodes data into ev and validates it: the JSON must parse, type must be P's type,
// v must be between 1 and Version, id and time must be set, and the payload must be valid.
// Unknown fields are ignored (forward compatibility within one v).
func Unmarshal[P Payload](data []byte, ev *Event[P]) error {
	// The fast decoder fills a zero event; decoding into a used one merges as encoding/json
	// does, which only encoding/json itself gets exactly right.
	return unmarshal(data, ev, reflect.ValueOf(ev).Elem().IsZero())
}

// unmarshal is Unmarshal; fresh says ev is the zero value.
func unmarshal[P Payload](data []byte, ev *Event[P], fresh bool) error {
	var zero P
	want := zero.EventType()
	if !fresh || !decodeFast(data, ev, want) {
		if err := json.Unmarshal(data, ev); err != nil {
			return jsonError(want, err)
		}
	}
	if err := checkMeta(&ev.Meta, want); err != nil {
		return err
	}
	if err := ev.Data.Validate(); err != nil {
		return payloadError(want, err)
	}
	return nil
}

// Decode reads any known event, picking the payload type from "type", and validates it like
// Unmarshal. Use it on streams that carry several types (SESSION_IN, AGENT_EVENTS, AGENT_CTX).
func Decode(data []byte) (Any, error) {
	var typ string
	if t, ok := fastType(data); ok {
		if mk, ok := registry[string(t)]; ok { // no copy of t for the lookup
			return mk(data)
		}
		typ = string(t)
	} else {
		var peek struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(data, &peek); err != nil {
			return nil, jsonError("event", err)
		}
		typ = peek.Type
	}
	if typ == "" {
		return nil, invalid("event", "type is required")
	}
	mk, ok := registry[typ]
	if !ok {
		return nil, &InvalidError{What: "event", Reason: fmt.Sprintf("unknown type %q", typ), Err: ErrUnknownType}
	}
	return mk(data)
}

// fastType reads the type of an event that starts with {"type":"...", as everything Marshal
// writes does, without a second JSON pass. Anything else (whitespace, escapes, another field
// first) falls back to a full peek. The full decode that follows validates
// the JSON anyway.
func fastType(data []byte) ([]byte, bool) {
	const prefix = `{"type":"`
	if !bytes.HasPrefix(data, []byte(prefix)) {
		return nil, false
	}
	rest := data[len(prefix):]
	end := bytes.IndexByte(rest, '"')
	if end < 0 || bytes.IndexByte(rest[:end], '\\') >= 0 {
		return nil, false
	}
	return rest[:end], true
}

// marshalFast encodes ev with envelope m through the fast codec into a pooled buffer and
// returns a copy of exactly its size.
func marshalFast(ev Any, m Meta) ([]byte, bool) {
	bp := encBufs.Get().(*[]byte)
	b, ok := ev.appendFast((*bp)[:0], m)
	var out []byte
	if ok {
		out = make([]byte, len(b))
		copy(out, b)
	}
	if cap(b) <= maxPooledBuf {
		*bp = b[:0]
		encBufs.Put(bp)
	}
	return out, ok
}

// decodeFast decodes data into the zero event ev through the fast codec. When it reports
// false, ev is zero again and the caller decodes with encoding/json.
func decodeFast[P Payload](data []byte, ev *Event[P], want string) bool {
	p, ok := any(&ev.Data).(fastDecoder)
	if !ok || !fastCodec {
		return false
	}
	d := decoder{data: data}
	if decodeEvent(&d, &ev.Meta, want, p) && d.end() {
		return true
	}
	*ev = Event[P]{}
	return false
}

// PeekMeta decodes only the envelope, without validating the payload. Useful for routing and
// for dead-lettering something Decode rejected.
func PeekMeta(data []byte) (Meta, error) {
	var m Meta
	if err := json.Unmarshal(data, &m); err != nil {
		return Meta{}, jsonError("event", err)
	}
	return m, nil
}

// registry maps type -> decoder for Decode. Filled by register in each payload file's init.
var registry = map[string]func([]byte) (Any, error){}

// fastTypes are the registered types with a fast codec (encoder and decoder).
var fastTypes = map[string]bool{}

// register adds P to Decode's registry.
func register[P Payload]() {
	var zero P
	if _, ok := any(&zero).(interface {
		fastEncoder
		fastDecoder
	}); ok {
		fastTypes[zero.EventType()] = true
	}
	registry[zero.EventType()] = func(data []byte) (Any, error) {
		ev := new(Event[P])
		if err := unmarshal(data, ev, true); err != nil {
			return nil, err
		}
		return ev, nil
	}
}

// Types returns every event type Decode knows, for documentation and schema generation.
func Types() []string {
	out := make([]string, 0, len(registry))
	for t := range registry {
		out = append(out, t)
	}
	return out
}

func checkMeta(m *Meta, want string) error {
	switch {
	case m.Type == "":
		return invalid(want+" event", "type is required")
	case m.Type != want:
		return invalid(want+" event", "type %q does not match, want %q", m.Type, want)
	case m.V <= 0:
		return invalid(want+" event", "v is required (a positive schema version)")
	case m.V > Version:
		return &InvalidError{What: want + " event", Reason: fmt.Sprintf("v %d is newer than supported version %d", m.V, Version), Err: ErrUnsupportedVersion}
	case m.ID == "":
		return invalid(want+" event", "id is required")
	case m.Time <= 0:
		return invalid(want+" event", "time is required (Unix milliseconds)")
	case m.Session != "" && !validSessionID(m.Session):
		return invalid(want+" event", "session %q is not a session id or key", m.Session)
	}
	return nil
}

func payloadError(typ string, err error) error {
	return &InvalidError{What: typ + " event", Reason: err.Error()}
}

func jsonError(typ string, err error) error {
	what := typ
	if typ != "event" {
		what = typ + " event"
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return &InvalidError{What: what, Reason: fmt.Sprintf("%s: want %s, got JSON %s", te.Field, te.Type, te.Value), Err: err}
	}
	return &InvalidError{What: what, Reason: "malformed JSON: " + err.Error(), Err: err}
}
