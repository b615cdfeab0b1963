package llm

import (
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/agentbus/agentbus/internal/jsonesc"
)

// ParsePartialJSON parses a JSON object that may be cut off anywhere, as tool-call arguments are
// while they stream in, and returns the best-effort object. It never returns nil: garbage, an
// empty string or a value that is not an object give an empty map.
//
// Rules for a cut-off document (the object as it would look if the stream ended here):
//   - an open string value is kept with what has arrived so far (a cut escape is dropped);
//   - an open array or object is closed, keeping its complete or partial members;
//   - a key that has no value yet (cut inside the key, before the colon or before the value)
//     is dropped, as is a dangling comma;
//   - a cut number keeps its valid prefix ("12." is 12, "-" is dropped);
//   - a cut literal is completed when its prefix is unambiguous ("tr" is true, "n" is null).
//
// A syntax error in the middle stops parsing and keeps what was complete before it. Complete
// input gives the same result as encoding/json into map[string]any (numbers are float64).
//
// It is a small hand-written parser rather than "repair, then encoding/json" because it runs on
// every streamed delta: one pass, no intermediate buffer, and strings without escapes are
// substrings of s (no copy).
func ParsePartialJSON(s string) map[string]any {
	p := partialParser{s: s}
	p.skipSpace()
	if p.i >= len(p.s) || p.s[p.i] != '{' {
		return map[string]any{}
	}
	v, _ := p.object(0)
	if v == nil {
		return map[string]any{}
	}
	return v
}

// ParsePartialJSONInto is ParsePartialJSON with dst as the result: dst is cleared, filled and
// returned (a new map when dst is nil). It is for a provider that keeps one arguments map per
// streamed tool call and updates it after every delta, which a partial message allows (it is
// mutated until the stream ends; a consumer that keeps it clones it), instead of allocating a
// new map per delta.
func ParsePartialJSONInto(dst map[string]any, s string) map[string]any {
	if dst == nil {
		return ParsePartialJSON(s)
	}
	clear(dst)
	p := partialParser{s: s}
	p.skipSpace()
	if p.i >= len(p.s) || p.s[p.i] != '{' {
		return dst
	}
	p.objectInto(dst, 0)
	return dst
}

// maxPartialDepth bounds nesting so hostile input cannot exhaust the stack.
const maxPartialDepth = 512

type partialParser struct {
	s string
	i int
	// cut is set by str when it returns pvPartial: the index where the unconsumed tail of the
	// input begins (a cut escape sequence), len(s) when everything was consumed.
	cut int

	// Tracking, for PartialJSON: the path to the value being parsed, and where the input ended
	// inside a string value.
	track    bool
	path     []pathElem
	open     bool
	openPath []pathElem
	openStr  string
	openCut  int
}

// status of a parsed value.
const (
	pvComplete = iota // the value ended properly
	pvPartial         // input ended inside the value; what was returned is the best effort
	pvNone            // no value at all (input ended before it started, or a syntax error)
	pvBad             // syntax error after part of a value: keep the value, stop parsing
)

func (p *partialParser) skipSpace() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// object parses from '{'. It returns the object (never nil) and a status.
func (p *partialParser) object(depth int) (map[string]any, int) {
	return p.objectInto(map[string]any{}, depth)
}

// objectInto is object with m (empty) as the result.
func (p *partialParser) objectInto(m map[string]any, depth int) (map[string]any, int) {
	p.i++ // '{'
	if depth >= maxPartialDepth {
		return m, pvBad
	}
	for {
		p.skipSpace()
		if p.i >= len(p.s) {
			return m, pvPartial
		}
		c := p.s[p.i]
		if c == '}' {
			p.i++
			return m, pvComplete
		}
		if c == ',' { // separator (also tolerates a leading or doubled comma)
			p.i++
			continue
		}
		if c != '"' {
			return m, pvBad
		}
		key, st := p.str()
		if st != pvComplete {
			return m, pvPartial // cut inside the key: drop it
		}
		p.skipSpace()
		if p.i >= len(p.s) {
			return m, pvPartial
		}
		if p.s[p.i] != ':' {
			return m, pvBad
		}
		p.i++
		p.skipSpace()
		if p.i >= len(p.s) {
			return m, pvPartial
		}
		if p.track {
			p.path = append(p.path, pathElem{key: key, index: -1})
		}
		v, st := p.value(depth + 1)
		if p.track {
			p.path = p.path[:len(p.path)-1]
		}
		switch st {
		case pvComplete:
			m[key] = v
		case pvPartial:
			m[key] = v
			return m, pvPartial
		case pvBad:
			if v != nil {
				m[key] = v
			}
			return m, pvBad
		default:
			if p.i >= len(p.s) {
				return m, pvPartial
			}
			return m, pvBad
		}
	}
}

func (p *partialParser) array(depth int) ([]any, int) {
	p.i++ // '['
	a := []any{}
	if depth >= maxPartialDepth {
		return a, pvBad
	}
	for {
		p.skipSpace()
		if p.i >= len(p.s) {
			return a, pvPartial
		}
		c := p.s[p.i]
		if c == ']' {
			p.i++
			return a, pvComplete
		}
		if c == ',' {
			p.i++
			continue
		}
		if p.track {
			p.path = append(p.path, pathElem{index: len(a)})
		}
		v, st := p.value(depth + 1)
		if p.track {
			p.path = p.path[:len(p.path)-1]
		}
		switch st {
		case pvComplete:
			a = append(a, v)
		case pvPartial:
			return append(a, v), pvPartial
		case pvBad:
			if v != nil {
				a = append(a, v)
			}
			return a, pvBad
		default:
			if p.i >= len(p.s) {
				return a, pvPartial
			}
			return a, pvBad
		}
	}
}

// value parses any value starting at p.i (not at end of input).
func (p *partialParser) value(depth int) (any, int) {
	switch c := p.s[p.i]; {
	case c == '{':
		m, st := p.object(depth)
		return m, st
	case c == '[':
		a, st := p.array(depth)
		return a, st
	case c == '"':
		v, st := p.str()
		if p.track && st == pvPartial {
			p.open, p.openStr, p.openCut = true, v, p.cut
			p.openPath = append([]pathElem(nil), p.path...)
		}
		return v, st
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == 't':
		return p.literal("true", true)
	case c == 'f':
		return p.literal("false", false)
	case c == 'n':
		return p.literal("null", nil)
	}
	return nil, pvNone
}

func (p *partialParser) literal(word string, v any) (any, int) {
	n := 0
	for n < len(word) && p.i+n < len(p.s) && p.s[p.i+n] == word[n] {
		n++
	}
	p.i += n
	if n == len(word) {
		return v, pvComplete
	}
	if p.i >= len(p.s) {
		return v, pvPartial // an unambiguous prefix of the literal
	}
	return nil, pvNone
}

func (p *partialParser) number() (any, int) {
	start := p.i
	for p.i < len(p.s) {
		c := p.s[p.i]
		if (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' {
			p.i++
			continue
		}
		break
	}
	num := p.s[start:p.i]
	atEnd := p.i >= len(p.s)
	if f, err := strconv.ParseFloat(num, 64); err == nil && validJSONNumber(num) {
		if atEnd {
			return f, pvPartial
		}
		return f, pvComplete
	}
	if !atEnd {
		return nil, pvNone
	}
	// Cut number: keep the longest valid prefix ("1.", "1e", "1e-" → 1; "-" → nothing).
	for len(num) > 0 {
		last := num[len(num)-1]
		if last >= '0' && last <= '9' && validJSONNumber(num) {
			if f, err := strconv.ParseFloat(num, 64); err == nil {
				return f, pvPartial
			}
		}
		num = num[:len(num)-1]
	}
	return nil, pvNone
}

// validJSONNumber reports whether s is a JSON number (ParseFloat alone accepts more: "0x1p3",
// "+1", "1_0", "Inf").
func validJSONNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	if i >= len(s) {
		return false
	}
	if s[i] == '0' {
		i++
	} else if s[i] >= '1' && s[i] <= '9' {
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	} else {
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		d := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		d := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	return i == len(s)
}

// str parses a string starting at '"'. A cut string returns its content so far with pvPartial.
//
// Runs between escapes are found with strings.IndexByte (vectorized) and copied whole, because
// large arguments (a file's content) are re-parsed on every delta.
func (p *partialParser) str() (string, int) {
	p.i++ // opening quote
	start := p.i
	rest := p.s[start:]
	q := strings.IndexByte(rest, '"') // first quote, relative to start (-1: none)
	scope := rest
	if q >= 0 {
		scope = rest[:q]
	}
	bs := strings.IndexByte(scope, '\\')
	if bs < 0 {
		// Fast path: no escapes, the result is a substring of the input.
		if q < 0 {
			p.i = len(p.s)
			p.cut = p.i
			return rest, pvPartial
		}
		p.i = start + q + 1
		return rest[:q], pvComplete
	}
	buf := make([]byte, 0, len(rest))
	nextQ := -1 // absolute index of the next quote at or after p.i; valid while noQuote is false
	noQuote := q < 0
	if !noQuote {
		nextQ = start + q
	}
	for {
		if !noQuote && nextQ < p.i {
			if k := strings.IndexByte(p.s[p.i:], '"'); k < 0 {
				noQuote = true
			} else {
				nextQ = p.i + k
			}
		}
		end := len(p.s)
		if !noQuote {
			end = nextQ
		}
		k := strings.IndexByte(p.s[p.i:end], '\\')
		if k < 0 {
			buf = append(buf, p.s[p.i:end]...)
			p.i = end
			if noQuote {
				p.cut = p.i
				return bytesToString(buf), pvPartial
			}
			p.i++ // closing quote
			return bytesToString(buf), pvComplete
		}
		buf = append(buf, p.s[p.i:p.i+k]...)
		p.i += k
		esc := p.i
		if p.i+1 >= len(p.s) {
			p.i, p.cut = len(p.s), esc
			return bytesToString(buf), pvPartial
		}
		e := p.s[p.i+1]
		p.i += 2
		switch c, ok := jsonesc.Unescape(e); {
		case ok:
			buf = append(buf, c)
		case e == 'u':
			r, ok, cut := p.hex4()
			if cut || ok && r >= 0xD800 && r < 0xDC00 && p.cutEscapeFollows() {
				// A cut escape, or a high surrogate whose low half has not fully arrived:
				// leave both out until the rest is there.
				p.i, p.cut = len(p.s), esc
				return bytesToString(buf), pvPartial
			}
			if !ok {
				r = utf8.RuneError
			} else if utf16.IsSurrogate(r) {
				r = p.lowSurrogate(r)
			}
			buf = utf8.AppendRune(buf, r)
		default:
			buf = append(buf, e) // unknown escape: keep the character
		}
	}
}

// bytesToString returns buf as a string without copying: str never touches buf again after
// returning it, and a large argument (a file's content) is re-parsed on every delta.
func bytesToString(buf []byte) string {
	if len(buf) == 0 {
		return ""
	}
	return unsafe.String(&buf[0], len(buf))
}

// hex4 reads four hex digits at p.i. cut reports that the input ended inside them.
func (p *partialParser) hex4() (r rune, ok, cut bool) {
	if p.i+4 > len(p.s) {
		for j := p.i; j < len(p.s); j++ {
			if _, ok := unhex(p.s[j]); !ok {
				p.i = j
				return 0, false, false
			}
		}
		return 0, false, true
	}
	for j := 0; j < 4; j++ {
		d, ok := unhex(p.s[p.i+j])
		if !ok {
			p.i += j
			return 0, false, false
		}
		r = r<<4 | d
	}
	p.i += 4
	return r, true, false
}

// cutEscapeFollows reports whether the input ends with a proper prefix of a "\uXXXX" escape
// starting at p.i (possibly empty).
func (p *partialParser) cutEscapeFollows() bool {
	rest := p.s[p.i:]
	if len(rest) >= 6 {
		return false
	}
	for j := 0; j < len(rest); j++ {
		switch {
		case j == 0 && rest[j] != '\\', j == 1 && rest[j] != 'u':
			return false
		case j >= 2:
			if _, ok := unhex(rest[j]); !ok {
				return false
			}
		}
	}
	return true
}

// lowSurrogate completes a UTF-16 surrogate pair when the next escape is its low half.
func (p *partialParser) lowSurrogate(hi rune) rune {
	if p.i+6 <= len(p.s) && p.s[p.i] == '\\' && p.s[p.i+1] == 'u' {
		save := p.i
		p.i += 2
		lo, ok, _ := p.hex4()
		if ok {
			if r := utf16.DecodeRune(hi, lo); r != utf8.RuneError {
				return r
			}
		}
		p.i = save
	}
	return utf8.RuneError
}

func unhex(c byte) (rune, bool) {
	switch {
	case c >= '0' && c <= '9':
		return rune(c - '0'), true
	case c >= 'a' && c <= 'f':
		return rune(c-'a') + 10, true
	case c >= 'A' && c <= 'F':
		return rune(c-'A') + 10, true
	}
	return 0, false
}
