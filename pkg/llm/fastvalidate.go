package llm

import (
	"encoding/json"
	"math"
	"unicode/utf8"
)

// A checker is a tool schema compiled once (per schema version, i.e. per distinct bytes of
// Tool.Parameters, through the schema cache) into a tree that answers "certainly valid" for the
// arguments a model usually sends, without the library's per-call work: jsonschema-go's
// Validate walks the schema through reflection and allocates annotation maps on every call,
// which was a quarter of the CPU of an in-process tool turn (issue 40).
//
// It is an accelerator, never the definition: it covers only the keywords listed in
// checkerKeywords with their 2020-12 meaning (the schemas tools are written with: type,
// properties, required, additionalProperties, items, enum, const, length and range bounds);
// a schema with any other keyword compiles to nil and is validated by the library alone, and a
// value the checker does not find valid (or whose Go type it does not know) is handed to the
// library too, which then reports the error. So the checker can only make a valid call
// cheaper; what is refused and the message saying why stay the library's
// (TestCheckerAgreesWithLibrary checks both on a table of schemas and values).
type checker struct {
	never    bool  // the schema false
	types    uint8 // typeBit mask; 0 = any type
	enum     []any // scalars only (string, float64, bool, nil)
	hasEnum  bool
	konst    any
	hasConst bool

	minLen, maxLen     int // -1: absent
	minItems, maxItems int // -1: absent
	min, max           *float64
	exMin, exMax       *float64

	props    map[string]*checker
	required []string
	addl     *checker // nil: any additional property is allowed
	items    *checker // nil: any item
}

const (
	typeNull uint8 = 1 << iota
	typeBool
	typeInteger
	typeNumber
	typeString
	typeArray
	typeObject
)

var typeBits = map[string]uint8{
	"null": typeNull, "boolean": typeBool, "integer": typeInteger, "number": typeNumber,
	"string": typeString, "array": typeArray, "object": typeObject,
}

// checkerKeywords are the keywords compileChecker understands; annotations are listed with
// false (they do not constrain a value). Anything else makes the schema the library's alone.
var checkerKeywords = map[string]bool{
	"type": true, "properties": true, "required": true, "additionalProperties": true,
	"items": true, "enum": true, "const": true, "minLength": true, "maxLength": true,
	"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true,
	"minItems": true, "maxItems": true,
	"description": false, "title": false, "default": false, "examples": false,
	"$comment": false, "deprecated": false, "readOnly": false, "writeOnly": false,
}

// compileChecker compiles the schema in params, or returns nil when it uses something the
// checker does not cover.
func compileChecker(params []byte) *checker {
	var root any
	if err := json.Unmarshal(params, &root); err != nil {
		return nil
	}
	if m, ok := root.(map[string]any); ok {
		delete(m, "$schema") // resolveSchema already accepted or normalized the dialect
	}
	return compileNode(root, 0)
}

func compileNode(s any, depth int) *checker {
	if depth > maxCoerceDepth {
		return nil
	}
	switch s := s.(type) {
	case bool:
		return &checker{never: !s, minLen: -1, maxLen: -1, minItems: -1, maxItems: -1}
	case map[string]any:
		c := &checker{minLen: -1, maxLen: -1, minItems: -1, maxItems: -1}
		for k, v := range s {
			if _, known := checkerKeywords[k]; !known {
				return nil
			}
			if !c.set(k, v, depth) {
				return nil
			}
		}
		return c
	default:
		return nil
	}
}

func (c *checker) set(k string, v any, depth int) bool {
	switch k {
	case "type":
		switch t := v.(type) {
		case string:
			c.types = typeBits[t]
			return c.types != 0
		case []any:
			for _, e := range t {
				s, _ := e.(string)
				if typeBits[s] == 0 {
					return false
				}
				c.types |= typeBits[s]
			}
			return len(t) > 0
		}
		return false
	case "properties":
		m, ok := v.(map[string]any)
		if !ok {
			return false
		}
		c.props = make(map[string]*checker, len(m))
		for name, sub := range m {
			if c.props[name] = compileNode(sub, depth+1); c.props[name] == nil {
				return false
			}
		}
		return true
	case "required":
		l, ok := v.([]any)
		if !ok {
			return false
		}
		for _, e := range l {
			s, ok := e.(string)
			if !ok {
				return false
			}
			c.required = append(c.required, s)
		}
		return true
	case "additionalProperties":
		c.addl = compileNode(v, depth+1)
		return c.addl != nil
	case "items":
		c.items = compileNode(v, depth+1) // an array (draft-07 tuple) does not compile
		return c.items != nil
	case "enum":
		l, ok := v.([]any)
		if !ok {
			return false
		}
		for _, e := range l {
			if !isScalar(e) {
				return false
			}
		}
		c.enum, c.hasEnum = l, true
		return true
	case "const":
		c.konst, c.hasConst = v, true
		return isScalar(v)
	case "minLength", "maxLength", "minItems", "maxItems":
		f, ok := v.(float64)
		if !ok || f < 0 || f != math.Trunc(f) || f > math.MaxInt32 {
			return false
		}
		switch k {
		case "minLength":
			c.minLen = int(f)
		case "maxLength":
			c.maxLen = int(f)
		case "minItems":
			c.minItems = int(f)
		default:
			c.maxItems = int(f)
		}
		return true
	case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum":
		f, ok := v.(float64) // draft-04's boolean exclusiveMinimum does not compile
		if !ok {
			return false
		}
		switch k {
		case "minimum":
			c.min = &f
		case "maximum":
			c.max = &f
		case "exclusiveMinimum":
			c.exMin = &f
		default:
			c.exMax = &f
		}
		return true
	}
	return true // an annotation
}

func isScalar(v any) bool {
	switch v.(type) {
	case nil, string, float64, bool:
		return true
	}
	return false
}

// valid reports whether v certainly satisfies the schema. false means "ask the library": v
// may be invalid, or of a Go type the checker does not handle.
func (c *checker) valid(v any, depth int) bool {
	if c.never || depth > maxCoerceDepth {
		return false
	}
	var t uint8
	switch x := v.(type) {
	case nil:
		t = typeNull
	case bool:
		t = typeBool
	case string:
		t = typeString
		if c.minLen >= 0 || c.maxLen >= 0 {
			n := utf8.RuneCountInString(x)
			if c.minLen >= 0 && n < c.minLen || c.maxLen >= 0 && n > c.maxLen {
				return false
			}
		}
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return false
		}
		t = typeNumber
		if x == math.Trunc(x) {
			t = typeInteger | typeNumber // "number" subsumes integers
		}
		if c.min != nil && x < *c.min || c.max != nil && x > *c.max ||
			c.exMin != nil && x <= *c.exMin || c.exMax != nil && x >= *c.exMax {
			return false
		}
	case []any:
		t = typeArray
		if c.minItems >= 0 && len(x) < c.minItems || c.maxItems >= 0 && len(x) > c.maxItems {
			return false
		}
		if c.items != nil {
			for _, e := range x {
				if !c.items.valid(e, depth+1) {
					return false
				}
			}
		}
	case map[string]any:
		t = typeObject
		for _, r := range c.required {
			if _, ok := x[r]; !ok {
				return false
			}
		}
		for k, e := range x {
			if p, ok := c.props[k]; ok {
				if !p.valid(e, depth+1) {
					return false
				}
			} else if c.addl != nil && !c.addl.valid(e, depth+1) {
				return false
			}
		}
	default:
		return false // json.Number, Go ints, structs: the library's
	}
	if c.types != 0 && c.types&t == 0 {
		return false
	}
	if c.hasEnum {
		found := false
		for _, e := range c.enum {
			if e == v {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	if c.hasConst && c.konst != v {
		return false
	}
	return true
}
