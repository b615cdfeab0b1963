package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"
)

// ValidateToolCall finds the tool named by call and validates (and coerces) its arguments
// against the tool's JSON Schema. It returns the arguments to execute with. An unknown tool is
// ErrToolNotFound; invalid arguments are a *ValidationError (errors.Is ErrInvalidArguments).
func ValidateToolCall(tools []Tool, call Content) (map[string]any, error) {
	for i := range tools {
		if tools[i].Name == call.Name {
			return ValidateArguments(&tools[i], call.Arguments)
		}
	}
	return nil, fmt.Errorf("%w: %q", ErrToolNotFound, call.Name)
}

// ValidateArguments coerces args towards tool.Parameters (a JSON Schema), applies the schema's
// defaults and validates the result with github.com/google/jsonschema-go. It returns the
// arguments to execute with.
//
// args is never mutated: when coercion or defaults change something the result is a copy,
// otherwise it is args itself. nil args count as {}. A tool without Parameters accepts any
// object. A schema that cannot be compiled is an error naming the tool.
//
// Coercion follows AJV's coerceTypes (what pi and most TypeScript agents run), applied only
// where the value does not already have an allowed type:
//
//	to number/integer: "5" -> 5, "1.5" -> 1.5 (number only), true/false -> 1/0, null -> 0
//	to string:         5 -> "5", true -> "true", null -> ""
//	to boolean:        "true"/"false" -> true/false, 1/0 -> true/false, null -> false
//	to null:           "", 0, false -> null
//	to array:          x -> [x] (then the items are coerced); "[1,2]" (a JSON array in a string) -> [1,2]
//	to object:         "{\"a\":1}" (a JSON object in a string) -> {"a":1}
//	from array:        [x] -> x when the schema wants a scalar
//
// The walk follows properties, additionalProperties, items/prefixItems, allOf and local $refs
// ("#/$defs/..", "#/definitions/.."); inside anyOf/oneOf only the branch types are used as a
// union, without descending. A value that cannot be coerced is reported with its JSON path.
//
// Compiled schemas are cached by the bytes of Parameters, so a tool turn pays for compiling
// once per distinct schema (a tool's version): the library's resolved schema and, for the
// keywords tool schemas are usually written with, a checker that accepts valid arguments
// without the library's per-call reflection and allocations (see checker).
func ValidateArguments(tool *Tool, args map[string]any) (map[string]any, error) {
	if args == nil {
		args = map[string]any{}
	}
	params := bytes.TrimSpace(tool.Parameters)
	if len(params) == 0 || string(params) == "null" || string(params) == "{}" {
		return args, nil
	}
	cs, err := compileSchema(params)
	if err != nil {
		return nil, fmt.Errorf("tool %s: %w", tool.Name, err)
	}
	w := coercer{root: cs.schema, defaults: cs.defaults}
	v, _ := w.walk(args, cs.schema, 0)
	out, ok := v.(map[string]any)
	if !ok { // the schema coerced the object into something else; validation reports it
		out = args
	}
	if len(w.issues) > 0 {
		return nil, newValidationError(tool.Name, w.issues, args)
	}
	if w.needDefaults {
		if out, err = applyDefaults(cs.resolved, out); err != nil {
			return nil, fmt.Errorf("tool %s: apply defaults: %w", tool.Name, err)
		}
	}
	if cs.check != nil && cs.check.valid(out, 0) {
		return out, nil
	}
	if err := cs.resolved.Validate(out); err != nil {
		return nil, newValidationError(tool.Name, []ValidationIssue{libraryIssue(err)}, args)
	}
	return out, nil
}

// ValidationIssue is one reason arguments were rejected. Path is a JSON path into the
// arguments ("command", "files[2].path"; "" is the arguments object itself).
type ValidationIssue struct {
	Path    string
	Message string
}

// ValidationError reports arguments that do not satisfy a tool's schema. Its message names the
// path of every problem found and shows the arguments as received, so a model reading it as a
// tool result can correct the call.
type ValidationError struct {
	Tool      string
	Issues    []ValidationIssue
	Arguments map[string]any // as received, before coercion
}

func newValidationError(tool string, issues []ValidationIssue, args map[string]any) *ValidationError {
	return &ValidationError{Tool: tool, Issues: issues, Arguments: args}
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString("Validation failed for tool \"")
	b.WriteString(e.Tool)
	b.WriteString("\":\n")
	for _, is := range e.Issues {
		b.WriteString("  - ")
		if is.Path == "" {
			b.WriteString("(root)")
		} else {
			b.WriteString(is.Path)
		}
		b.WriteString(": ")
		b.WriteString(is.Message)
		b.WriteByte('\n')
	}
	b.WriteString("\nReceived arguments:\n")
	j, err := json.MarshalIndent(e.Arguments, "", "  ")
	if err != nil {
		j = []byte(fmt.Sprintf("%v", e.Arguments))
	}
	b.Write(j)
	return b.String()
}

// Is makes errors.Is(err, ErrInvalidArguments) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidArguments }

// SchemaFor infers a JSON Schema from the Go type T with jsonschema.For (field names from json
// tags, `jsonschema:"..."` tags as descriptions, non-omitempty fields required).
func SchemaFor[T any]() (json.RawMessage, error) {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		return nil, fmt.Errorf("infer schema: %w", err)
	}
	return json.Marshal(s)
}

// MustSchemaFor is SchemaFor for a T fixed at compile time; it panics if T cannot be described
// (a programming error, like regexp.MustCompile).
func MustSchemaFor[T any]() json.RawMessage {
	s, err := SchemaFor[T]()
	if err != nil {
		panic(err)
	}
	return s
}

// compiledSchema is a parsed and resolved tool schema.
type compiledSchema struct {
	schema   *jsonschema.Schema
	resolved *jsonschema.Resolved
	// defaults lists, per object schema, the optional properties that have a default or hold
	// an object with defaults; the walk asks the library to apply defaults only when one of
	// them is missing, so the common call pays nothing for them.
	defaults map[*jsonschema.Schema][]string
	// check answers "certainly valid" without the library for schemas it covers (nil when it
	// does not cover this one); see checker.
	check *checker
	err   error
}

// maxCachedSchemas bounds the cache (tools from MCP servers can change); when full it starts
// over, which only costs recompiling.
const maxCachedSchemas = 4096

var schemaCache = struct {
	sync.RWMutex
	m map[string]*compiledSchema
}{m: map[string]*compiledSchema{}}

func compileSchema(params []byte) (*compiledSchema, error) {
	schemaCache.RLock()
	cs := schemaCache.m[string(params)] // no allocation for the lookup
	schemaCache.RUnlock()
	if cs == nil {
		cs = &compiledSchema{}
		cs.schema, cs.resolved, cs.err = resolveSchema(params)
		if cs.err == nil && bytes.Contains(params, []byte(`"default"`)) {
			cs.defaults = map[*jsonschema.Schema][]string{}
			collectDefaults(cs.schema, cs.defaults, 0)
		}
		if cs.err == nil {
			cs.check = compileChecker(params)
		}
		schemaCache.Lock()
		if len(schemaCache.m) >= maxCachedSchemas {
			schemaCache.m = map[string]*compiledSchema{}
		}
		schemaCache.m[string(params)] = cs
		schemaCache.Unlock()
	}
	return cs, cs.err
}

func resolveSchema(params []byte) (*jsonschema.Schema, *jsonschema.Resolved, error) {
	var s jsonschema.Schema
	if err := json.Unmarshal(params, &s); err != nil {
		return nil, nil, fmt.Errorf("parameters are not a JSON Schema: %w", err)
	}
	switch s.Schema {
	case "", "http://json-schema.org/draft-07/schema#", "http://json-schema.org/draft-07/schema",
		"https://json-schema.org/draft/2020-12/schema":
	default:
		// Tools in the wild declare draft-04/06 or 2019-09; the keywords they use are the same
		// for validation purposes, so validate them as 2020-12 rather than refusing the tool.
		s.Schema = ""
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		return nil, nil, fmt.Errorf("parameters schema: %w", err)
	}
	if hasInPlaceCycle(&s) {
		return nil, nil, errors.New("parameters schema: a $ref cycle applies to the same value forever (e.g. {\"$ref\": \"#\"})")
	}
	return &s, rs, nil
}

// collectDefaults fills d for s and its sub-schemas and reports whether s (as a property)
// leads to a default: it has one, or its properties do.
func collectDefaults(s *jsonschema.Schema, d map[*jsonschema.Schema][]string, depth int) bool {
	if s == nil || depth > maxCoerceDepth {
		return false
	}
	if _, seen := d[s]; seen {
		return len(d[s]) > 0
	}
	d[s] = nil
	required := map[string]bool{}
	for _, r := range s.Required {
		required[r] = true
	}
	var props []string
	for name, sub := range s.Properties {
		if collectDefaults(sub, d, depth+1) && !required[name] {
			props = append(props, name)
		}
	}
	for _, sub := range s.AllOf {
		collectDefaults(sub, d, depth+1)
	}
	collectDefaults(s.Items, d, depth+1)
	collectDefaults(s.AdditionalProperties, d, depth+1)
	for _, sub := range s.Defs {
		collectDefaults(sub, d, depth+1)
	}
	for _, sub := range s.Definitions {
		collectDefaults(sub, d, depth+1)
	}
	if len(props) > 0 {
		d[s] = props
	}
	return s.Default != nil || len(props) > 0
}

func applyDefaults(rs *jsonschema.Resolved, args map[string]any) (out map[string]any, err error) {
	defer func() {
		if r := recover(); r != nil { // ApplyDefaults documents that it can panic
			err = fmt.Errorf("%v", r)
		}
	}()
	out = deepCopyJSON(args).(map[string]any)
	if err := rs.ApplyDefaults(&out); err != nil {
		return nil, err
	}
	return out, nil
}

func deepCopyJSON(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = deepCopyJSON(e)
		}
		return m
	case []any:
		a := make([]any, len(x))
		for i, e := range x {
			a[i] = deepCopyJSON(e)
		}
		return a
	}
	return v
}

// libraryIssue turns a jsonschema-go error ("validating root: validating /properties/a: enum:
// ...") into an issue at the innermost schema location, written as a data path.
func libraryIssue(err error) ValidationIssue {
	msg := err.Error()
	loc := ""
	for strings.HasPrefix(msg, "validating ") {
		rest := msg[len("validating "):]
		i := strings.Index(rest, ": ")
		if i < 0 {
			break
		}
		loc, msg = rest[:i], rest[i+2:]
	}
	return ValidationIssue{Path: schemaPathToDataPath(loc), Message: msg}
}

// schemaPathToDataPath maps a schema location ("/properties/list/items/properties/n") to the
// data it constrains ("list[*].n").
func schemaPathToDataPath(loc string) string {
	if loc == "" || loc == "root" {
		return ""
	}
	segs := strings.Split(strings.TrimPrefix(loc, "/"), "/")
	var b strings.Builder
	for i := 0; i < len(segs); i++ {
		switch segs[i] {
		case "properties":
			if i+1 < len(segs) {
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(strings.ReplaceAll(strings.ReplaceAll(segs[i+1], "~1", "/"), "~0", "~"))
				i++
			}
		case "items", "additionalItems":
			b.WriteString("[*]")
		case "prefixItems":
			if i+1 < len(segs) {
				b.WriteString("[" + segs[i+1] + "]")
				i++
			}
		case "additionalProperties":
			b.WriteString(".*")
		}
	}
	return b.String()
}

// coercer walks arguments and schema together, coercing values (copy-on-write) and recording
// type and required-property issues with their data paths.
type coercer struct {
	root         *jsonschema.Schema
	defaults     map[*jsonschema.Schema][]string
	issues       []ValidationIssue
	path         []pathElem // a stack, so walking allocates once, not per property
	needDefaults bool       // an optional property with a default is missing somewhere
}

const maxCoerceDepth = 64

// pathElem is one step of the data path being walked: a key, or an index when index >= 0.
type pathElem struct {
	key   string
	index int
}

// pathString renders the current data path ("files[1].path"); only called for an issue.
func (w *coercer) pathString() string {
	var b strings.Builder
	for _, e := range w.path {
		if e.index >= 0 {
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(e.index))
			b.WriteByte(']')
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.key)
	}
	return b.String()
}

func (w *coercer) issue(msg string) {
	w.issues = append(w.issues, ValidationIssue{Path: w.pathString(), Message: msg})
}

// deref follows a local $ref.
func (w *coercer) deref(s *jsonschema.Schema) *jsonschema.Schema {
	for i := 0; i < 8 && s != nil && s.Ref != ""; i++ {
		var defs map[string]*jsonschema.Schema
		name := ""
		switch {
		case s.Ref == "#":
			s = w.root
			continue
		case strings.HasPrefix(s.Ref, "#/$defs/"):
			defs, name = w.root.Defs, s.Ref[len("#/$defs/"):]
		case strings.HasPrefix(s.Ref, "#/definitions/"):
			defs, name = w.root.Definitions, s.Ref[len("#/definitions/"):]
		default:
			return nil
		}
		s = defs[name]
	}
	return s
}

// walk returns v coerced towards s and whether it changed.
func (w *coercer) walk(v any, s *jsonschema.Schema, depth int) (any, bool) {
	if s == nil || depth > maxCoerceDepth {
		return v, false
	}
	changed := false
	if s.Ref != "" {
		if r := w.deref(s); r != nil && r != s {
			var c bool
			v, c = w.walk(v, r, depth+1)
			changed = changed || c
		}
	}
	for _, sub := range s.AllOf {
		var c bool
		v, c = w.walk(v, sub, depth+1)
		changed = changed || c
	}

	types := s.Types
	if s.Type != "" {
		types = []string{s.Type}
	}
	if types == nil && (s.AnyOf != nil || s.OneOf != nil) {
		types = branchTypes(w, s)
	}
	if len(types) > 0 && !hasType(v, types) {
		nv, ok := coerceTo(v, types, s)
		if !ok {
			if s.Type != "" || s.Types != nil { // anyOf/oneOf mismatches are the library's to explain
				w.issue("must be " + strings.Join(types, " or ") + ", got " + describe(v))
			}
			return v, changed
		}
		v, changed = nv, true
	}

	switch x := v.(type) {
	case map[string]any:
		nm, c := w.walkObject(x, s, depth)
		if c {
			v, changed = nm, true
		}
	case []any:
		na, c := w.walkArray(x, s, depth)
		if c {
			v, changed = na, true
		}
	}
	return v, changed
}

func (w *coercer) walkObject(m map[string]any, s *jsonschema.Schema, depth int) (map[string]any, bool) {
	for _, req := range s.Required {
		if _, ok := m[req]; !ok {
			w.path = append(w.path, pathElem{key: req, index: -1})
			w.issue("required property is missing")
			w.path = w.path[:len(w.path)-1]
		}
	}
	if !w.needDefaults && w.defaults != nil {
		for _, name := range w.defaults[s] {
			if _, ok := m[name]; !ok {
				w.needDefaults = true
				break
			}
		}
	}
	if len(s.Properties) == 0 && s.AdditionalProperties == nil {
		return m, false
	}
	var out map[string]any // copy on first change
	for k, e := range m {
		sub := s.Properties[k]
		if sub == nil {
			sub = s.AdditionalProperties
			if sub == nil || len(s.PatternProperties) > 0 {
				continue
			}
		}
		if scalarFits(e, sub) {
			continue // walk would neither change nor report it; skip the path push
		}
		w.path = append(w.path, pathElem{key: k, index: -1})
		ne, c := w.walk(e, sub, depth+1)
		w.path = w.path[:len(w.path)-1]
		if c {
			if out == nil {
				out = make(map[string]any, len(m))
				for k2, e2 := range m {
					out[k2] = e2
				}
			}
			out[k] = ne
		}
	}
	if out == nil {
		return m, false
	}
	return out, true
}

func (w *coercer) walkArray(a []any, s *jsonschema.Schema, depth int) ([]any, bool) {
	prefix := s.PrefixItems
	if prefix == nil {
		prefix = s.ItemsArray
	}
	if s.Items == nil && prefix == nil {
		return a, false
	}
	var out []any
	for i, e := range a {
		sub := s.Items
		if i < len(prefix) {
			sub = prefix[i]
		} else if s.ItemsArray != nil {
			sub = s.AdditionalItems
		}
		if sub == nil {
			continue
		}
		w.path = append(w.path, pathElem{index: i})
		ne, c := w.walk(e, sub, depth+1)
		w.path = w.path[:len(w.path)-1]
		if c {
			if out == nil {
				out = make([]any, len(a))
				copy(out, a)
			}
			out[i] = ne
		}
	}
	if out == nil {
		return a, false
	}
	return out, true
}

// branchTypes is the union of the declared types of s's anyOf/oneOf branches (nil if any
// branch declares none, since then every type is allowed).
func branchTypes(w *coercer, s *jsonschema.Schema) []string {
	var out []string
	for _, list := range [][]*jsonschema.Schema{s.AnyOf, s.OneOf} {
		for _, b := range list {
			if b.Ref != "" {
				b = w.deref(b)
			}
			if b == nil {
				return nil
			}
			switch {
			case b.Type != "":
				out = append(out, b.Type)
			case b.Types != nil:
				out = append(out, b.Types...)
			default:
				return nil
			}
		}
	}
	return out
}

// jsonTypeOf returns the JSON type of a decoded (or Go-built) value; integral numbers are
// "integer".
func jsonTypeOf(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "boolean"
	case float64:
		if x == math.Trunc(x) && !math.IsInf(x, 0) {
			return "integer"
		}
		return "number"
	case float32:
		return jsonTypeOf(float64(x))
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, json.Number:
		return "integer"
	case []any, []string:
		return "array"
	case map[string]any:
		return "object"
	}
	return "unknown"
}

// scalarFits reports whether walk(v, s) is certainly a no-op without issues: v is a string,
// number or boolean of s's one type and s has no $ref or allOf to follow. It lets walkObject
// skip the path stack for the flat arguments most tools take, which then allocate nothing.
func scalarFits(v any, s *jsonschema.Schema) bool {
	if s.Type == "" || s.Ref != "" || len(s.AllOf) > 0 {
		return false
	}
	switch x := v.(type) {
	case string:
		return s.Type == "string"
	case bool:
		return s.Type == "boolean"
	case float64:
		return s.Type == "number" || s.Type == "integer" && x == math.Trunc(x) && !math.IsInf(x, 0)
	}
	return false
}

func hasType(v any, types []string) bool {
	got := jsonTypeOf(v)
	for _, t := range types {
		if t == got || t == "number" && got == "integer" {
			return true
		}
		if got == "unknown" { // leave exotic Go values to the validator
			return true
		}
	}
	return false
}

// coerceTo tries each allowed type in order.
func coerceTo(v any, types []string, s *jsonschema.Schema) (any, bool) {
	// [x] -> x when a scalar is wanted and the single element fits (or can be made to).
	if a, ok := v.([]any); ok && len(a) == 1 {
		if hasType(a[0], types) {
			return a[0], true
		}
		if _, isArr := a[0].([]any); !isArr {
			if nv, ok := coerceTo(a[0], types, s); ok {
				return nv, true
			}
		}
	}
	for _, t := range types {
		if nv, ok := coerceOne(v, t); ok {
			return nv, true
		}
	}
	return v, false
}

func coerceOne(v any, t string) (any, bool) {
	switch t {
	case "number", "integer":
		var f float64
		switch x := v.(type) {
		case string:
			str := strings.TrimSpace(x)
			if !validJSONNumber(str) {
				return v, false
			}
			var err error
			if f, err = strconv.ParseFloat(str, 64); err != nil {
				return v, false
			}
		case bool:
			if x {
				f = 1
			}
		case nil:
		default:
			return v, false
		}
		if t == "integer" && f != math.Trunc(f) {
			return v, false
		}
		return f, true
	case "string":
		switch x := v.(type) {
		case float64:
			return strconv.FormatFloat(x, 'f', -1, 64), true
		case bool:
			return strconv.FormatBool(x), true
		case nil:
			return "", true
		}
	case "boolean":
		switch x := v.(type) {
		case string:
			switch x {
			case "true":
				return true, true
			case "false":
				return false, true
			}
		case float64:
			switch x {
			case 1:
				return true, true
			case 0:
				return false, true
			}
		case nil:
			return false, true
		}
	case "null":
		switch x := v.(type) {
		case string:
			if x == "" {
				return nil, true
			}
		case float64:
			if x == 0 {
				return nil, true
			}
		case bool:
			if !x {
				return nil, true
			}
		}
	case "array":
		if str, ok := v.(string); ok {
			if t := strings.TrimSpace(str); strings.HasPrefix(t, "[") {
				var a []any
				if json.Unmarshal([]byte(t), &a) == nil && a != nil {
					return a, true
				}
			}
		}
		switch v.(type) {
		case map[string]any, []any:
			return v, false
		}
		return []any{v}, true
	case "object":
		if str, ok := v.(string); ok {
			if t := strings.TrimSpace(str); strings.HasPrefix(t, "{") {
				var m map[string]any
				if json.Unmarshal([]byte(t), &m) == nil && m != nil {
					return m, true
				}
			}
		}
	}
	return v, false
}

// describe shows a value in an issue message: its JSON type and, for scalars, the value.
func describe(v any) string {
	t := jsonTypeOf(v)
	switch t {
	case "integer":
		t = "number"
	case "array", "object", "null", "unknown":
		return t
	}
	j, err := json.Marshal(v)
	if err != nil {
		return t
	}
	if len(j) > 80 {
		j = append(j[:77:77], "..."...)
	}
	return t + " " + string(j)
}
