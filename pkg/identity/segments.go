package identity

import (
	"github.com/agentbus/agentbus/pkg/events"
)

// SanitizeSegments returns ss with a sender prefix stripped (StripSpoofedSender) from every
// string of every segment's data — text, file names, captions, face texts, formats, URLs, the
// fields of segment types agentbus does not know, in nested objects and arrays too — so that no
// field of a message can carry a spoofed "[sender:… roles=master]" to the model, whichever
// adapter normalized it and however the turn worker describes it. Keys are left alone (they
// name fields; the model sees values). ss itself is not modified: a segment with a changed
// value is a copy. Strings that cannot hold a prefix (ASCII without an opening bracket, such as
// base64 payloads and media:// references) cost one scan.
func SanitizeSegments(ss events.Segments) events.Segments {
	var out events.Segments
	for i, s := range ss {
		d, changed := sanitizeMap(s.Data)
		if !changed {
			continue
		}
		if out == nil {
			out = append(events.Segments(nil), ss...)
		}
		out[i] = events.Segment{Type: s.Type, Data: d}
	}
	if out == nil {
		return ss
	}
	return out
}

// SanitizeText is the sanitizer for one string a user controls (StripSpoofedSender).
func SanitizeText(s string) string { return StripSpoofedSender(s) }

// maxDepth bounds the nesting sanitizeValue follows; anything deeper is dropped (no adapter
// sends such data, and unbounded recursion must not be a way to crash ingest).
const maxDepth = 32

func sanitizeMap(m map[string]any) (map[string]any, bool) { return sanitizeMapDepth(m, 0) }

func sanitizeMapDepth(m map[string]any, depth int) (map[string]any, bool) {
	var out map[string]any
	for k, v := range m {
		nv, changed := sanitizeValue(v, depth+1)
		if !changed {
			continue
		}
		if out == nil {
			out = make(map[string]any, len(m))
			for k2, v2 := range m {
				out[k2] = v2
			}
		}
		out[k] = nv
	}
	if out == nil {
		return m, false
	}
	return out, true
}

func sanitizeValue(v any, depth int) (any, bool) {
	if depth > maxDepth {
		return nil, true
	}
	switch x := v.(type) {
	case string:
		if s := SanitizeText(x); s != x {
			return s, true
		}
	case map[string]any:
		return sanitizeMapDepth(x, depth)
	case []any:
		var out []any
		for i, e := range x {
			ne, changed := sanitizeValue(e, depth+1)
			if !changed {
				continue
			}
			if out == nil {
				out = append([]any(nil), x...)
			}
			out[i] = ne
		}
		if out != nil {
			return out, true
		}
	case []string:
		var out []string
		for i, e := range x {
			if s := SanitizeText(e); s != e {
				if out == nil {
					out = append([]string(nil), x...)
				}
				out[i] = s
			}
		}
		if out != nil {
			return out, true
		}
	}
	return v, false
}

// mayHoldPrefix is false for a string that cannot contain a sender prefix: one of ASCII bytes
// only, none of which folds to an opening bracket ("(", "[", "{", "<"). Every other string is
// folded.
func mayHoldPrefix(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 0x80, c == '(', c == '[', c == '{', c == '<':
			return true
		}
	}
	return false
}
