package filepolicy

import "strings"

// LongOption resolves a GNU long option name ("--compress-prog") against
// the full names a program accepts, the way getopt_long does: an exact
// match wins; otherwise a prefix of exactly one name selects that name. It
// returns the full name and true, or "" and false when name matches none
// or is an ambiguous prefix of several (getopt refuses those too).
//
// Matching by prefix is what keeps a refused option refused: a table that
// lists "--compress-program" must also catch "--compress-p".
func LongOption(name string, names ...[]string) (string, bool) {
	if !strings.HasPrefix(name, "--") || len(name) < 3 {
		return "", false
	}
	match := ""
	for _, list := range names {
		for _, n := range list {
			if n == name {
				return n, true
			}
			if strings.HasPrefix(n, name) {
				if match != "" && match != n {
					return "", false
				}
				match = n
			}
		}
	}
	return match, match != ""
}
