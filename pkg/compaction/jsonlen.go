package compaction

import (
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"
)

// jsonLen is len(json.Marshal(v)) for the values decoded JSON holds (maps, slices, strings,
// numbers, bools, nil), without building the encoding; ok is false when Marshal would fail.
// It exists only for speed: EstimateTokens sizes every tool call of the whole history before
// each model call, and marshalling the arguments was 3-4 % of a turn's CPU. Any other type is
// measured by json.Marshal itself. TestJSONLen keeps the two in step.
func jsonLen(v any) (int, bool) {
	switch x := v.(type) {
	case nil:
		return 4, true
	case string:
		return jsonStringLen(x), true
	case bool:
		if x {
			return 4, true
		}
		return 5, true
	case float64:
		return floatLen(x, 64)
	case float32:
		return floatLen(float64(x), 32)
	case int:
		return intLen(int64(x)), true
	case int64:
		return intLen(x), true
	case int32:
		return intLen(int64(x)), true
	case json.Number:
		if x == "" {
			return 1, true // Marshal writes 0
		}
		if !json.Valid([]byte(x)) {
			return 0, false
		}
		return len(x), true
	case map[string]any:
		if x == nil {
			return 4, true // null
		}
		n := 2 // {}
		if len(x) > 1 {
			n += len(x) - 1 // commas
		}
		for k, e := range x {
			el, ok := jsonLen(e)
			if !ok {
				return 0, false
			}
			n += jsonStringLen(k) + 1 + el
		}
		return n, true
	case []any:
		if x == nil {
			return 4, true // null
		}
		n := 2
		if len(x) > 1 {
			n += len(x) - 1
		}
		for _, e := range x {
			el, ok := jsonLen(e)
			if !ok {
				return 0, false
			}
			n += el
		}
		return n, true
	}
	b, err := json.Marshal(v)
	if err != nil {
		return 0, false
	}
	return len(b), true
}

// jsonStringLen is the length of s as encoding/json quotes it (HTML-safe escapes, U+2028 and
// U+2029 escaped, invalid UTF-8 as \ufffd).
func jsonStringLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f':
				n += 2
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			n += 6
		case r == '\u2028' || r == '\u2029':
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}

// floatLen formats f the way encoding/json does (into a stack buffer) and measures it.
func floatLen(f float64, bits int) (int, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	abs := math.Abs(f)
	if abs < 1e15 && f == math.Trunc(f) && !math.Signbit(f) { // the common case: a whole number
		return intLen(int64(f)), true
	}
	var buf [40]byte
	format := byte('f')
	if abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	b := strconv.AppendFloat(buf[:0], f, format, -1, bits)
	n := len(b)
	if format == 'e' && n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		n-- // e-09 is written e-9
	}
	return n, true
}

func intLen(i int64) int {
	var buf [24]byte
	return len(strconv.AppendInt(buf[:0], i, 10))
}
