// Package skills loads skills/<name>/SKILL.md files, keeps them fresh while the bot runs (hot
// reload by polling), selects the skills and tools relevant to a message (the seed's two-level
// selection) and sizes skill instructions for the model (the seed's "小模型适配").
//
// A SKILL.md starts with YAML frontmatter:
//
//	---
//	name: weather            # required, [a-z0-9_-], must equal the directory name
//	description: 查询天气     # required
//	tools: [web_fetch]       # tools the skill uses (offered when the skill is selected)
//	keywords: [天气, weather] # matched against the user's message
//	---
//	# Weather
//	intro ...
//	## 快速操作               (or "## Quick Actions": the summary small models get)
//	1. ...
//	## 详细说明
//	...
//
// Hot reload polls the directory (default every 2s) comparing each SKILL.md's size and mtime,
// rather than using inotify: it needs no extra dependency and works on bind mounts and network
// file systems where inotify events do not arrive.
package skills

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/tools/frontmatter"
)

// FileName is the skill file inside a skill directory.
const FileName = "SKILL.md"

// ErrInvalidSkill wraps every SKILL.md validation failure.
var ErrInvalidSkill = errors.New("invalid skill")

// ErrNotFound is returned for an unknown skill name.
var ErrNotFound = errors.New("skill not found")

// Skill is one parsed SKILL.md.
type Skill struct {
	Name        string
	Description string
	Tools       []string
	Keywords    []string
	// Body is the Markdown after the frontmatter.
	Body string
	// Intro is the body before its first "## " heading.
	Intro string
	// QuickActions is the "## 快速操作" / "## Quick Actions" section (heading included), or "".
	QuickActions string
	Path         string
	ModTime      time.Time
}

type frontMatter struct {
	Name        string   `yaml:"name"`
	Description string   `yaml:"description"`
	Tools       []string `yaml:"tools"`
	Keywords    []string `yaml:"keywords"`
	// Accepted for compatibility with skill files written for other runtimes; not used.
	Version string         `yaml:"version"`
	Author  string         `yaml:"author"`
	License string         `yaml:"license"`
	Tags    []string       `yaml:"tags"`
	Meta    map[string]any `yaml:"metadata"`
}

var skillNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// ValidName reports whether name can be a skill (and directory) name.
func ValidName(name string) bool { return skillNameRE.MatchString(name) }

// Parse parses a SKILL.md. path is used in error messages and kept in the Skill.
func Parse(path string, data []byte) (*Skill, error) {
	fmRaw, body, err := frontmatter.Split(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidSkill, path, err)
	}
	var fm frontMatter
	if err := frontmatter.Decode(fmRaw, &fm); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidSkill, path, err)
	}
	fm.Name = strings.TrimSpace(fm.Name)
	switch {
	case fm.Name == "":
		return nil, fmt.Errorf("%w: %s: field name is required", ErrInvalidSkill, path)
	case !ValidName(fm.Name):
		return nil, fmt.Errorf("%w: %s: field name %q: want lowercase [a-z0-9_-], at most 64 characters", ErrInvalidSkill, path, fm.Name)
	case strings.TrimSpace(fm.Description) == "":
		return nil, fmt.Errorf("%w: %s: field description is required", ErrInvalidSkill, path)
	}
	for i, t := range fm.Tools {
		if strings.TrimSpace(t) == "" {
			return nil, fmt.Errorf("%w: %s: field tools[%d] is empty", ErrInvalidSkill, path, i)
		}
	}
	s := &Skill{Name: fm.Name, Description: strings.TrimSpace(fm.Description), Tools: fm.Tools,
		Keywords: fm.Keywords, Body: strings.TrimSpace(body), Path: path}
	s.Intro, s.QuickActions = splitSections(s.Body)
	return s, nil
}

var quickHeadings = []string{"快速操作", "quick actions", "quick action", "quickactions"}

// splitSections returns the text before the first level-2 heading and the quick-actions
// section (up to the next heading of level 1 or 2).
func splitSections(body string) (intro, quick string) {
	lines := strings.Split(body, "\n")
	introEnd := len(lines)
	qStart, qEnd := -1, len(lines)
	for i, l := range lines {
		t := strings.TrimSpace(l)
		isH2 := strings.HasPrefix(t, "## ")
		isH1 := strings.HasPrefix(t, "# ")
		if isH2 && introEnd == len(lines) {
			introEnd = i
		}
		if qStart >= 0 && i > qStart && (isH1 || isH2) {
			qEnd = i
			break
		}
		if isH2 && qStart < 0 {
			h := strings.ToLower(strings.TrimSpace(strings.TrimPrefix(t, "## ")))
			for _, q := range quickHeadings {
				if h == q || strings.HasPrefix(h, q) {
					qStart = i
				}
			}
		}
	}
	intro = strings.TrimSpace(strings.Join(lines[:introEnd], "\n"))
	if qStart >= 0 {
		quick = strings.TrimSpace(strings.Join(lines[qStart:qEnd], "\n"))
	}
	return intro, quick
}

// Model sizes.
const (
	SizeSmall  = "small"
	SizeMedium = "medium"
	SizeLarge  = "large"
)

// Instruction limits per model size (seed: 1500 / 4000 / 8000 characters).
var instructionLimits = map[string]int{SizeSmall: 1500, SizeMedium: 4000, SizeLarge: 8000}

// InstructionLimit returns the character budget for size (override > 0 wins).
func InstructionLimit(size string, override int) int {
	if override > 0 {
		return override
	}
	if n, ok := instructionLimits[size]; ok {
		return n
	}
	return instructionLimits[SizeMedium]
}

// Instructions returns the text to load into the model for this skill: for small models the
// intro and the quick-actions section when the skill has one (the seed's summary protocol),
// otherwise the whole body; cut to InstructionLimit(size, maxChars) characters (runes) with a
// marker saying so.
func (s *Skill) Instructions(size string, maxChars int) string {
	limit := InstructionLimit(size, maxChars)
	text := s.Body
	if size == SizeSmall && s.QuickActions != "" {
		text = strings.TrimSpace(s.Intro + "\n\n" + s.QuickActions)
	}
	return truncateRunes(text, limit)
}

const truncMarker = "\n…(skill instructions truncated)"

func truncateRunes(s string, limit int) string {
	r := []rune(s)
	if len(r) <= limit {
		return s
	}
	keep := limit - len([]rune(truncMarker))
	if keep < 0 {
		keep = 0
	}
	return string(r[:keep]) + truncMarker
}

var paramRE = regexp.MustCompile(`(?i)(?:^|[^a-z0-9.])(?:(\d+)x)?(\d+(?:\.\d+)?)([bm])(?:$|[^a-z0-9])`)

var apiFamilies = []string{"gpt-", "gpt4", "o1", "o3", "o4", "claude", "gemini", "deepseek", "grok", "glm-4", "moonshot", "kimi", "doubao", "ernie", "hunyuan", "qwen-max", "qwen-plus", "qwen-turbo", "mistral-large", "command-r"}

// ModelSize infers small / medium / large from a model id (seed "模型大小推断"): a parameter
// count in the name decides (≤ 8B small, ≤ 32B medium, above large; "8x7b" counts 56B);
// without one, known API families (gpt-*, claude, gemini, ...) are large and anything else is
// medium. A valid hint (ai.agent.modelSizeHint) overrides the inference.
func ModelSize(modelID, hint string) string {
	switch h := strings.ToLower(strings.TrimSpace(hint)); h {
	case SizeSmall, SizeMedium, SizeLarge:
		return h
	}
	id := strings.ToLower(modelID)
	if m := paramRE.FindStringSubmatch(id); m != nil {
		var n float64
		fmt.Sscanf(m[2], "%g", &n)
		if m[3] == "m" {
			n /= 1000
		}
		if m[1] != "" {
			var k float64
			fmt.Sscanf(m[1], "%g", &k)
			n *= k
		}
		switch {
		case n <= 8:
			return SizeSmall
		case n <= 32:
			return SizeMedium
		default:
			return SizeLarge
		}
	}
	base := id
	if i := strings.LastIndex(base, "/"); i >= 0 {
		base = base[i+1:]
	}
	for _, f := range apiFamilies {
		if strings.HasPrefix(base, f) {
			return SizeLarge
		}
	}
	return SizeMedium
}

// LoadFile reads and parses one SKILL.md; the skill's name must match its directory.
func LoadFile(path string) (*Skill, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read skill %s: %w", path, err)
	}
	s, err := Parse(path, data)
	if err != nil {
		return nil, err
	}
	if dir := filepath.Base(filepath.Dir(path)); dir != s.Name {
		return nil, fmt.Errorf("%w: %s: field name %q does not match its directory %q", ErrInvalidSkill, path, s.Name, dir)
	}
	if st, err := os.Stat(path); err == nil {
		s.ModTime = st.ModTime()
	}
	return s, nil
}
