package filetool

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// The supported parameter subset. Everything here maps one to one onto JSON Schema and is
// understood the same way by every provider; anything else fails start-up (seed Grill #18)
// instead of being silently dropped or reaching a provider that rejects it.
var (
	supportedTypes = []string{"string", "number", "integer", "boolean", "array", "object"}
	// keys of one parameter (shorthand form)
	paramKeys = []string{"type", "description", "required", "enum", "default", "items", "properties",
		"minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems"}
)

// SupportedKeys lists the keys a parameter may use, for docs and error messages.
func SupportedKeys() []string { return slices.Clone(paramKeys) }

// FieldError is a start-up failure naming the file and the offending field.
type FieldError struct {
	File  string
	Field string // dotted path, e.g. parameters.city.items.type
	Line  int
	Msg   string
}

func (e *FieldError) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Field == "" {
		return fmt.Sprintf("%s: %s", loc, e.Msg)
	}
	return fmt.Sprintf("%s: %s: %s", loc, e.Field, e.Msg)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

type converter struct{ file string }

func (c converter) fail(n *yaml.Node, field, format string, a ...any) error {
	line := 0
	if n != nil && n.Line > 0 {
		line = n.Line + 1 // the frontmatter starts on the file's second line
	}
	return &FieldError{File: c.file, Field: field, Line: line, Msg: fmt.Sprintf(format, a...)}
}

// parameters converts the frontmatter's parameters node into a JSON Schema object. Two forms
// are accepted: the shorthand map {param: {type, description, required, ...}} (the seed's
// form) and a JSON-Schema object {type: object, properties: {...}, required: [...]} whose
// properties use the same subset.
func (c converter) parameters(n *yaml.Node) (json.RawMessage, []string, error) {
	if n == nil || n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.Tag == "!!null") {
		return json.RawMessage(`{"type":"object","properties":{}}`), nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, nil, c.fail(n, "parameters", "want a mapping of parameter names to definitions")
	}
	props, req := n, []string(nil)
	if t := mapGet(n, "type"); t != nil && t.Kind == yaml.ScalarNode {
		// JSON-Schema form.
		for i := 0; i < len(n.Content); i += 2 {
			k := n.Content[i].Value
			switch k {
			case "type", "properties", "required", "description", "additionalProperties":
			default:
				return nil, nil, c.fail(n.Content[i], "parameters."+k, "unsupported schema keyword %q (supported at the top level: type, properties, required, description)", k)
			}
		}
		if t.Value != "object" {
			return nil, nil, c.fail(t, "parameters.type", "must be object, got %q", t.Value)
		}
		if ap := mapGet(n, "additionalProperties"); ap != nil && !(ap.Tag == "!!bool") {
			return nil, nil, c.fail(ap, "parameters.additionalProperties", "only true or false is supported")
		}
		props = mapGet(n, "properties")
		if props == nil {
			props = &yaml.Node{Kind: yaml.MappingNode}
		}
		if props.Kind != yaml.MappingNode {
			return nil, nil, c.fail(props, "parameters.properties", "want a mapping")
		}
		if r := mapGet(n, "required"); r != nil {
			if err := r.Decode(&req); err != nil {
				return nil, nil, c.fail(r, "parameters.required", "want a list of parameter names")
			}
			for _, name := range req {
				if mapGet(props, name) == nil {
					return nil, nil, c.fail(r, "parameters.required", "%q is not a declared property", name)
				}
			}
		}
	}
	schema, names, err := c.object(props, "parameters", req)
	if err != nil {
		return nil, nil, err
	}
	raw, err := json.Marshal(schema)
	if err != nil {
		return nil, nil, c.fail(n, "parameters", "%v", err)
	}
	return raw, names, nil
}

// object converts a mapping of property definitions.
func (c converter) object(props *yaml.Node, field string, required []string) (map[string]any, []string, error) {
	properties := map[string]any{}
	var names []string
	for i := 0; i < len(props.Content); i += 2 {
		kn, vn := props.Content[i], props.Content[i+1]
		name := kn.Value
		f := field + "." + name
		if !validParamName(name) {
			return nil, nil, c.fail(kn, f, "parameter name must match [A-Za-z_][A-Za-z0-9_-]*")
		}
		s, isReq, err := c.param(vn, f)
		if err != nil {
			return nil, nil, err
		}
		if isReq && !slices.Contains(required, name) {
			required = append(required, name)
		}
		properties[name] = s
		names = append(names, name)
	}
	out := map[string]any{"type": "object", "properties": properties}
	if len(required) > 0 {
		sort.Strings(required)
		out["required"] = required
	}
	return out, names, nil
}

func validParamName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z':
		case i > 0 && (r == '-' || r >= '0' && r <= '9'):
		default:
			return false
		}
	}
	return true
}

func mapGet(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// param converts one parameter definition; it returns whether it is marked required.
func (c converter) param(n *yaml.Node, field string) (map[string]any, bool, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" && slices.Contains(supportedTypes, n.Value) {
		// "city: string" shorthand
		return map[string]any{"type": n.Value}, false, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, false, c.fail(n, field, "want a mapping with at least a type")
	}
	for i := 0; i < len(n.Content); i += 2 {
		k := n.Content[i].Value
		if !slices.Contains(paramKeys, k) {
			return nil, false, c.fail(n.Content[i], field+"."+k, "unsupported schema keyword %q (supported: %s)", k, strings.Join(paramKeys, ", "))
		}
	}
	tn := mapGet(n, "type")
	if tn == nil {
		return nil, false, c.fail(n, field+".type", "is required (one of %s)", strings.Join(supportedTypes, ", "))
	}
	if tn.Kind != yaml.ScalarNode || !slices.Contains(supportedTypes, tn.Value) {
		return nil, false, c.fail(tn, field+".type", "unsupported type %q (supported: %s)", tn.Value, strings.Join(supportedTypes, ", "))
	}
	typ := tn.Value
	out := map[string]any{"type": typ}
	required := false
	for i := 0; i < len(n.Content); i += 2 {
		k, v := n.Content[i].Value, n.Content[i+1]
		f := field + "." + k
		switch k {
		case "type":
		case "description":
			if v.Kind != yaml.ScalarNode {
				return nil, false, c.fail(v, f, "want a string")
			}
			out["description"] = v.Value
		case "required":
			if v.Kind != yaml.ScalarNode || v.Tag != "!!bool" {
				return nil, false, c.fail(v, f, "want true or false (in the shorthand form, required is per parameter)")
			}
			required = v.Value == "true"
		case "enum":
			if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
				return nil, false, c.fail(v, f, "want a non-empty list")
			}
			var vals []any
			for j, e := range v.Content {
				val, err := c.scalar(e, typ, fmt.Sprintf("%s[%d]", f, j))
				if err != nil {
					return nil, false, err
				}
				vals = append(vals, val)
			}
			out["enum"] = vals
		case "default":
			val, err := c.value(v, typ, f)
			if err != nil {
				return nil, false, err
			}
			out["default"] = val
		case "items":
			if typ != "array" {
				return nil, false, c.fail(v, f, "only allowed for type array")
			}
			it, _, err := c.param(v, f)
			if err != nil {
				return nil, false, err
			}
			out["items"] = it
		case "properties":
			if typ != "object" {
				return nil, false, c.fail(v, f, "only allowed for type object")
			}
			if v.Kind != yaml.MappingNode {
				return nil, false, c.fail(v, f, "want a mapping")
			}
			obj, _, err := c.object(v, f, nil)
			if err != nil {
				return nil, false, err
			}
			out["properties"] = obj["properties"]
			if r, ok := obj["required"]; ok {
				out["required"] = r
			}
		case "minimum", "maximum":
			if typ != "number" && typ != "integer" {
				return nil, false, c.fail(v, f, "only allowed for number and integer")
			}
			var x float64
			if v.Kind != yaml.ScalarNode || v.Decode(&x) != nil || v.Tag == "!!str" {
				return nil, false, c.fail(v, f, "want a number")
			}
			out[k] = x
		case "minLength", "maxLength", "minItems", "maxItems":
			if (strings.HasSuffix(k, "Length") && typ != "string") || (strings.HasSuffix(k, "Items") && typ != "array") {
				return nil, false, c.fail(v, f, "not allowed for type %s", typ)
			}
			var x int
			if v.Kind != yaml.ScalarNode || v.Tag != "!!int" || v.Decode(&x) != nil || x < 0 {
				return nil, false, c.fail(v, f, "want a non-negative integer")
			}
			out[k] = x
		}
	}
	if typ == "array" && out["items"] == nil {
		return nil, false, c.fail(n, field+".items", "is required for type array")
	}
	if typ == "object" && out["properties"] == nil {
		out["properties"] = map[string]any{}
	}
	if d, ok := out["default"]; ok {
		if e, ok := out["enum"].([]any); ok && !slices.ContainsFunc(e, func(x any) bool { return fmt.Sprint(x) == fmt.Sprint(d) }) {
			return nil, false, c.fail(mapGet(n, "default"), field+".default", "%v is not one of the enum values", d)
		}
	}
	return out, required, nil
}

// scalar decodes a scalar of the given type.
func (c converter) scalar(n *yaml.Node, typ, field string) (any, error) {
	if n.Kind != yaml.ScalarNode {
		return nil, c.fail(n, field, "want a %s value", typ)
	}
	switch typ {
	case "string":
		if n.Tag != "!!str" {
			return nil, c.fail(n, field, "want a string, got %s (quote it)", strings.TrimPrefix(n.Tag, "!!"))
		}
		return n.Value, nil
	case "integer":
		var x int64
		if n.Tag != "!!int" || n.Decode(&x) != nil {
			return nil, c.fail(n, field, "want an integer, got %q", n.Value)
		}
		return x, nil
	case "number":
		var x float64
		if (n.Tag != "!!int" && n.Tag != "!!float") || n.Decode(&x) != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, c.fail(n, field, "want a number, got %q", n.Value)
		}
		return x, nil
	case "boolean":
		if n.Tag != "!!bool" {
			return nil, c.fail(n, field, "want true or false, got %q", n.Value)
		}
		return n.Value == "true", nil
	}
	return nil, c.fail(n, field, "enum is only supported for string, number, integer and boolean")
}

// value decodes a default of any supported type.
func (c converter) value(n *yaml.Node, typ, field string) (any, error) {
	switch typ {
	case "array":
		if n.Kind != yaml.SequenceNode {
			return nil, c.fail(n, field, "want a list")
		}
	case "object":
		if n.Kind != yaml.MappingNode {
			return nil, c.fail(n, field, "want a mapping")
		}
	default:
		return c.scalar(n, typ, field)
	}
	var v any
	if err := n.Decode(&v); err != nil {
		return nil, c.fail(n, field, "%v", err)
	}
	return v, nil
}
