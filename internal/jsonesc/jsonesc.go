// Package jsonesc holds what the hand-written JSON readers share about escapes in strings.
package jsonesc

// Unescape returns the byte that a one-character escape stands for: e is the character after
// the backslash (\" \\ \/ \b \f \n \r \t). \u escapes and unknown ones are the caller's: ok is
// false for them.
func Unescape(e byte) (c byte, ok bool) {
	switch e {
	case '"', '\\', '/':
		return e, true
	case 'b':
		return '\b', true
	case 'f':
		return '\f', true
	case 'n':
		return '\n', true
	case 'r':
		return '\r', true
	case 't':
		return '\t', true
	}
	return 0, false
}
