package events

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/agentbus/agentbus/internal/jsonesc"
)

// The fast codec: hand-written JSON for the event types every turn moves (fastcodec.go), built
// from the primitives below. It exists only for speed (no reflection, one pass, few
// allocations); encoding/json stays the definition of the wire format:
//
//   - the encoder writes byte for byte what encoding/json writes (HTML-safe string escaping,
//     sorted map keys, its float format, llm.Content's MarshalJSON rules);
//   - the decoder produces exactly the value encoding/json would, or gives up. It gives up on
//     anything unusual (a key it does not know or that differs in case, a duplicate key, a value
//     of the wrong JSON type, an escape it does not handle, invalid UTF-8, deep nesting,
//     trailing data) and the caller then decodes the same bytes with encoding/json, which also
//     produces the error text for malformed input.
//
// A layout check at init (fastcodec.go) turns the fast codec off when a struct it covers no
// longer has the fields it was written for; TestFastCodecLayouts then fails.

// maxFastDepth bounds the nesting the fast codec follows (a cyclic map would recurse forever;
// encoding/json reports the cycle, so the fast path hands such values to it).
const maxFastDepth = 200

// ---- encoding ----

// htmlSafe[c] is true for the ASCII bytes encoding/json writes unescaped with HTML escaping on.
var htmlSafe = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

const hexLower = "0123456789abcdef"

// appendString appends s as a JSON string exactly as encoding/json.Marshal writes it.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if htmlSafe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default: // other control bytes and <, >, &
				b = append(b, '\\', 'u', '0', '0', hexLower[c>>4], hexLower[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexLower[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendStrings appends a []string; nil is null.
func appendStrings(b []byte, ss []string) []byte {
	if ss == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}

// appendFloat appends f as encoding/json writes a float64; NaN and infinities are not JSON.
func appendFloat(b []byte, f float64) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return b, false
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 -> e-9, as encoding/json does
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, "true"...)
	}
	return append(b, "false"...)
}

// appendRaw appends a json.RawMessage as encoding/json does: nil is null, anything else must
// be valid JSON and is written compacted and HTML-escaped.
func appendRaw(b []byte, raw json.RawMessage) ([]byte, bool) {
	if raw == nil {
		return append(b, "null"...), true
	}
	plain := json.Valid(raw)
	for i := 0; plain && i < len(raw); i++ {
		switch raw[i] {
		case ' ', '\t', '\n', '\r', '<', '>', '&', 0xE2: // 0xE2 starts U+2028 and U+2029
			plain = false
		}
	}
	if plain {
		return append(b, raw...), true
	}
	out, err := json.Marshal(raw) // compacts and escapes, or reports invalid JSON
	if err != nil {
		return b, false
	}
	return append(b, out...), true
}

// appendAny appends a JSON value held in an interface (tool arguments, segment data).
func appendAny(b []byte, v any, depth int) ([]byte, bool) {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...), true
	case string:
		return appendString(b, v), true
	case float64:
		return appendFloat(b, v)
	case bool:
		return appendBool(b, v), true
	case int:
		return strconv.AppendInt(b, int64(v), 10), true
	case int64:
		return strconv.AppendInt(b, v, 10), true
	case map[string]any:
		return appendMap(b, v, depth+1)
	case []any:
		if v == nil {
			return append(b, "null"...), true
		}
		if depth >= maxFastDepth {
			return b, false
		}
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = appendAny(b, e, depth+1); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	case []string:
		return appendStrings(b, v), true
	}
	// Anything else (json.Number, structs, other maps...) is written by encoding/json itself;
	// its output for a value inside an interface is the same as for the value on its own.
	out, err := json.Marshal(v)
	if err != nil {
		return b, false
	}
	return append(b, out...), true
}

// appendMap appends a map[string]any with its keys sorted, as encoding/json does; nil is null.
func appendMap(b []byte, m map[string]any, depth int) ([]byte, bool) {
	if m == nil {
		return append(b, "null"...), true
	}
	if depth >= maxFastDepth {
		return b, false
	}
	var small [8]string
	keys := small[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		var ok bool
		if b, ok = appendAny(b, m[k], depth); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

// obj writes one JSON object whose fields are appended as `,"name":value`: end replaces the
// first field's comma with '{' (or writes {} for no field), so omitempty fields need no
// bookkeeping of which field came first.
type obj struct{ start int }

func beginObj(b []byte) obj { return obj{start: len(b)} }

func (o obj) end(b []byte) []byte {
	if len(b) == o.start {
		return append(b, '{', '}')
	}
	b[o.start] = '{'
	return append(b, '}')
}

// encBufs recycles encoding buffers: an event is encoded into a pooled buffer and copied out
// once at its final size, instead of growing a fresh slice several times.
var encBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// maxPooledBuf keeps a rare huge event from pinning its buffer in the pool.
const maxPooledBuf = 64 << 10

// ---- decoding ----

// decoder reads one JSON document. Every method reports false when the input is anything it
// does not handle exactly like encoding/json; the caller then falls back to encoding/json.
type decoder struct {
	data  []byte
	i     int
	depth int
}

func (d *decoder) ws() {
	for d.i < len(d.data) {
		switch d.data[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte (0 at the end).
func (d *decoder) peek() byte {
	d.ws()
	if d.i < len(d.data) {
		return d.data[d.i]
	}
	return 0
}

// end reports whether only white space is left.
func (d *decoder) end() bool {
	d.ws()
	return d.i == len(d.data)
}

// lit consumes the literal word (true, false, null) at d.i.
func (d *decoder) lit(word string) bool {
	if !bytes.HasPrefix(d.data[d.i:], []byte(word)) {
		return false
	}
	d.i += len(word)
	return true
}

// null consumes a null if one is next.
func (d *decoder) null() bool {
	if d.peek() == 'n' {
		return d.lit("null")
	}
	return false
}

// object reads an object (null is a no-op, as encoding/json leaves a struct alone), calling
// field for each key with d positioned at the value. field decodes the value and returns the
// field's number (0..63), or -1 to give up. A key seen twice gives up too: encoding/json would
// merge the two values in ways the fast decoders do not copy.
func (d *decoder) object(field func(key []byte) int) bool {
	switch d.peek() {
	case 'n':
		return d.lit("null")
	case '{':
	default:
		return false
	}
	d.i++
	if d.depth++; d.depth > maxFastDepth {
		return false
	}
	var seen uint64
	if d.peek() == '}' {
		d.i++
		d.depth--
		return true
	}
	for {
		if d.peek() != '"' {
			return false
		}
		d.i++
		start := d.i
		for d.i < len(d.data) && d.data[d.i] != '"' {
			if c := d.data[d.i]; c == '\\' || c < 0x20 {
				return false // escaped keys never match a field name the fast decoders know
			}
			d.i++
		}
		if d.i >= len(d.data) {
			return false
		}
		key := d.data[start:d.i]
		d.i++
		if d.peek() != ':' {
			return false
		}
		d.i++
		n := field(key)
		if n < 0 || seen&(1<<n) != 0 {
			return false
		}
		seen |= 1 << n
		switch d.peek() {
		case ',':
			d.i++
		case '}':
			d.i++
			d.depth--
			return true
		default:
			return false
		}
	}
}

// array reads an array, calling elem for each element; null calls nothing and reports null.
func (d *decoder) array(elem func() bool) (ok, null bool) {
	switch d.peek() {
	case 'n':
		return d.lit("null"), true
	case '[':
	default:
		return false, false
	}
	d.i++
	if d.depth++; d.depth > maxFastDepth {
		return false, false
	}
	if d.peek() == ']' {
		d.i++
		d.depth--
		return true, false
	}
	for {
		if !elem() {
			return false, false
		}
		switch d.peek() {
		case ',':
			d.i++
		case ']':
			d.i++
			d.depth--
			return true, false
		default:
			return false, false
		}
	}
}

// field returns n when ok, else -1: the value object's field funcs return.
func field(n int, ok bool) int {
	if ok {
		return n
	}
	return -1
}

// stringBytes reads a string and returns its decoded bytes; they alias d.data when the string
// has no escapes (the caller copies them).
func (d *decoder) stringBytes() ([]byte, bool) {
	if d.peek() != '"' {
		return nil, false
	}
	d.i++
	start := d.i
	ascii := true
	for d.i < len(d.data) {
		c := d.data[d.i]
		switch {
		case c == '"':
			s := d.data[start:d.i]
			d.i++
			if !ascii && !utf8.Valid(s) {
				return nil, false // encoding/json replaces invalid UTF-8; leave that to it
			}
			return s, true
		case c == '\\':
			return d.unescape(start)
		case c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
		d.i++
	}
	return nil, false
}

// unescape decodes a string with escapes whose body starts at start; d.i is at the first
// backslash.
func (d *decoder) unescape(start int) ([]byte, bool) {
	out := make([]byte, 0, d.i-start+16)
	out = append(out, d.data[start:d.i]...)
	for d.i < len(d.data) {
		c := d.data[d.i]
		switch {
		case c == '"':
			d.i++
			if !utf8.Valid(out) {
				return nil, false
			}
			return out, true
		case c < 0x20:
			return nil, false
		case c != '\\':
			out = append(out, c)
			d.i++
			continue
		}
		if d.i+1 >= len(d.data) {
			return nil, false
		}
		e := d.data[d.i+1]
		d.i += 2
		switch c, ok := jsonesc.Unescape(e); {
		case ok:
			out = append(out, c)
		case e == 'u':
			r, ok := d.hex4()
			if !ok {
				return nil, false
			}
			if utf16.IsSurrogate(r) {
				// Only a proper pair is handled here; encoding/json replaces the rest.
				if d.i+1 >= len(d.data) || d.data[d.i] != '\\' || d.data[d.i+1] != 'u' {
					return nil, false
				}
				d.i += 2
				r2, ok := d.hex4()
				if !ok {
					return nil, false
				}
				if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
					return nil, false
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return nil, false
		}
	}
	return nil, false
}

func (d *decoder) hex4() (rune, bool) {
	if d.i+4 > len(d.data) {
		return 0, false
	}
	var r rune
	for _, c := range d.data[d.i : d.i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	d.i += 4
	return r, true
}

// str decodes a string field; null leaves it alone (as encoding/json does).
func (d *decoder) str(dst *string) bool {
	if d.null() {
		return true
	}
	b, ok := d.stringBytes()
	if ok {
		*dst = string(b)
	}
	return ok
}

// strAs decodes a string field whose value is usually known: known is reused instead of a
// copy of the bytes.
func (d *decoder) strAs(dst *string, known ...string) bool {
	if d.null() {
		return true
	}
	b, ok := d.stringBytes()
	if !ok {
		return false
	}
	for _, k := range known {
		if string(b) == k {
			*dst = k
			return true
		}
	}
	*dst = string(b)
	return true
}

// number reads a number literal, checking JSON's grammar.
func (d *decoder) number() ([]byte, bool) {
	d.ws()
	start := d.i
	if d.i < len(d.data) && d.data[d.i] == '-' {
		d.i++
	}
	switch {
	case d.i >= len(d.data):
		return nil, false
	case d.data[d.i] == '0':
		d.i++
	case d.data[d.i] >= '1' && d.data[d.i] <= '9':
		d.digits()
	default:
		return nil, false
	}
	if d.i < len(d.data) && d.data[d.i] == '.' {
		d.i++
		if !d.digits() {
			return nil, false
		}
	}
	if d.i < len(d.data) && (d.data[d.i] == 'e' || d.data[d.i] == 'E') {
		d.i++
		if d.i < len(d.data) && (d.data[d.i] == '+' || d.data[d.i] == '-') {
			d.i++
		}
		if !d.digits() {
			return nil, false
		}
	}
	return d.data[start:d.i], true
}

func (d *decoder) digits() bool {
	start := d.i
	for d.i < len(d.data) && d.data[d.i] >= '0' && d.data[d.i] <= '9' {
		d.i++
	}
	return d.i > start
}

// numberAs decodes a number field with parse, which refuses what encoding/json refuses for
// the field's type (a fraction or exponent for integers, a value out of range); null leaves
// the field alone.
//
// parse takes the literal's bytes, not a string: converted here, the string would escape through
// the func value and cost an allocation per number; converted inside parse, straight into a
// strconv call, it stays on the stack.
func numberAs[T any](d *decoder, dst *T, parse func([]byte) (T, error)) bool {
	if d.null() {
		return true
	}
	lit, ok := d.number()
	if !ok {
		return false
	}
	v, err := parse(lit)
	if err != nil {
		return false
	}
	*dst = v
	return true
}

func (d *decoder) int64(dst *int64) bool {
	return numberAs(d, dst, func(b []byte) (int64, error) { return strconv.ParseInt(string(b), 10, 64) })
}

func (d *decoder) int(dst *int) bool {
	var n int64
	if d.null() {
		return true
	}
	if !d.int64(&n) || int64(int(n)) != n {
		return false
	}
	*dst = int(n)
	return true
}

func (d *decoder) uint64(dst *uint64) bool {
	return numberAs(d, dst, func(b []byte) (uint64, error) { return strconv.ParseUint(string(b), 10, 64) })
}

func (d *decoder) float64(dst *float64) bool {
	return numberAs(d, dst, func(b []byte) (float64, error) { return strconv.ParseFloat(string(b), 64) })
}

func (d *decoder) bool(dst *bool) bool {
	switch d.peek() {
	case 'n':
		return d.lit("null")
	case 't':
		*dst = true
		return d.lit("true")
	case 'f':
		*dst = false
		return d.lit("false")
	}
	return false
}

// strings decodes a []string field; null sets it to nil.
func (d *decoder) strings(dst *[]string) bool {
	var out []string
	ok, null := d.array(func() bool {
		var s string
		if d.peek() == 'n' { // null inside []string leaves the element "" in encoding/json too
			if !d.lit("null") {
				return false
			}
		} else if !d.str(&s) {
			return false
		}
		out = append(out, s)
		return true
	})
	if !ok {
		return false
	}
	if null {
		*dst = nil
	} else if out == nil {
		*dst = []string{}
	} else {
		*dst = out
	}
	return true
}

// raw decodes a json.RawMessage field: a copy of the value's bytes, as encoding/json makes.
func (d *decoder) raw(dst *json.RawMessage) bool {
	d.ws()
	start := d.i
	if !d.skip() {
		return false
	}
	*dst = append(json.RawMessage(nil), d.data[start:d.i]...)
	return true
}

// skip consumes one value, checking its syntax.
func (d *decoder) skip() bool {
	switch c := d.peek(); {
	case c == '{':
		d.i++
		if d.depth++; d.depth > maxFastDepth {
			return false
		}
		if d.peek() == '}' {
			d.i++
			d.depth--
			return true
		}
		for {
			if d.peek() != '"' || !d.skipString() || d.peek() != ':' {
				return false
			}
			d.i++
			if !d.skip() {
				return false
			}
			switch d.peek() {
			case ',':
				d.i++
			case '}':
				d.i++
				d.depth--
				return true
			default:
				return false
			}
		}
	case c == '[':
		ok, _ := d.array(d.skip)
		return ok
	case c == '"':
		return d.skipString()
	case c == 't':
		return d.lit("true")
	case c == 'f':
		return d.lit("false")
	case c == 'n':
		return d.lit("null")
	case c == '-' || c >= '0' && c <= '9':
		_, ok := d.number()
		return ok
	}
	return false
}

// skipString consumes a string, checking escapes but not UTF-8 (neither does encoding/json's
// scanner, and raw values keep their bytes as they are).
func (d *decoder) skipString() bool {
	d.i++ // the quote
	for d.i < len(d.data) {
		c := d.data[d.i]
		switch {
		case c == '"':
			d.i++
			return true
		case c < 0x20:
			return false
		case c == '\\':
			if d.i+1 >= len(d.data) {
				return false
			}
			switch d.data[d.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				d.i += 2
			case 'u':
				d.i += 2
				if _, ok := d.hex4(); !ok {
					return false
				}
			default:
				return false
			}
			continue
		}
		d.i++
	}
	return false
}

// any decodes a value into an interface as encoding/json does: map[string]any, []any,
// string, float64, bool or nil.
func (d *decoder) any() (any, bool) {
	switch c := d.peek(); {
	case c == '{':
		var m map[string]any
		ok := d.mapAny(&m)
		return m, ok
	case c == '[':
		out := []any{}
		ok, _ := d.array(func() bool {
			v, ok := d.any()
			out = append(out, v)
			return ok
		})
		return out, ok
	case c == '"':
		b, ok := d.stringBytes()
		return string(b), ok
	case c == 't':
		return true, d.lit("true")
	case c == 'f':
		return false, d.lit("false")
	case c == 'n':
		return nil, d.lit("null")
	case c == '-' || c >= '0' && c <= '9':
		var f float64
		ok := d.float64(&f)
		return f, ok
	}
	return nil, false
}

// mapAny decodes a map[string]any field: null sets nil; keys may repeat (the last wins, as in
// encoding/json).
func (d *decoder) mapAny(dst *map[string]any) bool {
	switch d.peek() {
	case 'n':
		*dst = nil
		return d.lit("null")
	case '{':
	default:
		return false
	}
	d.i++
	if d.depth++; d.depth > maxFastDepth {
		return false
	}
	m := *dst
	if m == nil {
		m = make(map[string]any)
		*dst = m
	}
	if d.peek() == '}' {
		d.i++
		d.depth--
		return true
	}
	for {
		kb, ok := d.stringBytes()
		if !ok || d.peek() != ':' {
			return false
		}
		d.i++
		v, ok := d.any()
		if !ok {
			return false
		}
		m[mapKey(kb)] = v
		switch d.peek() {
		case ',':
			d.i++
		case '}':
			d.i++
			d.depth--
			return true
		default:
			return false
		}
	}
}

// mapKey returns key as a string, reusing a constant for the keys segment data and tool
// arguments usually have instead of allocating a copy.
func mapKey(key []byte) string {
	switch string(key) {
	case "text":
		return "text"
	case "id":
		return "id"
	case "name":
		return "name"
	case "url":
		return "url"
	case "file":
		return "file"
	case "user_id":
		return "user_id"
	case "message_id":
		return "message_id"
	case "query":
		return "query"
	case "path":
		return "path"
	}
	return string(key)
}

// slice decodes a JSON array into *dst with elem decoding each element in place; null sets
// nil and [] an empty slice, as encoding/json does for a nil slice.
func slice[T any](d *decoder, dst *[]T, elem func(*T, *decoder) bool) bool {
	var out []T
	ok, null := d.array(func() bool {
		out = append(out, *new(T))
		return elem(&out[len(out)-1], d)
	})
	switch {
	case !ok:
		return false
	case null:
		*dst = nil
	case out == nil:
		*dst = []T{}
	default:
		*dst = out
	}
	return true
}
