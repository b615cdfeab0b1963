package models

import (
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/skills"
)

// Skill instruction budgets per model size (seed "技能指令分级截断").
const (
	SkillCharsSmall  = 1500
	SkillCharsMedium = 4000
	SkillCharsLarge  = 8000
)

// DefaultHarness is the built-in harness per model size, the layer between ai.agent and
// ai.agent.modelHarness. Small models (≤ 8B) get fewer iterations, tools and skills, short
// skill instructions and sequential tool execution: they lose track of long tool lists and
// of parallel calls. Medium and large models only get their skill budget; everything else
// inherits ai.agent.
var DefaultHarness = map[string]config.Harness{
	skills.SizeSmall:  {MaxIterations: 8, MaxTools: 6, MaxSkills: 2, SkillInstructionMaxChars: SkillCharsSmall, ToolExecution: "sequential"},
	skills.SizeMedium: {SkillInstructionMaxChars: SkillCharsMedium},
	skills.SizeLarge:  {SkillInstructionMaxChars: SkillCharsLarge},
}

// ResolveHarness returns the effective harness of (provider alias, model id). Layers, each
// deep-merged over the previous one (a zero field inherits; a non-nil array replaces the
// inherited array whole, even when empty — the seed's ADR 0006 rule):
//
//  1. ai.agent itself (maxIterations, maxTools, maxSkills, toolExecution, thinking);
//  2. DefaultHarness for the model's size;
//  3. ai.agent.skillInstructionMaxChars when set (the seed's manual override);
//  4. ai.agent.modelHarness.providerPatterns whose glob (* and ?) matches the provider alias,
//     least specific first so the most specific wins: specificity is the number of literal
//     (non-wildcard) characters, ties broken by key order;
//  5. ai.agent.modelHarness.models["<model>"], then models["<provider>:<model>"].
//
// The size is skills.ModelSize(model, hint) where hint is the first non-empty modelSizeHint of
// the models entries, the matching provider patterns (most specific first) and ai.agent; the
// resolved ModelSizeHint field always holds the size used.
func ResolveHarness(agentCfg config.Agent, provider, modelID string) config.Harness {
	mh := agentCfg.ModelHarness
	var overrides []config.Harness
	for _, pat := range patternOrder(mh.ProviderPatterns) {
		if globMatch(strings.ToLower(pat), strings.ToLower(provider)) {
			overrides = append(overrides, mh.ProviderPatterns[pat])
		}
	}
	for _, key := range []string{modelID, provider + ":" + modelID} {
		if h, ok := mh.Models[key]; ok {
			overrides = append(overrides, h)
		}
	}

	hint := agentCfg.ModelSizeHint
	for i := len(overrides) - 1; i >= 0; i-- {
		if overrides[i].ModelSizeHint != "" {
			hint = overrides[i].ModelSizeHint
			break
		}
	}
	size := skills.ModelSize(modelID, hint)

	h := config.Harness{
		MaxIterations: agentCfg.MaxIterations,
		MaxTools:      agentCfg.MaxTools,
		MaxSkills:     agentCfg.MaxSkills,
		ToolExecution: agentCfg.ToolExecution,
		Thinking:      agentCfg.Thinking,
	}
	h = MergeHarness(h, DefaultHarness[size])
	if agentCfg.SkillInstructionMaxChars > 0 {
		h.SkillInstructionMaxChars = agentCfg.SkillInstructionMaxChars
	}
	for _, o := range overrides {
		h = MergeHarness(h, o)
	}
	h.ModelSizeHint = size
	return h
}

// MergeHarness deep-merges over onto base: every non-zero scalar of over wins, and a non-nil
// AlwaysTools replaces base's.
func MergeHarness(base, over config.Harness) config.Harness {
	if over.MaxIterations != 0 {
		base.MaxIterations = over.MaxIterations
	}
	if over.MaxTools != 0 {
		base.MaxTools = over.MaxTools
	}
	if over.MaxSkills != 0 {
		base.MaxSkills = over.MaxSkills
	}
	if over.ModelSizeHint != "" {
		base.ModelSizeHint = over.ModelSizeHint
	}
	if over.SkillInstructionMaxChars != 0 {
		base.SkillInstructionMaxChars = over.SkillInstructionMaxChars
	}
	if over.ToolExecution != "" {
		base.ToolExecution = over.ToolExecution
	}
	if over.AlwaysTools != nil {
		base.AlwaysTools = slices.Clone(over.AlwaysTools)
	}
	if over.Thinking != "" {
		base.Thinking = over.Thinking
	}
	return base
}

// patternOrder sorts provider patterns least specific first.
func patternOrder(pats map[string]config.Harness) []string {
	keys := slices.Sorted(maps.Keys(pats))
	literal := func(p string) int { return len(p) - strings.Count(p, "*") - strings.Count(p, "?") }
	slices.SortStableFunc(keys, func(a, b string) int { return literal(a) - literal(b) })
	return keys
}

// Harnesses resolves harnesses (ResolveHarness) for one ai.agent configuration and keeps each
// answer: resolving sorts the provider patterns and matches the model id against a regular
// expression, work the turn worker would otherwise redo for every turn of the same model.
// Safe for concurrent use. The AlwaysTools of a returned Harness is shared by every call for the
// same provider and model: read it, never modify it.
type Harnesses struct {
	cfg  config.Agent
	mu   sync.RWMutex
	memo map[harnessKey]config.Harness
}

type harnessKey struct{ provider, model string }

// maxHarnesses bounds Harnesses' memo; past it a pair is resolved each time. Pairs come from
// the configured models and a chat's /model choice among them, so far fewer in practice.
const maxHarnesses = 1024

// NewHarnesses returns a Harnesses for cfg, which the caller does not modify afterwards.
func NewHarnesses(cfg config.Agent) *Harnesses {
	return &Harnesses{cfg: cfg, memo: make(map[harnessKey]config.Harness)}
}

// Resolve is ResolveHarness(cfg, provider, modelID), computed once per pair.
func (h *Harnesses) Resolve(provider, modelID string) config.Harness {
	k := harnessKey{provider, modelID}
	h.mu.RLock()
	r, ok := h.memo[k]
	h.mu.RUnlock()
	if ok {
		return r
	}
	r = ResolveHarness(h.cfg, provider, modelID)
	h.mu.Lock()
	if len(h.memo) < maxHarnesses {
		h.memo[k] = r
	}
	h.mu.Unlock()
	return r
}
