package llm

// PartialJSON accumulates the argument JSON of one streamed tool call and returns, after every
// delta, exactly what ParsePartialJSON would return for everything received so far — but
// without re-parsing all of it when the delta only continues an open string value, the case
// that makes per-delta re-parsing quadratic for large arguments (a file's content). Deltas that
// close a string or touch structure fall back to a full parse.
//
// Each returned map is new (containers on the path to the growing string are copied), so a
// consumer may keep an earlier result while streaming goes on. The zero value is ready to use;
// a PartialJSON is not safe for concurrent use.
type PartialJSON struct {
	raw    []byte // only ever appended to: earlier results hold views of it
	result map[string]any

	// When the input ended inside a string value: the path to it, its decoded content so far
	// (only appended to, for the same reason as raw) and a cut escape waiting for its rest.
	open    bool
	path    []pathElem
	str     []byte
	pending string
}

// Append adds a delta and returns the arguments parsed so far (never nil).
func (a *PartialJSON) Append(delta string) map[string]any {
	a.raw = append(a.raw, delta...)
	if a.open && a.result != nil {
		frag := a.pending + delta
		p := partialParser{s: "\"" + frag}
		v, st := p.str()
		if st == pvPartial {
			a.str = append(a.str, v...)
			a.pending = frag[p.cut-1:]
			if m, ok := setPath(a.result, a.path, bytesToString(a.str)).(map[string]any); ok {
				a.result = m
				return m
			}
		}
	}
	return a.full()
}

// String returns the raw JSON received so far.
func (a *PartialJSON) String() string { return bytesToString(a.raw) }

// Result returns the last result (an empty map before the first Append).
func (a *PartialJSON) Result() map[string]any {
	if a.result == nil {
		return map[string]any{}
	}
	return a.result
}

// Reset forgets everything, for the next tool call.
func (a *PartialJSON) Reset() { *a = PartialJSON{} }

func (a *PartialJSON) full() map[string]any {
	p := partialParser{s: bytesToString(a.raw), track: true}
	p.skipSpace()
	a.open = false
	if p.i >= len(p.s) || p.s[p.i] != '{' {
		a.result = map[string]any{}
		return a.result
	}
	m, _ := p.object(0)
	a.result = m
	if p.open {
		a.open = true
		a.path = p.openPath
		// A new buffer: the old one backs strings earlier results still hold.
		a.str = append(make([]byte, 0, 2*len(p.openStr)+64), p.openStr...)
		a.pending = p.s[p.openCut:]
	}
	return m
}

// setPath returns v with the value at path replaced by leaf, copying every container on the
// path (never mutating v).
func setPath(v any, path []pathElem, leaf any) any {
	if len(path) == 0 {
		return leaf
	}
	e := path[0]
	switch c := v.(type) {
	case map[string]any:
		if e.index >= 0 {
			return v
		}
		m := make(map[string]any, len(c))
		for k, x := range c {
			m[k] = x
		}
		m[e.key] = setPath(c[e.key], path[1:], leaf)
		return m
	case []any:
		if e.index < 0 || e.index >= len(c) {
			return v
		}
		n := make([]any, len(c))
		copy(n, c)
		n[e.index] = setPath(c[e.index], path[1:], leaf)
		return n
	}
	return v
}
