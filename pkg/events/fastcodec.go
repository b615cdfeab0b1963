package events

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/agentbus/agentbus/pkg/llm"
)

// Hand-written JSON of the event types a turn moves (see fastjson.go for the rules). Each
// covered payload type has
//
//	appendJSON(b []byte) ([]byte, bool)   // false: let encoding/json write the event
//	decodeJSON(d *decoder) bool           // false: let encoding/json read the event
//
// on its pointer. Types without them always go through encoding/json.

// fastEncoder and fastDecoder are implemented by *P of the covered payload types.
type fastEncoder interface {
	appendJSON(b []byte) ([]byte, bool)
}

type fastDecoder interface {
	decodeJSON(d *decoder) bool
}

// fastCodec is false when a covered struct's fields differ from those the codec was written
// for (checkFastLayouts); everything then goes through encoding/json.
var fastCodec = checkFastLayouts() == nil

// appendEvent writes the envelope m and the payload p (never nil).
func appendEvent(b []byte, m *Meta, p fastEncoder) ([]byte, bool) {
	b = append(b, `{"type":`...)
	b = appendString(b, m.Type)
	b = append(b, `,"v":`...)
	b = strconv.AppendInt(b, int64(m.V), 10)
	b = append(b, `,"id":`...)
	b = appendString(b, m.ID)
	b = append(b, `,"time":`...)
	b = strconv.AppendInt(b, m.Time, 10)
	if m.Session != "" {
		b = append(b, `,"session":`...)
		b = appendString(b, m.Session)
	}
	if m.Turn != "" {
		b = append(b, `,"turn":`...)
		b = appendString(b, m.Turn)
	}
	if m.Trace != "" {
		b = append(b, `,"trace":`...)
		b = appendString(b, m.Trace)
	}
	b = append(b, `,"data":`...)
	b, ok := p.appendJSON(b)
	return append(b, '}'), ok
}

// decodeEvent reads an envelope and its payload into a zero event.
func decodeEvent(d *decoder, m *Meta, want string, p fastDecoder) bool {
	return d.object(func(k []byte) int {
		switch string(k) {
		case "type":
			return field(0, d.strAs(&m.Type, want))
		case "v":
			return field(1, d.int(&m.V))
		case "id":
			return field(2, d.str(&m.ID))
		case "time":
			return field(3, d.int64(&m.Time))
		case "session":
			return field(4, d.str(&m.Session))
		case "turn":
			return field(5, d.str(&m.Turn))
		case "trace":
			return field(6, d.str(&m.Trace))
		case "data":
			return field(7, p.decodeJSON(d))
		}
		return -1
	})
}

// ---- llm ----

func appendUsage(b []byte, u *llm.Usage) ([]byte, bool) {
	b = append(b, `{"input":`...)
	b = strconv.AppendInt(b, int64(u.Input), 10)
	b = append(b, `,"output":`...)
	b = strconv.AppendInt(b, int64(u.Output), 10)
	b = append(b, `,"cacheRead":`...)
	b = strconv.AppendInt(b, int64(u.CacheRead), 10)
	b = append(b, `,"cacheWrite":`...)
	b = strconv.AppendInt(b, int64(u.CacheWrite), 10)
	b = append(b, `,"totalTokens":`...)
	b = strconv.AppendInt(b, int64(u.TotalTokens), 10)
	c := &u.Cost
	ok := true
	b = append(b, `,"cost":{"input":`...)
	b, ok = appendFloat(b, c.Input)
	if !ok {
		return b, false
	}
	b = append(b, `,"output":`...)
	if b, ok = appendFloat(b, c.Output); !ok {
		return b, false
	}
	b = append(b, `,"cacheRead":`...)
	if b, ok = appendFloat(b, c.CacheRead); !ok {
		return b, false
	}
	b = append(b, `,"cacheWrite":`...)
	if b, ok = appendFloat(b, c.CacheWrite); !ok {
		return b, false
	}
	b = append(b, `,"total":`...)
	if b, ok = appendFloat(b, c.Total); !ok {
		return b, false
	}
	return append(b, "}}"...), true
}

func decodeUsage(d *decoder, dst **llm.Usage) bool {
	if d.null() {
		*dst = nil
		return true
	}
	if *dst == nil {
		*dst = new(llm.Usage)
	}
	u := *dst
	return d.object(func(k []byte) int {
		switch string(k) {
		case "input":
			return field(0, d.int(&u.Input))
		case "output":
			return field(1, d.int(&u.Output))
		case "cacheRead":
			return field(2, d.int(&u.CacheRead))
		case "cacheWrite":
			return field(3, d.int(&u.CacheWrite))
		case "totalTokens":
			return field(4, d.int(&u.TotalTokens))
		case "cost":
			c := &u.Cost
			return field(5, d.object(func(k []byte) int {
				switch string(k) {
				case "input":
					return field(0, d.float64(&c.Input))
				case "output":
					return field(1, d.float64(&c.Output))
				case "cacheRead":
					return field(2, d.float64(&c.CacheRead))
				case "cacheWrite":
					return field(3, d.float64(&c.CacheWrite))
				case "total":
					return field(4, d.float64(&c.Total))
				}
				return -1
			}))
		}
		return -1
	})
}

// appendContent writes a content block as llm.Content.MarshalJSON does: a toolCall always has
// arguments, written last (after the other fields) when they are empty.
func appendContent(b []byte, c *llm.Content, depth int) ([]byte, bool) {
	o := beginObj(b)
	b = append(b, `,"type":`...)
	b = appendString(b, c.Type)
	if c.Text != "" {
		b = append(b, `,"text":`...)
		b = appendString(b, c.Text)
	}
	if c.TextSignature != "" {
		b = append(b, `,"textSignature":`...)
		b = appendString(b, c.TextSignature)
	}
	if c.Thinking != "" {
		b = append(b, `,"thinking":`...)
		b = appendString(b, c.Thinking)
	}
	if c.ThinkingSignature != "" {
		b = append(b, `,"thinkingSignature":`...)
		b = appendString(b, c.ThinkingSignature)
	}
	if c.Redacted {
		b = append(b, `,"redacted":true`...)
	}
	if c.Data != "" {
		b = append(b, `,"data":`...)
		b = appendString(b, c.Data)
	}
	if c.MimeType != "" {
		b = append(b, `,"mimeType":`...)
		b = appendString(b, c.MimeType)
	}
	if c.ID != "" {
		b = append(b, `,"id":`...)
		b = appendString(b, c.ID)
	}
	if c.Name != "" {
		b = append(b, `,"name":`...)
		b = appendString(b, c.Name)
	}
	if len(c.Arguments) > 0 {
		b = append(b, `,"arguments":`...)
		var ok bool
		if b, ok = appendMap(b, c.Arguments, depth); !ok {
			return b, false
		}
	}
	if c.ThoughtSignature != "" {
		b = append(b, `,"thoughtSignature":`...)
		b = appendString(b, c.ThoughtSignature)
	}
	if c.Type == llm.ContentToolCall && len(c.Arguments) == 0 {
		b = append(b, `,"arguments":{}`...)
	}
	return o.end(b), true
}

func decodeContent(c *llm.Content, d *decoder) bool {
	return d.object(func(k []byte) int {
		switch string(k) {
		case "type":
			return field(0, d.strAs(&c.Type, llm.ContentText, llm.ContentToolCall, llm.ContentThinking, llm.ContentImage))
		case "text":
			return field(1, d.str(&c.Text))
		case "textSignature":
			return field(2, d.str(&c.TextSignature))
		case "thinking":
			return field(3, d.str(&c.Thinking))
		case "thinkingSignature":
			return field(4, d.str(&c.ThinkingSignature))
		case "redacted":
			return field(5, d.bool(&c.Redacted))
		case "data":
			return field(6, d.str(&c.Data))
		case "mimeType":
			return field(7, d.str(&c.MimeType))
		case "id":
			return field(8, d.str(&c.ID))
		case "name":
			return field(9, d.str(&c.Name))
		case "arguments":
			return field(10, d.mapAny(&c.Arguments))
		case "thoughtSignature":
			return field(11, d.str(&c.ThoughtSignature))
		}
		return -1
	})
}

func appendContents(b []byte, cs []llm.Content) ([]byte, bool) {
	if cs == nil {
		return append(b, "null"...), true
	}
	b = append(b, '[')
	for i := range cs {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = appendContent(b, &cs[i], 0); !ok {
			return b, false
		}
	}
	return append(b, ']'), true
}

func appendMessage(b []byte, m *llm.Message) ([]byte, bool) {
	b = append(b, `{"role":`...)
	b = appendString(b, m.Role)
	b = append(b, `,"content":`...)
	b, ok := appendContents(b, m.Content)
	if !ok {
		return b, false
	}
	b = append(b, `,"timestamp":`...)
	b = strconv.AppendInt(b, m.Timestamp, 10)
	if m.API != "" {
		b = append(b, `,"api":`...)
		b = appendString(b, m.API)
	}
	if m.Provider != "" {
		b = append(b, `,"provider":`...)
		b = appendString(b, m.Provider)
	}
	if m.Model != "" {
		b = append(b, `,"model":`...)
		b = appendString(b, m.Model)
	}
	if m.ResponseID != "" {
		b = append(b, `,"responseId":`...)
		b = appendString(b, m.ResponseID)
	}
	if m.Usage != nil {
		b = append(b, `,"usage":`...)
		if b, ok = appendUsage(b, m.Usage); !ok {
			return b, false
		}
	}
	if m.StopReason != "" {
		b = append(b, `,"stopReason":`...)
		b = appendString(b, string(m.StopReason))
	}
	if m.ErrorMessage != "" {
		b = append(b, `,"errorMessage":`...)
		b = appendString(b, m.ErrorMessage)
	}
	if m.ToolCallID != "" {
		b = append(b, `,"toolCallId":`...)
		b = appendString(b, m.ToolCallID)
	}
	if m.ToolName != "" {
		b = append(b, `,"toolName":`...)
		b = appendString(b, m.ToolName)
	}
	if m.IsError {
		b = append(b, `,"isError":true`...)
	}
	if len(m.Details) > 0 {
		b = append(b, `,"details":`...)
		if b, ok = appendRaw(b, m.Details); !ok {
			return b, false
		}
	}
	if len(m.Custom) > 0 {
		b = append(b, `,"custom":`...)
		if b, ok = appendRaw(b, m.Custom); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

func decodeMessage(m *llm.Message, d *decoder) bool {
	return d.object(func(k []byte) int {
		switch string(k) {
		case "role":
			return field(0, d.strAs(&m.Role, llm.RoleUser, llm.RoleAssistant, llm.RoleToolResult))
		case "content":
			return field(1, slice(d, &m.Content, decodeContent))
		case "timestamp":
			return field(2, d.int64(&m.Timestamp))
		case "api":
			return field(3, d.str(&m.API))
		case "provider":
			return field(4, d.str(&m.Provider))
		case "model":
			return field(5, d.str(&m.Model))
		case "responseId":
			return field(6, d.str(&m.ResponseID))
		case "usage":
			return field(7, decodeUsage(d, &m.Usage))
		case "stopReason":
			return field(8, decodeStopReason(d, &m.StopReason))
		case "errorMessage":
			return field(9, d.str(&m.ErrorMessage))
		case "toolCallId":
			return field(10, d.str(&m.ToolCallID))
		case "toolName":
			return field(11, d.str(&m.ToolName))
		case "isError":
			return field(12, d.bool(&m.IsError))
		case "details":
			return field(13, d.raw(&m.Details))
		case "custom":
			return field(14, d.raw(&m.Custom))
		}
		return -1
	})
}

func decodeStopReason(d *decoder, dst *llm.StopReason) bool {
	s := string(*dst)
	if !d.strAs(&s, string(llm.StopReasonStop), string(llm.StopReasonToolUse), string(llm.StopReasonLength),
		string(llm.StopReasonError), string(llm.StopReasonAborted)) {
		return false
	}
	*dst = llm.StopReason(s)
	return true
}

func appendMessages(b []byte, ms []llm.Message) ([]byte, bool) {
	if ms == nil {
		return append(b, "null"...), true
	}
	b = append(b, '[')
	for i := range ms {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = appendMessage(b, &ms[i]); !ok {
			return b, false
		}
	}
	return append(b, ']'), true
}

// ---- im ----

func (s *Scene) appendJSON(b []byte) []byte {
	b = append(b, `{"type":`...)
	b = appendString(b, s.Type)
	b = append(b, `,"id":`...)
	b = appendString(b, s.ID)
	if s.Name != "" {
		b = append(b, `,"name":`...)
		b = appendString(b, s.Name)
	}
	return append(b, '}')
}

func (s *Scene) decodeJSON(d *decoder) bool {
	return d.object(func(k []byte) int {
		switch string(k) {
		case "type":
			return field(0, d.strAs(&s.Type, ScopePrivate, ScopeGroup, ScopeChannel))
		case "id":
			return field(1, d.str(&s.ID))
		case "name":
			return field(2, d.str(&s.Name))
		}
		return -1
	})
}

func (s *Sender) appendJSON(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, s.ID)
	if s.Name != "" {
		b = append(b, `,"name":`...)
		b = appendString(b, s.Name)
	}
	if len(s.Roles) > 0 {
		b = append(b, `,"roles":`...)
		b = appendStrings(b, s.Roles)
	}
	return append(b, '}')
}

func (s *Sender) decodeJSON(d *decoder) bool {
	return d.object(func(k []byte) int {
		switch string(k) {
		case "id":
			return field(0, d.str(&s.ID))
		case "name":
			return field(1, d.str(&s.Name))
		case "roles":
			return field(2, d.strings(&s.Roles))
		}
		return -1
	})
}

func appendSegments(b []byte, ss Segments) ([]byte, bool) {
	if ss == nil {
		return append(b, "null"...), true
	}
	b = append(b, '[')
	for i := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"type":`...)
		b = appendString(b, ss[i].Type)
		b = append(b, `,"data":`...)
		var ok bool
		if b, ok = appendMap(b, ss[i].Data, 0); !ok {
			return b, false
		}
		b = append(b, '}')
	}
	return append(b, ']'), true
}

func decodeSegment(s *Segment, d *decoder) bool {
	return d.object(func(k []byte) int {
		switch string(k) {
		case "type":
			return field(0, d.strAs(&s.Type, SegText, SegAt, SegImage, SegReply))
		case "data":
			return field(1, d.mapAny(&s.Data))
		}
		return -1
	})
}

func decodeSegments(d *decoder, dst *Segments) bool {
	s := []Segment(*dst)
	ok := slice(d, &s, decodeSegment)
	*dst = s
	return ok
}

func (m *IMMessage) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"platform":`...)
	b = appendString(b, m.Platform)
	b = append(b, `,"bot":`...)
	b = appendString(b, m.Bot)
	b = append(b, `,"messageId":`...)
	b = appendString(b, m.MessageID)
	b = append(b, `,"scene":`...)
	b = m.Scene.appendJSON(b)
	b = append(b, `,"sender":`...)
	b = m.Sender.appendJSON(b)
	b = append(b, `,"content":`...)
	b, ok := appendSegments(b, m.Content)
	if m.Time != 0 {
		b = append(b, `,"time":`...)
		b = strconv.AppendInt(b, m.Time, 10)
	}
	if m.MentionsBot {
		b = append(b, `,"mentionsBot":true`...)
	}
	return append(b, '}'), ok
}

func (m *IMMessage) decodeJSON(d *decoder) bool {
	return d.object(func(k []byte) int {
		switch string(k) {
		case "platform":
			return field(0, d.str(&m.Platform))
		case "bot":
			return field(1, d.str(&m.Bot))
		case "messageId":
			return field(2, d.str(&m.MessageID))
		case "scene":
			return field(3, m.Scene.decodeJSON(d))
		case "sender":
			return field(4, m.Sender.decodeJSON(d))
		case "content":
			return field(5, decodeSegments(d, &m.Content))
		case "time":
			return field(6, d.int64(&m.Time))
		case "mentionsBot":
			return field(7, d.bool(&m.MentionsBot))
		}
		return -1
	})
}

func (o *Outbound) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"outId":`...)
	b = appendString(b, o.OutID)
	if o.Turn != "" {
		b = append(b, `,"turn":`...)
		b = appendString(b, o.Turn)
	}
	b = append(b, `,"part":`...)
	b = strconv.AppendInt(b, int64(o.Part), 10)
	b = append(b, `,"platform":`...)
	b = appendString(b, o.Platform)
	b = append(b, `,"bot":`...)
	b = appendString(b, o.Bot)
	b = append(b, `,"scene":`...)
	b = o.Scene.appendJSON(b)
	if o.ReplyTo != "" {
		b = append(b, `,"replyTo":`...)
		b = appendString(b, o.ReplyTo)
	}
	b = append(b, `,"content":`...)
	b, ok := appendSegments(b, o.Content)
	if o.Final {
		b = append(b, `,"final":true`...)
	}
	if o.Fresh {
		b = append(b, `,"fresh":true`...)
	}
	return append(b, '}'), ok
}

func (o *Outbound) decodeJSON(d *decoder) bool {
	return d.object(func(k []byte) int {
		switch string(k) {
		case "outId":
			return field(0, d.str(&o.OutID))
		case "turn":
			return field(1, d.str(&o.Turn))
		case "part":
			return field(2, d.int(&o.Part))
		case "platform":
			return field(3, d.str(&o.Platform))
		case "bot":
			return field(4, d.str(&o.Bot))
		case "scene":
			return field(5, o.Scene.decodeJSON(d))
		case "replyTo":
			return field(6, d.str(&o.ReplyTo))
		case "content":
			return field(7, decodeSegments(d, &o.Content))
		case "final":
			return field(8, d.bool(&o.Final))
		case "fresh":
			return field(9, d.bool(&o.Fresh))
		}
		return -1
	})
}

func (r *Receipt) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"outId":`...)
	b = appendString(b, r.OutID)
	if r.Turn != "" {
		b = append(b, `,"turn":`...)
		b = appendString(b, r.Turn)
	}
	b = append(b, `,"platform":`...)
	b = appendString(b, r.Platform)
	b = append(b, `,"bot":`...)
	b = appendString(b, r.Bot)
	b = append(b, `,"scene":`...)
	b = r.Scene.appendJSON(b)
	b = append(b, `,"messageId":`...)
	b = appendString(b, r.MessageID)
	b = append(b, `,"time":`...)
	b = strconv.AppendInt(b, r.Time, 10)
	ok := true
	if len(r.Content) > 0 {
		b = append(b, `,"content":`...)
		b, ok = appendSegments(b, r.Content)
	}
	b = append(b, `,"sender":`...)
	b = r.Sender.appendJSON(b)
	return append(b, '}'), ok
}

func (r *Receipt) decodeJSON(d *decoder) bool {
	return d.object(func(k []byte) int {
		switch string(k) {
		case "outId":
			return field(0, d.str(&r.OutID))
		case "turn":
			return field(1, d.str(&r.Turn))
		case "platform":
			return field(2, d.str(&r.Platform))
		case "bot":
			return field(3, d.str(&r.Bot))
		case "scene":
			return field(4, r.Scene.decodeJSON(d))
		case "messageId":
			return field(5, d.str(&r.MessageID))
		case "time":
			return field(6, d.int64(&r.Time))
		case "content":
			return field(7, decodeSegments(d, &r.Content))
		case "sender":
			return field(8, r.Sender.decodeJSON(d))
		}
		return -1
	})
}

// ---- inbox ----

func (u *UserMessage) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"message":`...)
	b, ok := u.Message.appendJSON(b)
	if u.Text != "" {
		b = append(b, `,"text":`...)
		b = appendString(b, u.Text)
	}
	if u.IMSeq != 0 {
		b = append(b, `,"imSeq":`...)
		b = strconv.AppendUint(b, u.IMSeq, 10)
	}
	return append(b, '}'), ok
}

func (u *UserMessage) decodeJSON(d *decoder) bool {
	return d.object(func(k []byte) int {
		switch string(k) {
		case "message":
			return field(0, u.Message.decodeJSON(d))
		case "text":
			return field(1, d.str(&u.Text))
		case "imSeq":
			return field(2, d.uint64(&u.IMSeq))
		}
		return -1
	})
}

func (l *Listen) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"message":`...)
	b, ok := l.Message.appendJSON(b)
	if l.IMSeq != 0 {
		b = append(b, `,"imSeq":`...)
		b = strconv.AppendUint(b, l.IMSeq, 10)
	}
	return append(b, '}'), ok
}

func (l *Listen) decodeJSON(d *decoder) bool {
	return d.object(func(k []byte) int {
		switch string(k) {
		case "message":
			return field(0, l.Message.decodeJSON(d))
		case "imSeq":
			return field(1, d.uint64(&l.IMSeq))
		}
		return -1
	})
}

// ---- agent ----

func appendInboxRef(b []byte, r *InboxRef) []byte {
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, r.Seq, 10)
	if r.ID != "" {
		b = append(b, `,"id":`...)
		b = appendString(b, r.ID)
	}
	if r.Type != "" {
		b = append(b, `,"type":`...)
		b = appendString(b, r.Type)
	}
	return append(b, '}')
}

func decodeInboxRef(r *InboxRef, d *decoder) bool {
	return d.object(func(k []byte) int {
		switch string(k) {
		case "seq":
			return field(0, d.uint64(&r.Seq))
		case "id":
			return field(1, d.str(&r.ID))
		case "type":
			return field(2, d.strAs(&r.Type, TypeUserMessage))
		}
		return -1
	})
}

func (t *TurnStarted) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"turn":`...)
	b = appendString(b, t.Turn)
	b = append(b, `,"trigger":`...)
	b = appendInboxRef(b, &t.Trigger)
	if len(t.Merged) > 0 {
		b = append(b, `,"merged":[`...)
		for i := range t.Merged {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendInboxRef(b, &t.Merged[i])
		}
		b = append(b, ']')
	}
	b = append(b, `,"model":`...)
	o := beginObj(b)
	if t.Model.Provider != "" {
		b = append(b, `,"provider":`...)
		b = appendString(b, t.Model.Provider)
	}
	b = append(b, `,"id":`...)
	b = appendString(b, t.Model.ID)
	if t.Model.API != "" {
		b = append(b, `,"api":`...)
		b = appendString(b, t.Model.API)
	}
	b = o.end(b)
	b = append(b, `,"contextSeq":`...)
	b = strconv.AppendUint(b, t.ContextSeq, 10)
	b = append(b, `,"input":`...)
	b, ok := appendMessages(b, t.Input)
	if t.Worker != "" {
		b = append(b, `,"worker":`...)
		b = appendString(b, t.Worker)
	}
	if t.LeaseRevision != 0 {
		b = append(b, `,"leaseRevision":`...)
		b = strconv.AppendUint(b, t.LeaseRevision, 10)
	}
	if t.Parent != "" {
		b = append(b, `,"parent":`...)
		b = appendString(b, t.Parent)
	}
	if t.Resumed != 0 {
		b = append(b, `,"resumed":`...)
		b = strconv.AppendInt(b, int64(t.Resumed), 10)
	}
	if ok && len(t.Steps) > 0 {
		b = append(b, `,"steps":[`...)
		for i := range t.Steps {
			if i > 0 {
				b = append(b, ',')
			}
			if b, ok = t.Steps[i].appendJSON(b); !ok {
				return b, false
			}
		}
		b = append(b, ']')
	}
	return append(b, '}'), ok
}

func (t *TurnStarted) decodeJSON(d *decoder) bool {
	return d.object(func(k []byte) int {
		switch string(k) {
		case "turn":
			return field(0, d.str(&t.Turn))
		case "trigger":
			return field(1, decodeInboxRef(&t.Trigger, d))
		case "merged":
			return field(2, slice(d, &t.Merged, decodeInboxRef))
		case "model":
			m := &t.Model
			return field(3, d.object(func(k []byte) int {
				switch string(k) {
				case "provider":
					return field(0, d.str(&m.Provider))
				case "id":
					return field(1, d.str(&m.ID))
				case "api":
					return field(2, d.str(&m.API))
				}
				return -1
			}))
		case "contextSeq":
			return field(4, d.uint64(&t.ContextSeq))
		case "input":
			return field(5, slice(d, &t.Input, decodeMessage))
		case "worker":
			return field(6, d.str(&t.Worker))
		case "leaseRevision":
			return field(7, d.uint64(&t.LeaseRevision))
		case "parent":
			return field(8, d.str(&t.Parent))
		case "resumed":
			return field(9, d.int(&t.Resumed))
		case "steps":
			return field(10, slice(d, &t.Steps, (*MessageEnd).decodeJSON))
		}
		return -1
	})
}

func (m *MessageEnd) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"index":`...)
	b = strconv.AppendInt(b, int64(m.Index), 10)
	b = append(b, `,"message":`...)
	b, ok := appendMessage(b, &m.Message)
	return append(b, '}'), ok
}

func (m *MessageEnd) decodeJSON(d *decoder) bool {
	return d.object(func(k []byte) int {
		switch string(k) {
		case "index":
			return field(0, d.int(&m.Index))
		case "message":
			return field(1, decodeMessage(&m.Message, d))
		}
		return -1
	})
}

func (t *ToolCallRequested) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"callId":`...)
	b = appendString(b, t.CallID)
	b = append(b, `,"tool":`...)
	b = appendString(b, t.Tool)
	b = append(b, `,"args":`...)
	b, ok := appendMap(b, t.Args, 0)
	if t.Idempotent {
		b = append(b, `,"idempotent":true`...)
	}
	if t.Seq != 0 {
		b = append(b, `,"seq":`...)
		b = strconv.AppendUint(b, t.Seq, 10)
	}
	return append(b, '}'), ok
}

func (t *ToolCallRequested) decodeJSON(d *decoder) bool {
	return d.object(func(k []byte) int {
		switch string(k) {
		case "callId":
			return field(0, d.str(&t.CallID))
		case "tool":
			return field(1, d.str(&t.Tool))
		case "args":
			return field(2, d.mapAny(&t.Args))
		case "idempotent":
			return field(3, d.bool(&t.Idempotent))
		case "seq":
			return field(4, d.uint64(&t.Seq))
		}
		return -1
	})
}

func (t *ToolResultRecorded) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"result":`...)
	b, ok := t.Result.appendJSON(b)
	if t.Seq != 0 {
		b = append(b, `,"seq":`...)
		b = strconv.AppendUint(b, t.Seq, 10)
	}
	return append(b, '}'), ok
}

func (t *ToolResultRecorded) decodeJSON(d *decoder) bool {
	return d.object(func(k []byte) int {
		switch string(k) {
		case "result":
			return field(0, t.Result.decodeJSON(d))
		case "seq":
			return field(1, d.uint64(&t.Seq))
		}
		return -1
	})
}

func (o *OutboundPublished) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"outId":`...)
	b = appendString(b, o.OutID)
	b = append(b, `,"part":`...)
	b = strconv.AppendInt(b, int64(o.Part), 10)
	if o.Seq != 0 {
		b = append(b, `,"seq":`...)
		b = strconv.AppendUint(b, o.Seq, 10)
	}
	return append(b, '}'), true
}

func (o *OutboundPublished) decodeJSON(d *decoder) bool {
	return d.object(func(k []byte) int {
		switch string(k) {
		case "outId":
			return field(0, d.str(&o.OutID))
		case "part":
			return field(1, d.int(&o.Part))
		case "seq":
			return field(2, d.uint64(&o.Seq))
		}
		return -1
	})
}

func (t *TurnCommitted) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"firstSeq":`...)
	b = strconv.AppendUint(b, t.FirstSeq, 10)
	b = append(b, `,"lastSeq":`...)
	b = strconv.AppendUint(b, t.LastSeq, 10)
	b = append(b, `,"messages":`...)
	b = strconv.AppendInt(b, int64(t.Messages), 10)
	ok := true
	if t.Usage != nil {
		b = append(b, `,"usage":`...)
		if b, ok = appendUsage(b, t.Usage); !ok {
			return b, false
		}
	}
	if t.StopReason != "" {
		b = append(b, `,"stopReason":`...)
		b = appendString(b, string(t.StopReason))
	}
	if len(t.Tail) > 0 {
		b = append(b, `,"tail":[`...)
		for i := range t.Tail {
			if i > 0 {
				b = append(b, ',')
			}
			if b, ok = t.Tail[i].appendJSON(b); !ok {
				return b, false
			}
		}
		b = append(b, ']')
	}
	if t.Started != nil {
		b = append(b, `,"started":`...)
		if b, ok = t.Started.appendJSON(b); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

func (t *TurnCommitted) decodeJSON(d *decoder) bool {
	return d.object(func(k []byte) int {
		switch string(k) {
		case "firstSeq":
			return field(0, d.uint64(&t.FirstSeq))
		case "lastSeq":
			return field(1, d.uint64(&t.LastSeq))
		case "messages":
			return field(2, d.int(&t.Messages))
		case "usage":
			return field(3, decodeUsage(d, &t.Usage))
		case "stopReason":
			return field(4, decodeStopReason(d, &t.StopReason))
		case "tail":
			return field(5, slice(d, &t.Tail, (*MessageEnd).decodeJSON))
		case "started":
			if d.peek() == 'n' {
				return field(6, d.lit("null"))
			}
			t.Started = new(TurnStarted)
			return field(6, t.Started.decodeJSON(d))
		}
		return -1
	})
}

func (t *TurnFailed) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"reason":`...)
	b = appendString(b, t.Reason)
	if t.Error != "" {
		b = append(b, `,"error":`...)
		b = appendString(b, t.Error)
	}
	if t.Retryable {
		b = append(b, `,"retryable":true`...)
	}
	return append(b, '}'), true
}

func (t *TurnFailed) decodeJSON(d *decoder) bool {
	return d.object(func(k []byte) int {
		switch string(k) {
		case "reason":
			return field(0, d.str(&t.Reason))
		case "error":
			return field(1, d.str(&t.Error))
		case "retryable":
			return field(2, d.bool(&t.Retryable))
		}
		return -1
	})
}

func (c *CtxMessages) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"messages":`...)
	b, ok := appendMessages(b, c.Messages)
	return append(b, '}'), ok
}

func (c *CtxMessages) decodeJSON(d *decoder) bool {
	return d.object(func(k []byte) int {
		if string(k) == "messages" {
			return field(0, slice(d, &c.Messages, decodeMessage))
		}
		return -1
	})
}

func (l *LiveDelta) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"kind":`...)
	b = appendString(b, l.Kind)
	b = append(b, `,"contentIndex":`...)
	b = strconv.AppendInt(b, int64(l.ContentIndex), 10)
	if l.Delta != "" {
		b = append(b, `,"delta":`...)
		b = appendString(b, l.Delta)
	}
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, l.Seq, 10)
	if l.Message != 0 {
		b = append(b, `,"message":`...)
		b = strconv.AppendInt(b, int64(l.Message), 10)
	}
	return append(b, '}'), true
}

func (l *LiveDelta) decodeJSON(d *decoder) bool {
	return d.object(func(k []byte) int {
		switch string(k) {
		case "kind":
			return field(0, d.str(&l.Kind))
		case "contentIndex":
			return field(1, d.int(&l.ContentIndex))
		case "delta":
			return field(2, d.str(&l.Delta))
		case "seq":
			return field(3, d.uint64(&l.Seq))
		case "message":
			return field(4, d.int(&l.Message))
		}
		return -1
	})
}

// ---- tools ----

func (k *SessionKey) appendJSON(b []byte) []byte {
	b = append(b, `{"platform":`...)
	b = appendString(b, k.Platform)
	b = append(b, `,"bot":`...)
	b = appendString(b, k.Bot)
	b = append(b, `,"scope":`...)
	b = appendString(b, k.Scope)
	b = append(b, `,"scene":`...)
	b = appendString(b, k.Scene)
	return append(b, '}')
}

func (k *SessionKey) decodeJSON(d *decoder) bool {
	return d.object(func(key []byte) int {
		switch string(key) {
		case "platform":
			return field(0, d.str(&k.Platform))
		case "bot":
			return field(1, d.str(&k.Bot))
		case "scope":
			return field(2, d.strAs(&k.Scope, ScopePrivate, ScopeGroup, ScopeChannel))
		case "scene":
			return field(3, d.str(&k.Scene))
		}
		return -1
	})
}

func (c *Caller) appendJSON(b []byte) []byte {
	b = append(b, `{"platform":`...)
	b = appendString(b, c.Platform)
	if c.Bot != "" {
		b = append(b, `,"bot":`...)
		b = appendString(b, c.Bot)
	}
	b = append(b, `,"scope":`...)
	b = appendString(b, c.Scope)
	if c.SenderID != "" {
		b = append(b, `,"senderId":`...)
		b = appendString(b, c.SenderID)
	}
	if len(c.Roles) > 0 {
		b = append(b, `,"roles":`...)
		b = appendStrings(b, c.Roles)
	}
	return append(b, '}')
}

func (c *Caller) decodeJSON(d *decoder) bool {
	return d.object(func(k []byte) int {
		switch string(k) {
		case "platform":
			return field(0, d.str(&c.Platform))
		case "bot":
			return field(1, d.str(&c.Bot))
		case "scope":
			return field(2, d.strAs(&c.Scope, ScopePrivate, ScopeGroup, ScopeChannel))
		case "senderId":
			return field(3, d.str(&c.SenderID))
		case "roles":
			return field(4, d.strings(&c.Roles))
		}
		return -1
	})
}

func (c *ToolCall) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"callId":`...)
	b = appendString(b, c.CallID)
	b = append(b, `,"tool":`...)
	b = appendString(b, c.Tool)
	b = append(b, `,"args":`...)
	b, ok := appendMap(b, c.Args, 0)
	b = append(b, `,"sessionKey":`...)
	b = c.SessionKey.appendJSON(b)
	if c.Turn != "" {
		b = append(b, `,"turn":`...)
		b = appendString(b, c.Turn)
	}
	b = append(b, `,"caller":`...)
	b = c.Caller.appendJSON(b)
	if c.Deadline != 0 {
		b = append(b, `,"deadline":`...)
		b = strconv.AppendInt(b, c.Deadline, 10)
	}
	if c.Idempotent {
		b = append(b, `,"idempotent":true`...)
	}
	if c.Fresh {
		b = append(b, `,"fresh":true`...)
	}
	if c.Model != "" {
		b = append(b, `,"model":`...)
		b = appendString(b, c.Model)
	}
	if c.ModelSize != "" {
		b = append(b, `,"modelSize":`...)
		b = appendString(b, c.ModelSize)
	}
	if c.SkillChars != 0 {
		b = append(b, `,"skillChars":`...)
		b = strconv.AppendInt(b, int64(c.SkillChars), 10)
	}
	if len(c.Step) > 0 {
		b = append(b, `,"step":`...)
		var ok2 bool
		if b, ok2 = appendRaw(b, c.Step); !ok2 {
			return b, false
		}
	}
	return append(b, '}'), ok
}

func (c *ToolCall) decodeJSON(d *decoder) bool {
	return d.object(func(k []byte) int {
		switch string(k) {
		case "callId":
			return field(0, d.str(&c.CallID))
		case "tool":
			return field(1, d.str(&c.Tool))
		case "args":
			return field(2, d.mapAny(&c.Args))
		case "sessionKey":
			return field(3, c.SessionKey.decodeJSON(d))
		case "turn":
			return field(4, d.str(&c.Turn))
		case "caller":
			return field(5, c.Caller.decodeJSON(d))
		case "deadline":
			return field(6, d.int64(&c.Deadline))
		case "idempotent":
			return field(7, d.bool(&c.Idempotent))
		case "fresh":
			return field(8, d.bool(&c.Fresh))
		case "model":
			return field(9, d.str(&c.Model))
		case "modelSize":
			return field(10, d.str(&c.ModelSize))
		case "skillChars":
			return field(11, d.int(&c.SkillChars))
		case "step":
			return field(12, d.raw(&c.Step))
		}
		return -1
	})
}

func (r *ToolResult) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"callId":`...)
	b = appendString(b, r.CallID)
	b = append(b, `,"tool":`...)
	b = appendString(b, r.Tool)
	b = append(b, `,"content":`...)
	b, ok := appendContents(b, r.Content)
	if !ok {
		return b, false
	}
	if r.IsError {
		b = append(b, `,"isError":true`...)
	}
	if len(r.Details) > 0 {
		b = append(b, `,"details":`...)
		if b, ok = appendRaw(b, r.Details); !ok {
			return b, false
		}
	}
	if r.Worker != "" {
		b = append(b, `,"worker":`...)
		b = appendString(b, r.Worker)
	}
	if r.DurationMs != 0 {
		b = append(b, `,"durationMs":`...)
		b = strconv.AppendInt(b, r.DurationMs, 10)
	}
	if len(r.Step) > 0 {
		b = append(b, `,"step":`...)
		if b, ok = appendRaw(b, r.Step); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

func (r *ToolResult) decodeJSON(d *decoder) bool {
	return d.object(func(k []byte) int {
		switch string(k) {
		case "callId":
			return field(0, d.str(&r.CallID))
		case "tool":
			return field(1, d.str(&r.Tool))
		case "content":
			return field(2, slice(d, &r.Content, decodeContent))
		case "isError":
			return field(3, d.bool(&r.IsError))
		case "details":
			return field(4, d.raw(&r.Details))
		case "worker":
			return field(5, d.str(&r.Worker))
		case "durationMs":
			return field(6, d.int64(&r.DurationMs))
		case "step":
			return field(7, d.raw(&r.Step))
		}
		return -1
	})
}

// ---- layout check ----

// fastLayouts lists, per struct the fast codec covers, its fields as "Name type `tag`". The
// codec is written for exactly these; a struct that changed (a field added, renamed,
// retyped or retagged) turns the codec off until fastcodec.go is updated to match.
var fastLayouts = map[reflect.Type]string{
	reflect.TypeFor[Meta]():               "Type string `json:\"type\"`; V int `json:\"v\"`; ID string `json:\"id\"`; Time int64 `json:\"time\"`; Session string `json:\"session,omitempty\"`; Turn string `json:\"turn,omitempty\"`; Trace string `json:\"trace,omitempty\"`",
	reflect.TypeFor[Scene]():              "Type string `json:\"type\"`; ID string `json:\"id\"`; Name string `json:\"name,omitempty\"`",
	reflect.TypeFor[Sender]():             "ID string `json:\"id\"`; Name string `json:\"name,omitempty\"`; Roles []string `json:\"roles,omitempty\"`",
	reflect.TypeFor[Segment]():            "Type string `json:\"type\"`; Data map[string]interface {} `json:\"data\"`",
	reflect.TypeFor[IMMessage]():          "Platform string `json:\"platform\"`; Bot string `json:\"bot\"`; MessageID string `json:\"messageId\"`; Scene events.Scene `json:\"scene\"`; Sender events.Sender `json:\"sender\"`; Content events.Segments `json:\"content\"`; Time int64 `json:\"time,omitempty\"`; MentionsBot bool `json:\"mentionsBot,omitempty\"`",
	reflect.TypeFor[Outbound]():           "OutID string `json:\"outId\"`; Turn string `json:\"turn,omitempty\"`; Part int `json:\"part\"`; Platform string `json:\"platform\"`; Bot string `json:\"bot\"`; Scene events.Scene `json:\"scene\"`; ReplyTo string `json:\"replyTo,omitempty\"`; Content events.Segments `json:\"content\"`; Final bool `json:\"final,omitempty\"`; Fresh bool `json:\"fresh,omitempty\"`",
	reflect.TypeFor[Receipt]():            "OutID string `json:\"outId\"`; Turn string `json:\"turn,omitempty\"`; Platform string `json:\"platform\"`; Bot string `json:\"bot\"`; Scene events.Scene `json:\"scene\"`; MessageID string `json:\"messageId\"`; Time int64 `json:\"time\"`; Content events.Segments `json:\"content,omitempty\"`; Sender events.Sender `json:\"sender\"`",
	reflect.TypeFor[UserMessage]():        "Message events.IMMessage `json:\"message\"`; Text string `json:\"text,omitempty\"`; IMSeq uint64 `json:\"imSeq,omitempty\"`",
	reflect.TypeFor[Listen]():             "Message events.IMMessage `json:\"message\"`; IMSeq uint64 `json:\"imSeq,omitempty\"`",
	reflect.TypeFor[InboxRef]():           "Seq uint64 `json:\"seq\"`; ID string `json:\"id,omitempty\"`; Type string `json:\"type,omitempty\"`",
	reflect.TypeFor[ModelRef]():           "Provider string `json:\"provider,omitempty\"`; ID string `json:\"id\"`; API string `json:\"api,omitempty\"`",
	reflect.TypeFor[TurnStarted]():        "Turn string `json:\"turn\"`; Trigger events.InboxRef `json:\"trigger\"`; Merged []events.InboxRef `json:\"merged,omitempty\"`; Model events.ModelRef `json:\"model\"`; ContextSeq uint64 `json:\"contextSeq\"`; Input []llm.Message `json:\"input\"`; Worker string `json:\"worker,omitempty\"`; LeaseRevision uint64 `json:\"leaseRevision,omitempty\"`; Parent string `json:\"parent,omitempty\"`; Resumed int `json:\"resumed,omitempty\"`; Steps []events.MessageEnd `json:\"steps,omitempty\"`",
	reflect.TypeFor[MessageEnd]():         "Index int `json:\"index\"`; Message llm.Message `json:\"message\"`",
	reflect.TypeFor[ToolCallRequested]():  "CallID string `json:\"callId\"`; Tool string `json:\"tool\"`; Args map[string]interface {} `json:\"args\"`; Idempotent bool `json:\"idempotent,omitempty\"`; Seq uint64 `json:\"seq,omitempty\"`",
	reflect.TypeFor[ToolResultRecorded](): "Result events.ToolResult `json:\"result\"`; Seq uint64 `json:\"seq,omitempty\"`",
	reflect.TypeFor[OutboundPublished]():  "OutID string `json:\"outId\"`; Part int `json:\"part\"`; Seq uint64 `json:\"seq,omitempty\"`",
	reflect.TypeFor[TurnCommitted]():      "FirstSeq uint64 `json:\"firstSeq\"`; LastSeq uint64 `json:\"lastSeq\"`; Messages int `json:\"messages\"`; Usage *llm.Usage `json:\"usage,omitempty\"`; StopReason llm.StopReason `json:\"stopReason,omitempty\"`; Tail []events.MessageEnd `json:\"tail,omitempty\"`; Started *events.TurnStarted `json:\"started,omitempty\"`",
	reflect.TypeFor[TurnFailed]():         "Reason string `json:\"reason\"`; Error string `json:\"error,omitempty\"`; Retryable bool `json:\"retryable,omitempty\"`",
	reflect.TypeFor[CtxMessages]():        "Messages []llm.Message `json:\"messages\"`",
	reflect.TypeFor[LiveDelta]():          "Kind string `json:\"kind\"`; ContentIndex int `json:\"contentIndex\"`; Delta string `json:\"delta,omitempty\"`; Seq uint64 `json:\"seq\"`; Message int `json:\"message,omitempty\"`",
	reflect.TypeFor[SessionKey]():         "Platform string `json:\"platform\"`; Bot string `json:\"bot\"`; Scope string `json:\"scope\"`; Scene string `json:\"scene\"`",
	reflect.TypeFor[Caller]():             "Platform string `json:\"platform\"`; Bot string `json:\"bot,omitempty\"`; Scope string `json:\"scope\"`; SenderID string `json:\"senderId,omitempty\"`; Roles []string `json:\"roles,omitempty\"`",
	reflect.TypeFor[ToolCall]():           "CallID string `json:\"callId\"`; Tool string `json:\"tool\"`; Args map[string]interface {} `json:\"args\"`; SessionKey events.SessionKey `json:\"sessionKey\"`; Turn string `json:\"turn,omitempty\"`; Caller events.Caller `json:\"caller\"`; Deadline int64 `json:\"deadline,omitempty\"`; Idempotent bool `json:\"idempotent,omitempty\"`; Fresh bool `json:\"fresh,omitempty\"`; Model string `json:\"model,omitempty\"`; ModelSize string `json:\"modelSize,omitempty\"`; SkillChars int `json:\"skillChars,omitempty\"`; Step json.RawMessage `json:\"step,omitempty\"`",
	reflect.TypeFor[ToolResult]():         "CallID string `json:\"callId\"`; Tool string `json:\"tool\"`; Content []llm.Content `json:\"content\"`; IsError bool `json:\"isError,omitempty\"`; Details json.RawMessage `json:\"details,omitempty\"`; Worker string `json:\"worker,omitempty\"`; DurationMs int64 `json:\"durationMs,omitempty\"`; Step json.RawMessage `json:\"step,omitempty\"`",
	reflect.TypeFor[llm.Usage]():          "Input int `json:\"input\"`; Output int `json:\"output\"`; CacheRead int `json:\"cacheRead\"`; CacheWrite int `json:\"cacheWrite\"`; TotalTokens int `json:\"totalTokens\"`; Cost llm.UsageCost `json:\"cost\"`",
	reflect.TypeFor[llm.UsageCost]():      "Input float64 `json:\"input\"`; Output float64 `json:\"output\"`; CacheRead float64 `json:\"cacheRead\"`; CacheWrite float64 `json:\"cacheWrite\"`; Total float64 `json:\"total\"`",
	reflect.TypeFor[llm.Content]():        "Type string `json:\"type\"`; Text string `json:\"text,omitempty\"`; TextSignature string `json:\"textSignature,omitempty\"`; Thinking string `json:\"thinking,omitempty\"`; ThinkingSignature string `json:\"thinkingSignature,omitempty\"`; Redacted bool `json:\"redacted,omitempty\"`; Data string `json:\"data,omitempty\"`; MimeType string `json:\"mimeType,omitempty\"`; ID string `json:\"id,omitempty\"`; Name string `json:\"name,omitempty\"`; Arguments map[string]interface {} `json:\"arguments,omitempty\"`; ThoughtSignature string `json:\"thoughtSignature,omitempty\"`",
	reflect.TypeFor[llm.Message]():        "Role string `json:\"role\"`; Content []llm.Content `json:\"content\"`; Timestamp int64 `json:\"timestamp\"`; API string `json:\"api,omitempty\"`; Provider string `json:\"provider,omitempty\"`; Model string `json:\"model,omitempty\"`; ResponseID string `json:\"responseId,omitempty\"`; Usage *llm.Usage `json:\"usage,omitempty\"`; StopReason llm.StopReason `json:\"stopReason,omitempty\"`; ErrorMessage string `json:\"errorMessage,omitempty\"`; ToolCallID string `json:\"toolCallId,omitempty\"`; ToolName string `json:\"toolName,omitempty\"`; IsError bool `json:\"isError,omitempty\"`; Details json.RawMessage `json:\"details,omitempty\"`; Custom json.RawMessage `json:\"custom,omitempty\"`",
}

// layoutOf describes t's fields as fastLayouts does.
func layoutOf(t reflect.Type) string {
	var b strings.Builder
	for i := range t.NumField() {
		f := t.Field(i)
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s %s `%s`", f.Name, f.Type, f.Tag)
	}
	return b.String()
}

// checkFastLayouts reports the first covered struct whose fields are not those the fast codec
// was written for, and whether JSON behaviour the codec copies (llm.Content's MarshalJSON, the
// only custom marshaller among the covered types) is still in place.
func checkFastLayouts() error {
	for t, want := range fastLayouts {
		if got := layoutOf(t); got != want {
			return fmt.Errorf("fast codec: %s changed:\n got %s\nwant %s", t, got, want)
		}
	}
	for _, c := range []llm.Content{llm.ToolCall("c", "t", nil), llm.ToolCall("c", "t", map[string]any{"a": 1.5}), llm.Text("<x>")} {
		want, err := json.Marshal(c)
		if err != nil {
			return err
		}
		if got, _ := appendContent(nil, &c, 0); string(got) != string(want) {
			return fmt.Errorf("fast codec: llm.Content JSON changed:\n got %s\nwant %s", got, want)
		}
	}
	return nil
}
