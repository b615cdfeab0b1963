package models

import (
	"fmt"

	"github.com/agentbus/agentbus/pkg/llm"
)

// Kind is what a turn needs from a model.
type Kind string

const (
	// KindChat is any model that chats (text in, text and tool calls out).
	KindChat Kind = "chat"
	// KindVision additionally takes image input (llm.InputImage).
	KindVision Kind = "vision"
)

// Fits reports whether m serves kind.
func (k Kind) Fits(m *llm.Model) bool {
	if k == KindVision {
		return m.SupportsImages()
	}
	return true
}

// SelectModels returns up to n models of a provider that fit kind, best tier first (n <= 0:
// all). The provider's list is the allowlist when configured, else what discovery found.
func (t *Tiers) SelectModels(reg *llm.Registry, provider string, kind Kind, n int) ([]llm.Model, error) {
	ms, err := reg.Models(provider)
	if err != nil {
		return nil, err
	}
	out := ms[:0]
	for i := range ms {
		if kind.Fits(&ms[i]) {
			out = append(out, ms[i])
		}
	}
	t.Rank(out)
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out, nil
}

// SelectModel returns the best-tier model of a provider that fits kind, or an error wrapping
// ErrNoCandidate when there is none (no models known yet, or none takes images).
func (t *Tiers) SelectModel(reg *llm.Registry, provider string, kind Kind) (*llm.Model, error) {
	ms, err := t.SelectModels(reg, provider, kind, 1)
	if err != nil {
		return nil, err
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("%w: provider %s has no %s model (none configured or discovered yet)", ErrNoCandidate, provider, kind)
	}
	return &ms[0], nil
}

// SelectModels is DefaultTiers.SelectModels.
func SelectModels(reg *llm.Registry, provider string, kind Kind, n int) ([]llm.Model, error) {
	return DefaultTiers.SelectModels(reg, provider, kind, n)
}

// SelectModel is DefaultTiers.SelectModel.
func SelectModel(reg *llm.Registry, provider string, kind Kind) (*llm.Model, error) {
	return DefaultTiers.SelectModel(reg, provider, kind)
}
