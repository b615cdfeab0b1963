package models

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/llm"
)

// DefaultBinding is the binding of the main conversation (ai.agents.zhin).
const DefaultBinding = "zhin"

// ErrNoModel: routing found neither a binding nor any provider with a known model.
var ErrNoModel = errors.New("no model configured: set ai.agents.zhin (provider + model) or a provider with models")

// Route picks the ai.agents binding for a turn whose input carries the media kinds hasMedia
// (for example ["image"]) and resolves it to a model:
//
//  1. among bindings whose match.hasMedia shares a kind with hasMedia, the highest priority
//     (ties: binding name order);
//  2. else ai.agents.zhin;
//  3. else the binding without a match (lowest name first);
//  4. else, with no usable binding at all, the best-tier model over every provider, reported
//     under the name "zhin".
//
// A binding without a model gets its provider's best-tier model: a vision model when the
// turn carries an image and the provider has one, else the best chat model. An explicit model
// must pass the provider's allowlist (llm.Registry.GetModel). Bindings with match rules are
// never used for turns they do not match.
func Route(ai config.AI, reg *llm.Registry, hasMedia []string) (string, *llm.Model, error) {
	return DefaultTiers.Route(ai, reg, hasMedia)
}

// Route is the package-level Route with this tier table.
func (t *Tiers) Route(ai config.AI, reg *llm.Registry, hasMedia []string) (string, *llm.Model, error) {
	kind := KindChat
	if slices.Contains(hasMedia, "image") {
		kind = KindVision
	}
	name, ok := pickBinding(ai.Agents, hasMedia)
	if !ok {
		m, err := t.bestOverall(reg, kind)
		if err != nil {
			return "", nil, err
		}
		return DefaultBinding, m, nil
	}
	m, err := t.resolveBinding(reg, ai.Agents[name], kind)
	if err != nil {
		return name, nil, fmt.Errorf("ai.agents.%s: %w", name, err)
	}
	return name, m, nil
}

func pickBinding(agents map[string]config.AgentBinding, hasMedia []string) (string, bool) {
	names := slices.Sorted(maps.Keys(agents))
	best, bestPrio := "", 0
	for _, n := range names {
		a := agents[n]
		for _, k := range a.Match.HasMedia {
			if slices.Contains(hasMedia, k) && (best == "" || a.Priority > bestPrio) {
				best, bestPrio = n, a.Priority
				break
			}
		}
	}
	if best != "" {
		return best, true
	}
	if _, ok := agents[DefaultBinding]; ok {
		return DefaultBinding, true
	}
	for _, n := range names {
		if len(agents[n].Match.HasMedia) == 0 {
			return n, true
		}
	}
	return "", false
}

// MediaKinds lists the media kinds present in messages, for Route's hasMedia: "image" when
// any content block is an image. (Audio and files are not content blocks of llm.Context yet.)
func MediaKinds(msgs []llm.Message) []string {
	for i := range msgs {
		for j := range msgs[i].Content {
			if msgs[i].Content[j].Type == llm.ContentImage {
				return []string{"image"}
			}
		}
	}
	return nil
}

// resolveBinding turns a binding into a model; kind guides the choice when model is empty.
func (t *Tiers) resolveBinding(reg *llm.Registry, b config.AgentBinding, kind Kind) (*llm.Model, error) {
	if b.Provider == "" {
		return t.bestOverall(reg, kind)
	}
	if b.Model != "" {
		return reg.GetModel(b.Provider, b.Model)
	}
	if kind == KindVision {
		if m, err := t.SelectModel(reg, b.Provider, KindVision); err == nil {
			return m, nil
		}
	}
	m, err := t.SelectModel(reg, b.Provider, KindChat)
	if err != nil {
		// Nothing discovered yet: fall back to the registry's own default (first allowlisted).
		if m2, err2 := reg.GetModel(b.Provider, ""); err2 == nil {
			return m2, nil
		}
		return nil, err
	}
	return m, nil
}

// bestOverall is the best-tier model over every provider (vision preferred for kind vision).
func (t *Tiers) bestOverall(reg *llm.Registry, kind Kind) (*llm.Model, error) {
	for _, k := range []Kind{kind, KindChat} {
		var best *llm.Model
		bestScore := -1
		for _, alias := range reg.Aliases() {
			m, err := t.SelectModel(reg, alias, k)
			if err != nil {
				continue
			}
			if s := t.Score(m.ID); s > bestScore {
				best, bestScore = m, s
			}
		}
		if best != nil {
			return best, nil
		}
	}
	return nil, ErrNoModel
}

// Report renders the /models answer: each provider with its api, where its list comes from,
// its models with tier score and capabilities (best first), then the ai.agents bindings with
// the model each resolves to. status may be nil (no Manager): sources are then inferred.
func Report(ai config.AI, reg *llm.Registry, tiers *Tiers, status []ProviderStatus) string {
	if tiers == nil {
		tiers = DefaultTiers
	}
	byAlias := map[string]ProviderStatus{}
	for _, s := range status {
		byAlias[s.Alias] = s
	}
	var b strings.Builder
	b.WriteString("Providers:\n")
	aliases := reg.Aliases()
	for alias, p := range ai.Providers {
		if p.Driver != "" && !slices.Contains(aliases, alias) {
			aliases = append(aliases, alias)
		}
	}
	slices.Sort(aliases)
	for _, alias := range aliases {
		if d := ai.Providers[alias].Driver; d != "" {
			fmt.Fprintf(&b, "- %s: image generation (%s)\n", alias, d)
		}
		p, ok := reg.Settings(alias)
		if !ok {
			continue
		}
		ms, _ := reg.Models(alias)
		src := SourceNone
		if len(p.Models) > 0 {
			src = SourceAllowlist
		} else if len(ms) > 0 {
			src = SourceDiscovered
		}
		st, ok := byAlias[alias]
		if ok {
			src = st.Source
		}
		fmt.Fprintf(&b, "- %s (%s, %s", alias, p.API, src)
		if ok && !st.FetchedAt.IsZero() {
			fmt.Fprintf(&b, " %s", st.FetchedAt.UTC().Format("2006-01-02 15:04Z"))
		}
		if ok && st.Err != "" {
			fmt.Fprintf(&b, "; last discovery failed: %s", st.Err)
		}
		b.WriteString(")")
		if len(ms) == 0 {
			b.WriteString(": no models known yet\n")
			continue
		}
		b.WriteString(":\n")
		tiers.Rank(ms)
		const maxListed = 25
		for i, m := range ms {
			if i == maxListed {
				fmt.Fprintf(&b, "    … and %d more\n", len(ms)-maxListed)
				break
			}
			fmt.Fprintf(&b, "    %s  tier %d", m.ID, tiers.Score(m.ID))
			var caps []string
			if m.SupportsImages() {
				caps = append(caps, "vision")
			}
			if m.Reasoning {
				caps = append(caps, "reasoning")
			}
			if m.ContextWindow > 0 {
				caps = append(caps, fmt.Sprintf("ctx %dk", m.ContextWindow/1000))
			}
			if len(caps) > 0 {
				fmt.Fprintf(&b, " (%s)", strings.Join(caps, ", "))
			}
			b.WriteByte('\n')
		}
	}
	b.WriteString("Bindings:\n")
	names := slices.Sorted(maps.Keys(ai.Agents))
	for _, n := range names {
		a := ai.Agents[n]
		kind := KindChat
		if slices.Contains(a.Match.HasMedia, "image") {
			kind = KindVision
		}
		fmt.Fprintf(&b, "- %s → ", n)
		if m, err := tiers.resolveBinding(reg, a, kind); err != nil {
			fmt.Fprintf(&b, "%s/%s: %v", a.Provider, a.Model, err)
		} else {
			fmt.Fprintf(&b, "%s", modelRef(m))
			if a.Model == "" {
				b.WriteString(" (tier-selected)")
			}
		}
		if len(a.Match.HasMedia) > 0 {
			fmt.Fprintf(&b, " [media: %s, priority %d]", strings.Join(a.Match.HasMedia, ","), a.Priority)
		}
		b.WriteByte('\n')
	}
	if len(names) == 0 || !slices.Contains(names, DefaultBinding) {
		if _, m, err := tiers.Route(ai, reg, nil); err == nil {
			fmt.Fprintf(&b, "- default chat → %s\n", modelRef(m))
		} else {
			fmt.Fprintf(&b, "- default chat: %v\n", err)
		}
	}
	return strings.TrimRight(b.String(), "\n")
}
