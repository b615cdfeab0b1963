package onebot

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Wire shapes of OneBot v11 (the standard's event and API formats).

// event is an event pushed by the implementation (post_type message, notice, request,
// meta_event). Ids are numbers on the wire; json.Number keeps them exact.
type event struct {
	Time        int64           `json:"time"`
	SelfID      json.Number     `json:"self_id"`
	PostType    string          `json:"post_type"`
	MessageType string          `json:"message_type"` // private | group
	SubType     string          `json:"sub_type"`
	MessageID   json.Number     `json:"message_id"`
	UserID      json.Number     `json:"user_id"`
	GroupID     json.Number     `json:"group_id"`
	Message     json.RawMessage `json:"message"` // array of segments, or a CQ-code string
	RawMessage  string          `json:"raw_message"`
	Sender      struct {
		UserID   json.Number `json:"user_id"`
		Nickname string      `json:"nickname"`
		Card     string      `json:"card"`
		Role     string      `json:"role"` // owner | admin | member (group messages)
	} `json:"sender"`
	MetaEventType string `json:"meta_event_type"`
}

// segment is a OneBot message segment. Data values are strings in the standard, but some
// implementations send numbers; values are kept as JSON values.
type segment struct {
	Type string         `json:"type"`
	Data map[string]any `json:"data"`
}

func (s segment) str(k string) string {
	switch v := s.Data[k].(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case json.Number:
		return v.String()
	}
	return ""
}

// request is an API call: over a WebSocket with an echo, over HTTP as POST /<action>.
type request struct {
	Action string `json:"action"`
	Params any    `json:"params"`
	Echo   string `json:"echo,omitempty"`
}

// response is an API answer (status ok|async|failed, retcode 0 = success).
type response struct {
	Status  string          `json:"status"`
	Retcode int             `json:"retcode"`
	Data    json.RawMessage `json:"data"`
	Msg     string          `json:"msg"`
	Wording string          `json:"wording"`
	Echo    json.RawMessage `json:"echo"`
}

// parseMessage reads an event's message: an array of segments or a CQ-code string.
func parseMessage(raw json.RawMessage) ([]segment, error) {
	raw = json.RawMessage(strings.TrimSpace(string(raw)))
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("message: %w", err)
		}
		return parseCQ(s), nil
	}
	var segs []segment
	d := json.NewDecoder(strings.NewReader(string(raw)))
	d.UseNumber()
	if err := d.Decode(&segs); err != nil {
		return nil, fmt.Errorf("message: %w", err)
	}
	return segs, nil
}

// CQ codes: [CQ:type,key=value,...] inside text; &amp; &#91; &#93; &#44; escape & [ ] , .
var cqUnescape = strings.NewReplacer("&#91;", "[", "&#93;", "]", "&#44;", ",", "&amp;", "&")

func parseCQ(s string) []segment {
	var out []segment
	text := func(t string) {
		if t != "" {
			out = append(out, segment{Type: "text", Data: map[string]any{"text": cqUnescape.Replace(t)}})
		}
	}
	for {
		i := strings.Index(s, "[CQ:")
		if i < 0 {
			text(s)
			return out
		}
		j := strings.IndexByte(s[i:], ']')
		if j < 0 {
			text(s)
			return out
		}
		text(s[:i])
		code := s[i+4 : i+j]
		s = s[i+j+1:]
		fields := strings.Split(code, ",")
		seg := segment{Type: fields[0], Data: map[string]any{}}
		for _, f := range fields[1:] {
			k, v, _ := strings.Cut(f, "=")
			seg.Data[k] = cqUnescape.Replace(v)
		}
		out = append(out, seg)
	}
}
