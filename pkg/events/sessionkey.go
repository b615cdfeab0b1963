package events

import (
	"strconv"
	"strings"
)

// Scopes of a chat scene (the seed's scene_type).
const (
	ScopePrivate = "private"
	ScopeGroup   = "group"
	ScopeChannel = "channel"
)

// ValidScope reports whether s is one of the three scopes.
func ValidScope(s string) bool {
	return s == ScopePrivate || s == ScopeGroup || s == ScopeChannel
}

// SessionKey names one conversation: a scene of a bot on a platform. Its string form is the
// seed's session_key "platform:botId:scope:sceneId".
//
// Platform and Bot must not contain ':' (the string form could not be parsed back); Scene may,
// because it is the last field. Scope is private, group or channel.
type SessionKey struct {
	Platform string `json:"platform"`
	Bot      string `json:"bot"`
	Scope    string `json:"scope"`
	Scene    string `json:"scene"`
}

// String returns "platform:botId:scope:sceneId".
func (k SessionKey) String() string {
	return k.Platform + ":" + k.Bot + ":" + k.Scope + ":" + k.Scene
}

// Token returns the subject token (<sk> in DESIGN.md §3) for k; it is also k's key in the
// sessions and leases KV buckets.
// It is EncodeToken(k.String()) written in one pass, without the intermediate string: subjects
// and KV keys are built from it several times per turn.
func (k SessionKey) Token() string {
	var b strings.Builder
	b.Grow(k.tokenLen())
	k.writeToken(&b)
	return b.String()
}

// subject returns prefix + "." + k.Token() + "." + rest[0] + "." + ... in one allocation; rest
// are tokens already.
func (k SessionKey) subject(prefix string, rest ...string) string {
	n := len(prefix) + 1 + k.tokenLen()
	for _, r := range rest {
		n += 1 + len(r)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(prefix)
	b.WriteByte('.')
	k.writeToken(&b)
	for _, r := range rest {
		b.WriteByte('.')
		b.WriteString(r)
	}
	return b.String()
}

// tokenLen is len(k.Token()).
func (k SessionKey) tokenLen() int {
	n := 3 * 3 // the separators, each ':' escaped as "=3A"
	for _, f := range [4]string{k.Platform, k.Bot, k.Scope, k.Scene} {
		n += len(f)
		for i := 0; i < len(f); i++ {
			if !safeByte(f[i]) {
				n += 2
			}
		}
	}
	return n
}

// writeToken writes k.Token() to b.
func (k SessionKey) writeToken(b *strings.Builder) {
	for j, f := range [4]string{k.Platform, k.Bot, k.Scope, k.Scene} {
		if j > 0 {
			b.WriteString("=3A")
		}
		writeEscaped(b, f)
	}
}

// Validate checks every field; the error wraps ErrInvalid and names the field.
func (k SessionKey) Validate() error {
	if err := k.validate(); err != nil {
		return &InvalidError{What: "session key", Reason: err.Error()}
	}
	return nil
}

func (k SessionKey) validate() error {
	switch {
	case k.Platform == "":
		return required("platform")
	case strings.IndexByte(k.Platform, ':') >= 0:
		return badField("platform", "%q must not contain ':'", k.Platform)
	case k.Bot == "":
		return required("bot")
	case strings.IndexByte(k.Bot, ':') >= 0:
		return badField("bot", "%q must not contain ':'", k.Bot)
	case k.Scope == "":
		return required("scope")
	case !ValidScope(k.Scope):
		return badField("scope", "%q must be private, group or channel", k.Scope)
	case k.Scene == "":
		return required("scene")
	}
	return nil
}

// ParseSessionKey parses "platform:botId:scope:sceneId" (the scene id may contain ':').
func ParseSessionKey(s string) (SessionKey, error) {
	parts := strings.SplitN(s, ":", 4)
	if len(parts) != 4 {
		return SessionKey{}, invalid("session key", "%q: want platform:botId:scope:sceneId", s)
	}
	k := SessionKey{Platform: parts[0], Bot: parts[1], Scope: parts[2], Scene: parts[3]}
	if err := k.validate(); err != nil {
		return SessionKey{}, invalid("session key", "%q: %v", s, err)
	}
	return k, nil
}

// ParseSessionKeyToken decodes a subject token / KV key back into a SessionKey.
func ParseSessionKeyToken(t string) (SessionKey, error) {
	s, err := DecodeToken(t)
	if err != nil {
		return SessionKey{}, err
	}
	return ParseSessionKey(s)
}

// SessionID names one epoch of a session: "sessionKey#epoch". A new epoch starts on /reset, so
// the LLM context of the old epoch is never read again (seed Grill #15). Epochs start at 1;
// epoch 0 means "not known yet" and its string form is the bare session key.
type SessionID struct {
	Key   SessionKey
	Epoch uint64
}

// NewSessionID returns k#epoch.
func NewSessionID(k SessionKey, epoch uint64) SessionID { return SessionID{Key: k, Epoch: epoch} }

// String returns "platform:botId:scope:sceneId#epoch", or the bare key when Epoch is 0.
func (id SessionID) String() string {
	if id.Epoch == 0 {
		return id.Key.String()
	}
	// One allocation: the turn worker names the session this way several times per turn.
	var num [20]byte
	e := strconv.AppendUint(num[:0], id.Epoch, 10)
	k := &id.Key
	var b strings.Builder
	b.Grow(len(k.Platform) + len(k.Bot) + len(k.Scope) + len(k.Scene) + 4 + len(e))
	b.WriteString(k.Platform)
	b.WriteByte(':')
	b.WriteString(k.Bot)
	b.WriteByte(':')
	b.WriteString(k.Scope)
	b.WriteByte(':')
	b.WriteString(k.Scene)
	b.WriteByte('#')
	b.Write(e)
	return b.String()
}

// IsZero reports whether id is the zero value.
func (id SessionID) IsZero() bool { return id == SessionID{} }

// ParseSessionID parses "sessionKey#epoch". When the text after the last '#' is not a canonical
// positive decimal, the whole string is read as a bare session key with Epoch 0 (scene ids may
// contain '#'; a scene id ending in "#<digits>" must therefore always carry an epoch).
func ParseSessionID(s string) (SessionID, error) {
	if i := strings.LastIndexByte(s, '#'); i >= 0 {
		if epoch, ok := parseEpoch(s[i+1:]); ok {
			k, err := ParseSessionKey(s[:i])
			if err != nil {
				return SessionID{}, err
			}
			return SessionID{Key: k, Epoch: epoch}, nil
		}
	}
	k, err := ParseSessionKey(s)
	if err != nil {
		return SessionID{}, err
	}
	return SessionID{Key: k}, nil
}

// validSessionID reports whether ParseSessionID accepts s, without allocating.
func validSessionID(s string) bool {
	if i := strings.LastIndexByte(s, '#'); i >= 0 {
		if _, ok := parseEpoch(s[i+1:]); ok {
			return validSessionKey(s[:i])
		}
	}
	return validSessionKey(s)
}

// validSessionKey reports whether ParseSessionKey accepts s, without allocating.
func validSessionKey(s string) bool {
	i := strings.IndexByte(s, ':')
	if i <= 0 { // no platform
		return false
	}
	rest := s[i+1:]
	j := strings.IndexByte(rest, ':')
	if j <= 0 { // no bot
		return false
	}
	rest = rest[j+1:]
	k := strings.IndexByte(rest, ':')
	return k >= 0 && ValidScope(rest[:k]) && len(rest) > k+1
}

// parseEpoch accepts only the canonical decimal form of a positive uint64 (no sign, no leading
// zero), so that String and Parse are inverse.
func parseEpoch(s string) (uint64, bool) {
	if s == "" || s[0] == '0' {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}
