package llm

import (
	"strconv"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// hasInPlaceCycle reports whether a schema can reach itself through keywords that apply to the
// same value ($ref, $dynamicRef, allOf, anyOf, oneOf, not, if/then/else, dependentSchemas)
// without descending into a property or item. Validating against such a schema ({"$ref": "#"})
// recurses forever in jsonschema-go and kills the process with a stack overflow, which cannot
// be recovered, so such schemas are refused when compiled. Recursive schemas that descend
// (a tree whose children items refer to "#") are fine.
//
// Local references are resolved: "#", JSON pointers "#/...", and anchors "#name". Remote
// references cannot be resolved by the validator anyway (there is no loader).
func hasInPlaceCycle(root *jsonschema.Schema) bool {
	anchors := map[string]*jsonschema.Schema{}
	var nodes []*jsonschema.Schema
	seen := map[*jsonschema.Schema]bool{}
	var collect func(s *jsonschema.Schema)
	collect = func(s *jsonschema.Schema) {
		if s == nil || seen[s] {
			return
		}
		seen[s] = true
		nodes = append(nodes, s)
		if s.Anchor != "" {
			anchors[s.Anchor] = s
		}
		if s.DynamicAnchor != "" {
			anchors[s.DynamicAnchor] = s
		}
		for _, c := range schemaChildren(s) {
			collect(c)
		}
	}
	collect(root)

	resolve := func(ref string) *jsonschema.Schema {
		if ref == "" || !strings.HasPrefix(ref, "#") {
			return nil
		}
		if ref == "#" {
			return root
		}
		if !strings.HasPrefix(ref, "#/") {
			return anchors[ref[1:]]
		}
		return pointerLookup(root, strings.Split(ref[2:], "/"))
	}

	const (
		unvisited = iota
		visiting
		done
	)
	state := map[*jsonschema.Schema]int{}
	var visit func(s *jsonschema.Schema) bool
	visit = func(s *jsonschema.Schema) bool {
		if s == nil {
			return false
		}
		switch state[s] {
		case visiting:
			return true
		case done:
			return false
		}
		state[s] = visiting
		next := []*jsonschema.Schema{resolve(s.Ref), resolve(s.DynamicRef), s.Not, s.If, s.Then, s.Else}
		next = append(next, s.AllOf...)
		next = append(next, s.AnyOf...)
		next = append(next, s.OneOf...)
		for _, d := range s.DependentSchemas {
			next = append(next, d)
		}
		for _, d := range s.DependencySchemas {
			next = append(next, d)
		}
		for _, n := range next {
			if visit(n) {
				return true
			}
		}
		state[s] = done
		return false
	}
	for _, n := range nodes {
		if visit(n) {
			return true
		}
	}
	return false
}

// schemaChildren lists every sub-schema of s.
func schemaChildren(s *jsonschema.Schema) []*jsonschema.Schema {
	out := []*jsonschema.Schema{s.Not, s.If, s.Then, s.Else, s.Items, s.AdditionalItems, s.Contains,
		s.UnevaluatedItems, s.AdditionalProperties, s.PropertyNames, s.UnevaluatedProperties, s.ContentSchema}
	out = append(out, s.AllOf...)
	out = append(out, s.AnyOf...)
	out = append(out, s.OneOf...)
	out = append(out, s.ItemsArray...)
	out = append(out, s.PrefixItems...)
	for _, m := range []map[string]*jsonschema.Schema{s.Defs, s.Definitions, s.Properties, s.PatternProperties, s.DependentSchemas, s.DependencySchemas} {
		for _, c := range m {
			out = append(out, c)
		}
	}
	return out
}

// pointerLookup follows a JSON pointer (already split, without the leading "#/") in a schema.
func pointerLookup(s *jsonschema.Schema, segs []string) *jsonschema.Schema {
	unesc := func(x string) string { return strings.ReplaceAll(strings.ReplaceAll(x, "~1", "/"), "~0", "~") }
	index := func(list []*jsonschema.Schema, x string) *jsonschema.Schema {
		i, err := strconv.Atoi(x)
		if err != nil || i < 0 || i >= len(list) {
			return nil
		}
		return list[i]
	}
	for i := 0; s != nil && i < len(segs); i++ {
		seg := unesc(segs[i])
		arg := ""
		if i+1 < len(segs) {
			arg = unesc(segs[i+1])
		}
		switch seg {
		case "$defs":
			s, i = s.Defs[arg], i+1
		case "definitions":
			s, i = s.Definitions[arg], i+1
		case "properties":
			s, i = s.Properties[arg], i+1
		case "patternProperties":
			s, i = s.PatternProperties[arg], i+1
		case "dependentSchemas":
			s, i = s.DependentSchemas[arg], i+1
		case "allOf":
			s, i = index(s.AllOf, arg), i+1
		case "anyOf":
			s, i = index(s.AnyOf, arg), i+1
		case "oneOf":
			s, i = index(s.OneOf, arg), i+1
		case "prefixItems":
			s, i = index(s.PrefixItems, arg), i+1
		case "items":
			if s.ItemsArray != nil {
				s, i = index(s.ItemsArray, arg), i+1
			} else {
				s = s.Items
			}
		case "not":
			s = s.Not
		case "if":
			s = s.If
		case "then":
			s = s.Then
		case "else":
			s = s.Else
		case "additionalProperties":
			s = s.AdditionalProperties
		case "additionalItems":
			s = s.AdditionalItems
		case "contains":
			s = s.Contains
		case "propertyNames":
			s = s.PropertyNames
		case "unevaluatedItems":
			s = s.UnevaluatedItems
		case "unevaluatedProperties":
			s = s.UnevaluatedProperties
		case "contentSchema":
			s = s.ContentSchema
		default:
			return nil
		}
	}
	return s
}
