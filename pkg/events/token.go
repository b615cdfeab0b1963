package events

import "strings"

// Token encoding: any string becomes exactly one NATS subject token that is also a valid
// JetStream KV key, and the mapping is a bijection, so the same session always lands on the
// same subject and key and the original can be read back.
//
// Alphabet: A-Z a-z 0-9 '-' '_' pass through unchanged; every other byte (including '=', '.',
// ':', '*', '>', '/', spaces and every byte of a multi-byte UTF-8 rune) becomes "=XX" with two
// UPPERCASE hex digits. The empty string becomes "=" (a lone '=' can never be an escape).
// Decoding rejects every non-canonical form (lower-case hex, escaped safe bytes, truncated
// escapes), so Encode(Decode(t)) == t for every t Decode accepts.
//
// Strings made only of the safe alphabet (platform names, numeric ids, nuids) encode to
// themselves, so the common case costs no allocation and subjects stay readable.

const tokenEscape = '='

const hexUpper = "0123456789ABCDEF"

func safeByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// EncodeToken returns the subject-safe, reversible token for s. It never fails.
func EncodeToken(s string) string {
	if s == "" {
		return string(tokenEscape)
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if !safeByte(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 2*n)
	writeEscaped(&b, s)
	return b.String()
}

// writeEscaped writes s to b as EncodeToken encodes it.
func writeEscaped(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if safeByte(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte(tokenEscape)
		b.WriteByte(hexUpper[c>>4])
		b.WriteByte(hexUpper[c&0x0f])
	}
}

// DecodeToken reverses EncodeToken. A token that EncodeToken could not have produced is an
// error wrapping ErrInvalid that names the offending position.
func DecodeToken(t string) (string, error) {
	if t == "" {
		return "", invalid("token", "empty token")
	}
	if t == string(tokenEscape) {
		return "", nil
	}
	n := 0
	for i := 0; i < len(t); i++ {
		if t[i] == tokenEscape {
			n++
		} else if !safeByte(t[i]) {
			return "", invalid("token", "%q: byte %q at %d is not allowed", t, t[i], i)
		}
	}
	if n == 0 {
		return t, nil
	}
	out := make([]byte, 0, len(t)) // an upper bound; malformed input may have fewer bytes per escape
	for i := 0; i < len(t); i++ {
		c := t[i]
		if c != tokenEscape {
			out = append(out, c)
			continue
		}
		if i+2 >= len(t) {
			return "", invalid("token", "%q: truncated escape at %d", t, i)
		}
		hi, ok1 := unhexUpper(t[i+1])
		lo, ok2 := unhexUpper(t[i+2])
		if !ok1 || !ok2 {
			return "", invalid("token", "%q: escape at %d needs two upper-case hex digits", t, i)
		}
		d := hi<<4 | lo
		if safeByte(d) {
			return "", invalid("token", "%q: escape at %d encodes %q which must be written as itself", t, i, d)
		}
		out = append(out, d)
		i += 2
	}
	return string(out), nil
}

func unhexUpper(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
