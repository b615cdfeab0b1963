package config

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/agnivade/levenshtein"
	"gopkg.in/yaml.v3"
)

// checkKeys walks the document against the Config struct: every mapping key must be a field
// (by its yaml tag) or a reserved key. It returns one message per unknown key, naming its path
// and, when a known key is close (edit distance, case-insensitive), the key meant. Reserved
// keys that are set are collected in reserved. yaml.v3's KnownFields is not used because it
// works only on a Decoder (the document is decoded from an env-expanded node tree) and its
// messages carry no path and no suggestion.
func checkKeys(n *yaml.Node, t reflect.Type, path string, unknown, reserved *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.DocumentNode {
		for _, c := range n.Content {
			checkKeys(c, t, path, unknown, reserved)
		}
		return
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		checkKeys(n.Alias, t, path, unknown, reserved)
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return // a scalar where a block belongs: the decoder names the type mismatch
		}
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value == "<<" { // a merge key: its mapping's keys belong here
				checkKeys(v, t, path, unknown, reserved)
				continue
			}
			p := join(path, k.Value)
			if isReserved(p) {
				*reserved = append(*reserved, p)
				if _, ok := fields[k.Value]; !ok {
					continue
				}
			}
			ft, ok := fields[k.Value]
			if !ok {
				*unknown = append(*unknown, unknownKey(p, k, fields))
				continue
			}
			checkKeys(v, ft, p, unknown, reserved)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode || t.Elem().Kind() == reflect.Interface {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			checkKeys(n.Content[i+1], t.Elem(), join(path, "*"+n.Content[i].Value), unknown, reserved)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return
		}
		for i, c := range n.Content {
			checkKeys(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i), unknown, reserved)
		}
	}
}

// join appends key to path; a map key is marked with a leading "*" so that isReserved can
// match it against a "*" pattern, and is printed without it.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// display drops the map-key markers of a path.
func display(p string) string { return strings.ReplaceAll(p, ".*", ".") }

func isReserved(p string) bool {
	segs := strings.Split(p, ".")
	for _, r := range reservedKeys {
		rs := strings.Split(r, ".")
		if len(rs) != len(segs) {
			continue
		}
		ok := true
		for i := range rs {
			s := strings.TrimPrefix(segs[i], "*")
			if rs[i] != "*" && rs[i] != s {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func unknownKey(p string, k *yaml.Node, fields map[string]reflect.Type) string {
	msg := fmt.Sprintf("%s (line %d): unknown key", display(p), k.Line)
	if s := suggest(k.Value, fields); s != "" {
		prefix := strings.TrimSuffix(display(p), k.Value)
		msg += fmt.Sprintf(" (did you mean %s%s?)", prefix, s)
	}
	return msg
}

// suggest returns the known key closest to key, when it is close enough to be a typo.
func suggest(key string, fields map[string]reflect.Type) string {
	best, bestD := "", 0
	names := make([]string, 0, len(fields))
	for f := range fields {
		names = append(names, f)
	}
	sort.Strings(names)
	lk := strings.ToLower(key)
	for _, f := range names {
		d := levenshtein.ComputeDistance(lk, strings.ToLower(f))
		if best == "" || d < bestD {
			best, bestD = f, d
		}
	}
	limit := 2
	if len(key) > 8 {
		limit = 3
	}
	if best == "" || bestD > limit || bestD >= len(key) {
		return ""
	}
	return best
}

// yamlFields maps a struct's yaml keys to their types (inline structs flattened).
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if strings.Contains(opts, "inline") {
			for k, v := range yamlFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f.Type
	}
	return out
}

// ReservedWarning is the one warning for the reserved keys a file set.
func ReservedWarning(keys []string) string {
	return "config sets keys that agentbus accepts but does not implement yet (they have no effect): " + strings.Join(keys, ", ")
}
