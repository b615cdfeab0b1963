// Package frontmatter splits Markdown files that start with a YAML frontmatter block
// (*.tool.md, *.agent.md, SKILL.md) and decodes the block strictly.
package frontmatter

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// ErrNoFrontmatter is returned when the file does not start with a "---" line.
var ErrNoFrontmatter = errors.New("no YAML frontmatter (the file must start with a --- line)")

// ErrUnterminated is returned when the closing "---" line is missing.
var ErrUnterminated = errors.New("frontmatter is not closed by a --- line")

// Split returns the frontmatter block (without the --- lines) and the body. A UTF-8 BOM and
// CRLF line endings are accepted.
func Split(data []byte) (fm []byte, body string, err error) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	text := strings.ReplaceAll(string(data), "\r\n", "\n")
	if !strings.HasPrefix(text, "---\n") {
		if strings.TrimSpace(text) == "---" {
			return nil, "", ErrUnterminated
		}
		return nil, "", ErrNoFrontmatter
	}
	rest := text[4:]
	if strings.HasPrefix(rest, "---\n") || rest == "---" {
		return nil, strings.TrimPrefix(strings.TrimPrefix(rest, "---"), "\n"), nil
	}
	end := strings.Index(rest, "\n---\n")
	if end < 0 {
		if strings.HasSuffix(rest, "\n---") {
			return []byte(rest[:len(rest)-4]), "", nil
		}
		return nil, "", ErrUnterminated
	}
	return []byte(rest[:end]), rest[end+5:], nil
}

// Decode parses fm into v rejecting unknown keys, so a typo ("requiredAnyRoles") is an error
// naming the key instead of a silently ignored setting.
func Decode(fm []byte, v any) error {
	if len(bytes.TrimSpace(fm)) == 0 {
		return nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(fm))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("frontmatter: %w", err)
	}
	return nil
}
