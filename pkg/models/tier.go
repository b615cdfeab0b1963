package models

import (
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/skills"
)

// TierRule scores the model ids its Pattern matches.
//
// Pattern is a case-insensitive glob matched against the whole model id and against its last
// path segment (so "o3*" matches "o3-mini" and "openai/o3", "*claude*opus*" matches
// "cu/claude-opus-4"): '*' matches any run of characters, '?' exactly one, every other
// character itself.
type TierRule struct {
	Pattern string
	Score   int
	// Note says where the score comes from ("seed" = the seed's Tier table).
	Note string
}

// Tiers is an ordered tier table: the first rule whose pattern matches scores the model, so
// more specific patterns (gpt-4o-mini) come before general ones (gpt-4o).
//
// Models that no rule matches score by size (skills.ModelSize): large 70, medium 65, small
// 40–60 (see SmallScore). Small models are capped by SmallScore even when a family rule
// matches ("qwen3:8b" is a small model whatever its family scores), per the seed's
// "小模型 (< 8B) 40-60" row.
type Tiers struct {
	Rules []TierRule
	// Unknown scores of models no rule matches, by size.
	UnknownLarge, UnknownMedium int

	// scores memoizes Score per model id (ids come from a bounded set: configuration and
	// discovery listings). Rules must therefore not change once the table is in use.
	scores sync.Map // string -> int
}

// DefaultTiers is the built-in table: the seed's rows ("模型系列 / 评分示例"), completed with
// neighbouring families so a typical /v1/models listing ranks sensibly. docs/models.md lists
// it.
var DefaultTiers = &Tiers{
	UnknownLarge:  70,
	UnknownMedium: 65,
	Rules: []TierRule{
		// Cheap variants first: they share their family's prefix.
		{"*gpt-5*nano*", 70, "ours"},
		{"*gpt-5*mini*", 86, "ours"},
		{"*gpt-4o-mini*", 75, "ours"},
		{"*gpt-4.1-nano*", 68, "ours"},
		{"*gpt-4.1-mini*", 80, "ours"},
		{"o4-mini*", 89, "ours"},
		{"o3-mini*", 87, "ours"},
		{"o1-mini*", 82, "ours"},
		{"*claude*haiku*", 80, "ours"},
		{"*gemini*flash*lite*", 76, "ours"},
		{"*gemini*flash*", 84, "ours"},
		{"*qwen*turbo*", 74, "ours"},
		{"*glm*flash*", 70, "ours"},

		{"*claude*opus*", 96, "seed"},
		{"*gpt-5*", 95, "seed"},
		{"*claude*sonnet-4?6*", 93, "seed"},
		{"*claude-4?6*sonnet*", 93, "seed"},
		{"*claude*sonnet-4*", 92, "seed range 90-93"},
		{"*claude-4*sonnet*", 92, "seed range 90-93"},
		{"o3*", 91, "seed range 90-93"},
		{"*gemini-3*pro*", 93, "ours"},
		{"*gemini-2.5*pro*", 90, "ours"},
		{"*claude-3?7*sonnet*", 90, "ours"},
		{"*claude*sonnet-3?7*", 90, "ours"},
		{"o4*", 90, "ours"},
		{"*gpt-4.1*", 89, "ours"},
		{"*gpt-4o*", 88, "seed"},
		{"*gemini*pro*", 88, "seed"},
		{"*claude*sonnet*", 88, "ours"},
		{"o1*", 86, "ours"},
		{"*deepseek*r1*", 85, "seed"},
		{"*deepseek-reasoner*", 85, "seed (deepseek-r1)"},
		{"*qwen*max*", 85, "seed"},
		{"*deepseek*", 84, "ours"},
		{"*qwen3*", 83, "ours"},
		{"*qwen*plus*", 80, "ours"},
		{"*kimi*", 82, "seed range 80-82"},
		{"*moonshot*", 80, "seed (kimi)"},
		{"*grok*", 80, "seed range 80-82"},
		{"*mistral-large*", 80, "ours"},
		{"*glm-4*", 78, "seed"},
		{"*glm-5*", 84, "ours"},
		{"*gpt-4*", 78, "ours"},
		{"*llama*", 68, "ours"},
		{"*gemma*", 64, "ours"},
		{"*gpt-3.5*", 55, "ours"},
	},
}

// Score returns the tier score (0–100) of a model id.
func (t *Tiers) Score(modelID string) int {
	if t == nil {
		t = DefaultTiers
	}
	if v, ok := t.scores.Load(modelID); ok {
		return v.(int)
	}
	s := t.score(modelID)
	t.scores.Store(modelID, s)
	return s
}

func (t *Tiers) score(modelID string) int {
	id := strings.ToLower(modelID)
	size := skills.ModelSize(modelID, "")
	score := -1
	base := id
	if i := strings.LastIndexByte(base, '/'); i >= 0 {
		base = base[i+1:]
	}
	for _, r := range t.Rules {
		p := strings.ToLower(r.Pattern)
		if globMatch(p, id) || globMatch(p, base) {
			score = r.Score
			break
		}
	}
	if size == skills.SizeSmall {
		if s := SmallScore(modelID); score < 0 || s < score {
			score = s
		}
	}
	if score < 0 {
		switch size {
		case skills.SizeLarge:
			score = t.UnknownLarge
		default:
			score = t.UnknownMedium
		}
	}
	return max(0, min(100, score))
}

// Score is DefaultTiers.Score.
func Score(modelID string) int { return DefaultTiers.Score(modelID) }

var paramCount = regexp.MustCompile(`(?i)(?:^|[^a-z0-9.])(\d+(?:\.\d+)?)([bm])(?:$|[^a-z0-9])`)

// SmallScore scores a small model (≤ 8B parameters) from 40 (≤ 1B) to 60 (8B), linearly in the
// parameter count; without a count in the id it is 50.
func SmallScore(modelID string) int {
	m := paramCount.FindStringSubmatch(modelID)
	if m == nil {
		return 50
	}
	n := parseFloat(m[1])
	if strings.EqualFold(m[2], "m") {
		n /= 1000
	}
	switch {
	case n <= 1:
		return 40
	case n >= 8:
		return 60
	}
	return 40 + int((n-1)/7*20+0.5)
}

// globMatch matches a lower-case pattern with * and ? against s.
func globMatch(pat, s string) bool {
	// Iterative matcher with backtracking to the last star: linear for practical patterns.
	p, i, star, mark := 0, 0, -1, 0
	for i < len(s) {
		switch {
		case p < len(pat) && (pat[p] == '?' || pat[p] == s[i]):
			p++
			i++
		case p < len(pat) && pat[p] == '*':
			star, mark = p, i
			p++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pat) && pat[p] == '*' {
		p++
	}
	return p == len(pat)
}

// Rank sorts models by descending tier score; ties keep the given order (stable), so a
// provider's own ordering breaks ties.
func (t *Tiers) Rank(ms []llm.Model) {
	scores := make(map[string]int, len(ms))
	for i := range ms {
		scores[ms[i].ID] = t.Score(ms[i].ID)
	}
	slices.SortStableFunc(ms, func(a, b llm.Model) int { return scores[b.ID] - scores[a.ID] })
}
