// Package events is agentbus's wire contract: the JSON of every event the roles exchange over
// NATS, the subjects and KV keys they are stored under, and the headers that go with them.
// Every role, the IM adapters and third-party publishers speak it; of the module it imports
// only pkg/llm (messages and content are llm's types) and a JSON escaping helper, so that
// anything may depend on it. docs/events.md is the same contract for
// readers without Go, field by field.
//
// # The envelope
//
// An event is an Event[P]: the envelope Meta (type, v, id, time, and the correlation ids
// session, turn and trace) flat next to the payload in "data":
//
//	{"type":"inbox.command","v":1,"id":"...","time":1767000000000,"session":"...","data":{...}}
//
// New fills the envelope; Marshal and NewMsg validate before anything is published, and
// Unmarshal, Decode and DecodeMsg validate everything they read, so a role never acts on an
// event its own Validate would refuse. Every failure wraps ErrInvalid and says which field is
// wrong; a poison message is dead-lettered with that text (dlq.<role>.<reason>), never
// retried forever.
//
// # What the contract guarantees
//
//   - Subjects: every variable token goes through EncodeToken, a bijection onto the characters
//     a subject token and a KV key may hold, so any platform id, bot id or scene id (dots,
//     spaces, UTF-8) lands on exactly one subject and can be read back (DecodeToken,
//     ParseSessionKeyToken). Builders never fail; parsers refuse what no builder produces.
//   - Dedupe: NewMsg sets Nats-Msg-Id from MsgID, which is stable for the things that are
//     retried (a platform message id, a tool call id, an out id), so a retried publish inside
//     the stream's duplicate window is stored once.
//   - Headers mirror the correlation ids (HeaderSession, HeaderTurn, HeaderTrace, W3C
//     traceparent); the body is the source of truth, and DecodeMsg fills only what the body
//     lacks from them.
//   - Order: JetStream keeps the order of one subject. agent.in.<sk> is one subject per
//     session, so a session's inbox is read in the order it was stored, whichever worker
//     reads it.
//
// # Versioning
//
// Version is the v this build writes; readers accept 1..Version. Adding an optional field, a
// segment type or an event type keeps v. Removing or renaming a field, changing its meaning
// or type, or making it required bumps v, and readers keep decoding every older v they know.
// An event with a newer v is refused with ErrUnsupportedVersion (and dead-lettered), never
// half-understood; a type this build does not know is ErrUnknownType.
//
// # Caveats
//
// What a reader must not assume:
//
//   - Unknown fields are ignored, not kept: a role that decodes an event and publishes it
//     again drops the fields of a newer writer. Forward what you received as bytes when it
//     must survive intact.
//   - The JSON is not canonical across writers. agentbus writes what encoding/json writes
//     (the fast codec, fastjson.go, matches it byte for byte), but a third party may order
//     keys or escape strings otherwise: compare decoded values, never bodies, and never hash a
//     body as an identity (use the event id or MsgID).
//   - Validation is structural. A valid event is well-formed, not authorised: the sender's
//     roles in an IMMessage are what the publisher states. Ingest assigns them for messages
//     it receives, but anyone with publish rights on im.in.> or agent.in.> can state any
//     roles, so grant those rights only to publishers trusted to state them truthfully.
//   - Headers are a convenience. A message without them (another client, a republish by
//     hand) is still valid; a header that disagrees with the body loses.
//   - Event ids are unique, not ordered: a NUID says nothing about time or sequence. Use the
//     stream sequence for order and Meta.Time only for display and age limits (clocks of
//     different hosts differ).
//   - Dedupe holds inside the stream's duplicate window only (minutes, see docs/events.md); a
//     publisher retrying later must expect a second copy, and every consumer is written to
//     tolerate redelivery (at-least-once).
//   - The fast codec is an optimisation that must never change the wire: when a struct it
//     covers gains, loses or renames a field, the layout check (fastcodec.go) switches the
//     fast codec off for the whole package, so the bytes stay encoding/json's but every event
//     gets slower, and TestFastCodecLayouts fails until the codec is brought up to date. A
//     field added to a payload needs its JSON tag, its Validate rule, docs/events.md and,
//     for a covered struct, the fast codec.
//   - Payload structs and their slices and maps are plain values: Event is not safe to change
//     from several goroutines, and Decode returns a fresh value the caller owns.
package events
