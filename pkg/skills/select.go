package skills

import (
	"slices"
	"sort"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/tools"
)

// SelectOptions bound a selection (ai.agent.maxSkills / maxTools).
type SelectOptions struct {
	MaxSkills int // default 5
	MaxTools  int // default 12
	// Always names tools offered whatever the message (ask_user, activate_skill, ...). They
	// come first and are kept even beyond MaxTools.
	Always []string
	// MinScore is the relevance a skill or a stand-alone tool needs to be selected (default 2:
	// one keyword or name hit, or two description terms).
	MinScore int
}

// Selection is what a turn gets.
type Selection struct {
	Skills []*Skill
	Tools  []tools.Tool
}

// Select is the seed's two-level selection. Level 1: skills whose keywords, name or
// description match message, best first, at most MaxSkills. Level 2: candidate tools are the
// Always tools, the tools the selected skills list, and any available tool that matches the
// message on its own; they are ranked by relevance (name, keyword and description overlap,
// with a bonus for tools of selected skills) and cut at MaxTools. available should already be
// gated for the sender (tools.Filter): a skill cannot smuggle in a tool the sender may not use.
func Select(message string, all []*Skill, available []tools.Tool, o SelectOptions) Selection {
	if o.MaxSkills <= 0 {
		o.MaxSkills = 5
	}
	if o.MaxTools <= 0 {
		o.MaxTools = 12
	}
	if o.MinScore <= 0 {
		o.MinScore = 2
	}
	msg := strings.ToLower(message)
	msgTerms := termSet(msg)

	type scored struct {
		i     int
		score int
	}
	var sk []scored
	for i, s := range all {
		score := matchScore(msg, msgTerms, s.Name, s.Description, s.Keywords)
		if score >= o.MinScore {
			sk = append(sk, scored{i, score})
		}
	}
	sort.SliceStable(sk, func(a, b int) bool { return sk[a].score > sk[b].score })
	if len(sk) > o.MaxSkills {
		sk = sk[:o.MaxSkills]
	}
	var sel Selection
	fromSkill := map[string]bool{}
	for _, x := range sk {
		sel.Skills = append(sel.Skills, all[x.i])
		for _, t := range all[x.i].Tools {
			fromSkill[t] = true
		}
	}

	// The result is allocated once, at its final size: a tools.Tool is large, and growing the
	// slice tool by tool copied every turn's resident tools three times over.
	var alwaysBuf [8]int
	always := alwaysBuf[:0]
	var cands []scored
	for i := range available {
		t := &available[i]
		if slices.Contains(o.Always, t.Name) {
			always = append(always, i)
			continue
		}
		score := matchScore(msg, msgTerms, t.Name, t.Description, t.Keywords)
		if fromSkill[t.Name] {
			score += 10
		} else if score < o.MinScore {
			continue
		}
		cands = append(cands, scored{i, score})
	}
	sort.SliceStable(cands, func(a, b int) bool { return cands[a].score > cands[b].score })
	if n := len(always) + max(0, min(len(cands), o.MaxTools-len(always))); n > 0 {
		sel.Tools = make([]tools.Tool, 0, n)
	}
	for _, i := range always {
		sel.Tools = append(sel.Tools, available[i])
	}
	for _, c := range cands {
		if len(sel.Tools) >= o.MaxTools {
			break
		}
		sel.Tools = append(sel.Tools, available[c.i])
	}
	return sel
}

// matchScore: 3 per keyword found in the message, 3 when the name (or its words) appears,
// 1 per shared description term (ASCII words of 3+ letters, CJK bigrams).
func matchScore(msg string, msgTerms map[string]bool, name, desc string, keywords []string) int {
	p := prepare(name, desc, keywords)
	score := 0
	for _, k := range p.keywords {
		if keywordIn(msg, k) {
			score += 3
		}
	}
	if p.name != "" && (strings.Contains(msg, p.name) || p.spaced != "" && strings.Contains(msg, p.spaced)) {
		score += 3
	}
	// Each distinct description term the message shares scores one.
	dt := p.desc
	if len(msgTerms) < len(dt) {
		for t := range msgTerms {
			if dt[t] {
				score++
			}
		}
	} else {
		for t := range dt {
			if msgTerms[t] {
				score++
			}
		}
	}
	return score
}

// prepared is what matchScore needs of a skill or tool besides the message, worked out once
// per definition: every message is scored against every tool and skill, and lower-casing
// their keywords and names (CJK ones allocate) and splitting their descriptions cost more
// than the scoring itself. The catalog changes rarely, so the cache hits nearly always.
type prepared struct {
	keywords     []string        // lower-cased, trimmed, empty ones dropped
	name, spaced string          // lower-cased name; and with '_' and '-' as spaces, "" when that is the same
	desc         map[string]bool // termSet of the lower-cased description
}

// prepKey identifies a definition: its name and description, and its keyword slice by its
// backing array (a catalog hands out the same slice on every turn; a rebuilt one is only a
// miss). So a definition's keywords must not be changed in place once it has been scored.
type prepKey struct {
	name, desc string
	kw         *string
	nkw        int
}

// prepCache holds prepared definitions, bounded by maxPrepCache (past it, it starts over).
var prepCache struct {
	sync.RWMutex
	m map[prepKey]*prepared
}

const maxPrepCache = 4096

func prepare(name, desc string, keywords []string) *prepared {
	key := prepKey{name: name, desc: desc, nkw: len(keywords)}
	if len(keywords) > 0 {
		key.kw = &keywords[0]
	}
	prepCache.RLock()
	p, ok := prepCache.m[key]
	prepCache.RUnlock()
	if ok {
		return p
	}
	p = &prepared{name: strings.ToLower(name), desc: termSet(strings.ToLower(desc))}
	if sp := strings.Map(underscoreToSpace, p.name); sp != p.name {
		p.spaced = sp
	}
	for _, k := range keywords {
		if k = strings.ToLower(strings.TrimSpace(k)); k != "" {
			p.keywords = append(p.keywords, k)
		}
	}
	prepCache.Lock()
	if prepCache.m == nil || len(prepCache.m) >= maxPrepCache {
		prepCache.m = map[prepKey]*prepared{}
	}
	prepCache.m[key] = p
	prepCache.Unlock()
	return p
}

// keywordIn reports whether keyword k occurs in msg. A keyword that starts with a letter or
// digit of a spaced script (English "run") must start a word there, so "run" does not match
// "prune" while "http" matches "https://…" and "run" matches "running"; a CJK keyword ("网页",
// "上次") matches anywhere, as those scripts have no spaces between words.
func keywordIn(msg, k string) bool {
	first, _ := utf8.DecodeRuneInString(k)
	if isCJK(first) || !(unicode.IsLetter(first) || unicode.IsDigit(first)) {
		return strings.Contains(msg, k)
	}
	for off := 0; off < len(msg); {
		i := strings.Index(msg[off:], k)
		if i < 0 {
			return false
		}
		at := off + i
		prev, _ := utf8.DecodeLastRuneInString(msg[:at])
		if at == 0 || isCJK(prev) || !(unicode.IsLetter(prev) || unicode.IsDigit(prev)) {
			return true
		}
		off = at + len(k)
	}
	return false
}

var stopwords = map[string]bool{"the": true, "and": true, "for": true, "with": true, "from": true, "this": true,
	"that": true, "you": true, "your": true, "are": true, "can": true, "use": true, "into": true, "how": true,
	"what": true, "please": true}

// termSet splits text into ASCII words (3+ letters, no stopwords) and bigrams of CJK runs, so
// Chinese text without spaces still overlaps meaningfully.
func termSet(s string) map[string]bool {
	out := map[string]bool{}
	forEachTerm(s, func(t string) { out[t] = true })
	return out
}

func isCJK(r rune) bool {
	if r < 0x1100 { // below Hangul Jamo: no CJK script, skip the table lookups
		return false
	}
	return unicode.Is(unicode.Han, r) || unicode.Is(unicode.Hiragana, r) || unicode.Is(unicode.Katakana, r) || unicode.Is(unicode.Hangul, r)
}

// forEachTerm calls fn with every term of s (already lower-cased), as substrings of s so no
// term is allocated.
func forEachTerm(s string, fn func(string)) {
	wordStart, cjkStart := -1, -1
	prevCJK := -1 // byte offset of the previous CJK rune in the current run
	flushWord := func(end int) {
		if wordStart >= 0 {
			if w := s[wordStart:end]; utf8.RuneCountInString(w) >= 3 && !stopwords[w] {
				fn(w)
			}
			wordStart = -1
		}
	}
	for i, r := range s {
		switch {
		case isCJK(r):
			flushWord(i)
			if cjkStart >= 0 && prevCJK >= 0 {
				fn(s[prevCJK : i+utf8.RuneLen(r)])
			}
			if cjkStart < 0 {
				cjkStart = i
			}
			prevCJK = i
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			cjkStart, prevCJK = -1, -1
			if wordStart < 0 {
				wordStart = i
			}
		default:
			flushWord(i)
			cjkStart, prevCJK = -1, -1
		}
	}
	flushWord(len(s))
}

func underscoreToSpace(r rune) rune {
	if r == '_' || r == '-' {
		return ' '
	}
	return r
}
