// Package webhook is the reference IM adapter: platforms (or bridges) POST signed JSON messages
// to agentbus and receive replies as signed JSON POSTs to a callback URL.
//
// Inbound: POST /webhook/{bot} with X-Agentbus-Signature: sha256=<hex HMAC-SHA256 of the raw
// body keyed with the bot's secret>. Outbound: POST to the bot's callback with the same header.
package webhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/agentbus/agentbus/pkg/events"
)

// SignatureHeader carries the HMAC of the raw body.
const SignatureHeader = "X-Agentbus-Signature"

// Sign returns the header value for body under secret.
func Sign(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// ErrBadSignature is returned for a missing or wrong signature.
var ErrBadSignature = errors.New("bad signature")

// Verify checks header against body in constant time.
func Verify(secret string, body []byte, header string) error {
	hexSig, ok := strings.CutPrefix(strings.TrimSpace(header), "sha256=")
	if !ok {
		return fmt.Errorf("%w: want %s: sha256=<hex>", ErrBadSignature, SignatureHeader)
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil {
		return fmt.Errorf("%w: not hex", ErrBadSignature)
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return ErrBadSignature
	}
	return nil
}

// Scene is where a message was said.
type Scene struct {
	Type string `json:"type"` // group | private | channel
	ID   string `json:"id"`
}

// Sender is who said it.
type Sender struct {
	ID    string   `json:"id"`
	Name  string   `json:"name,omitempty"`
	Roles []string `json:"roles,omitempty"` // platform roles, e.g. group_admin, group_owner
}

// Segment is one element of a message, the seed's MessageElement {type, data}.
type Segment = events.Segment

// Inbound is the body of POST /webhook/{bot}.
type Inbound struct {
	ID      string    `json:"id"`
	Scene   Scene     `json:"scene"`
	Sender  Sender    `json:"sender"`
	Content []Segment `json:"content"`
	Time    int64     `json:"time"`
}

// ErrMalformed wraps every reason an inbound body is rejected.
var ErrMalformed = errors.New("malformed webhook message")

// ParseInbound decodes and checks a body. Errors wrap ErrMalformed and name the field.
func ParseInbound(body []byte) (*Inbound, error) {
	var in Inbound
	// Unmarshal accepts exactly what the Decoder below does (one value, then only white
	// space) without copying the body into a decoder's buffer; the Decoder runs only to word
	// the error of a body that fails.
	if json.Unmarshal(body, &in) != nil {
		in = Inbound{}
		dec := json.NewDecoder(bytes.NewReader(body))
		if err := dec.Decode(&in); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		// More reports false before a stray ']' or '}', so look for the end of the input itself.
		if _, err := dec.Token(); err != io.EOF {
			return nil, fmt.Errorf("%w: trailing data after the JSON object", ErrMalformed)
		}
		return nil, fmt.Errorf("%w: not one JSON object", ErrMalformed) // not reached: both accept the same
	}
	var missing []string
	if in.ID == "" {
		missing = append(missing, "id")
	}
	if in.Scene.ID == "" {
		missing = append(missing, "scene.id")
	}
	if in.Sender.ID == "" {
		missing = append(missing, "sender.id")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: missing %s", ErrMalformed, strings.Join(missing, ", "))
	}
	switch in.Scene.Type {
	case "group", "private", "channel":
	default:
		return nil, fmt.Errorf("%w: scene.type %q: want group, private or channel", ErrMalformed, in.Scene.Type)
	}
	if len(in.Content) == 0 {
		return nil, fmt.Errorf("%w: content is empty", ErrMalformed)
	}
	for i, s := range in.Content {
		if s.Type == "" {
			return nil, fmt.Errorf("%w: content[%d].type is empty", ErrMalformed, i)
		}
	}
	return &in, nil
}

// Outbound is the body agentbus POSTs to a bot's callback.
type Outbound struct {
	ID      string    `json:"id"`
	ReplyTo string    `json:"replyTo,omitempty"`
	Bot     string    `json:"bot"`
	Scene   Scene     `json:"scene"`
	Content []Segment `json:"content"`
}
