package models

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/agentbus/agentbus/pkg/llm"
)

// StreamFunc is the shape of llm.Stream (and of loop.StreamFunc, to which Fallback.Stream is
// assignable).
type StreamFunc func(ctx context.Context, model *llm.Model, c *llm.Context, opts *llm.StreamOptions) iter.Seq[llm.Event]

// Fallback reasons.
const (
	ReasonRateLimit   = "rate_limit"  // 429, "rate limit", RESOURCE_EXHAUSTED
	ReasonOverloaded  = "overloaded"  // 529, "overloaded"
	ReasonUnavailable = "unavailable" // other 5xx
	ReasonUnreachable = "unreachable" // connection refused, unknown host, reset before a response
)

var statusRE = regexp.MustCompile(`(?i)\b(?:HTTP|status(?: code)?:?)\s*(\d{3})\b`)

// FallbackReason classifies a failed assistant message: it returns the reason and true when
// another model may well succeed where this one failed — rate limit, overload, a 5xx, an
// unreachable server. Context overflow (compact instead), aborts, other 4xx (the request
// itself is wrong: bad key, bad parameters) and mid-stream protocol errors are not reasons.
func FallbackReason(msg *llm.Message) (string, bool) {
	if msg == nil || msg.StopReason != llm.StopReasonError || msg.ErrorMessage == "" {
		return "", false
	}
	text := msg.ErrorMessage
	if llm.IsContextOverflowError(text) {
		return "", false
	}
	if m := statusRE.FindStringSubmatch(text); m != nil {
		code, _ := strconv.Atoi(m[1])
		switch {
		case code == 429:
			return ReasonRateLimit, true
		case code == 529:
			return ReasonOverloaded, true
		case code >= 500 && code <= 599:
			if strings.Contains(strings.ToLower(text), "overloaded") {
				return ReasonOverloaded, true
			}
			return ReasonUnavailable, true
		default:
			return "", false // another 4xx: the request is wrong, another model will not fix it
		}
	}
	l := strings.ToLower(text)
	switch {
	case strings.Contains(l, "overloaded"):
		return ReasonOverloaded, true
	case strings.Contains(l, "rate limit"), strings.Contains(l, "rate_limit"), strings.Contains(l, "too many requests"),
		strings.Contains(l, "resource_exhausted"):
		return ReasonRateLimit, true
	case strings.Contains(l, "service unavailable"), strings.Contains(l, "temporarily unavailable"),
		// a provider on the bus (pkg/llmbus) that accepted the call and then went silent
		strings.Contains(l, "timed out"):
		return ReasonUnavailable, true
	case strings.Contains(l, "connection refused"), strings.Contains(l, "no such host"),
		strings.Contains(l, "connection reset"), strings.Contains(l, "network is unreachable"),
		// NATS: nobody subscribes to the request subject (a provider on the bus, pkg/llmbus)
		strings.Contains(l, "no responders"):
		return ReasonUnreachable, true
	}
	return "", false
}

// FallbackOptions configure a Fallback. Zero values pick the documented defaults.
type FallbackOptions struct {
	// Registry resolves candidates and API keys (required).
	Registry *llm.Registry
	// Stream is the wrapped stream function (default llm.Stream).
	Stream StreamFunc
	// Tiers ranks candidates (default DefaultTiers).
	Tiers *Tiers
	// MaxAttempts is how many models one call tries in total, the requested one included
	// (default 3; 1 disables fallback).
	MaxAttempts int
	// Preferred are "provider:model" refs tried right after the requested model, before any
	// tier-selected candidate (for example the other ai.agents bindings).
	Preferred []string
	// PerProvider bounds the candidates taken from one provider's tier list (default 2).
	PerProvider int
	// SameProviderOnly keeps fallback within the requested model's provider. By default other
	// providers' best models follow (providers ordered by their best candidate's tier).
	SameProviderOnly bool
	// Candidates, when set, replaces the default candidate list (the requested model is always
	// tried first and never repeated).
	Candidates func(model *llm.Model, kind Kind) []llm.Model
	Log        *slog.Logger
}

// Fallback wraps a stream function: when a call fails before any content was streamed, for
// a reason FallbackReason accepts, the next candidate model is streamed instead and the switch
// is logged as "fallback: <provider>/<model>→<provider>/<model>". The consumer sees the events
// of exactly one model: a failed attempt's start event is held back and dropped.
//
// Vision turns (the context holds an image and the requested model takes images) fall back
// along vision candidates only. A failure after content has been streamed is passed through:
// the consumer has already shown it, and repeating the turn elsewhere would duplicate it.
//
// Candidates, in order: the requested model; Preferred; the requested provider's models by
// tier; then (unless SameProviderOnly) the other providers' models by tier. Once a provider is
// unreachable its other models are skipped for the rest of the call. When every attempt
// failed, the last error is returned with the models tried appended to its message.
type Fallback struct {
	opts FallbackOptions
	log  *slog.Logger
}

// NewFallback returns a Fallback; its Stream method is the wrapped stream function.
func NewFallback(opts FallbackOptions) *Fallback {
	if opts.Stream == nil {
		opts.Stream = llm.Stream
	}
	if opts.Tiers == nil {
		opts.Tiers = DefaultTiers
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = 3
	}
	if opts.PerProvider <= 0 {
		opts.PerProvider = 2
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	return &Fallback{opts: opts, log: opts.Log}
}

func modelRef(m *llm.Model) string { return m.Provider + "/" + m.ID }

// KindOf returns KindVision when c holds an image and model takes images, else KindChat.
func KindOf(model *llm.Model, c *llm.Context) Kind {
	if c == nil || !model.SupportsImages() {
		return KindChat
	}
	for i := range c.Messages {
		for j := range c.Messages[i].Content {
			if c.Messages[i].Content[j].Type == llm.ContentImage {
				return KindVision
			}
		}
	}
	return KindChat
}

// Stream implements the wrapped stream function.
func (f *Fallback) Stream(ctx context.Context, model *llm.Model, c *llm.Context, opts *llm.StreamOptions) iter.Seq[llm.Event] {
	if model == nil || f.opts.MaxAttempts <= 1 || f.opts.Registry == nil {
		return f.opts.Stream(ctx, model, c, opts)
	}
	return func(yield func(llm.Event) bool) {
		// The loop body below is a closure (range over func) that escapes into the provider's
		// stream, so every variable it shares with this function lives on the heap: they are
		// one struct, one allocation per stream, and the list of models tried and the dead
		// providers are only made once an attempt fails (nearly never).
		var st struct {
			heldBuf   [1]llm.Event // the start event, usually the only one held
			held      []llm.Event
			failed    *llm.Message
			reason    string
			committed bool
			retry     bool // another attempt is allowed after this one
		}
		var kind Kind
		cur := model
		curOpts := opts
		var tried []string
		var dead map[string]bool // providers found unreachable
		var queue []llm.Model
		queued := false
		for attempt := 1; ; attempt++ {
			st.held, st.failed, st.reason, st.committed = st.heldBuf[:0], nil, "", false
			st.retry = attempt < f.opts.MaxAttempts
		events:
			for ev := range f.opts.Stream(ctx, cur, c, curOpts) {
				if !st.committed {
					switch ev.Type {
					case llm.EventStart:
						st.held = append(st.held, ev)
						continue
					case llm.EventError:
						if r, ok := FallbackReason(ev.Message); ok && ctx.Err() == nil && st.retry {
							st.failed, st.reason = ev.Message, r
							break events
						}
					}
					st.committed = true
					for _, h := range st.held {
						if !yield(h) {
							return
						}
					}
				}
				if !yield(ev) {
					return
				}
			}
			failed, reason, held := st.failed, st.reason, st.held
			if failed == nil {
				return
			}
			if tried == nil {
				tried, dead, kind = []string{modelRef(model)}, map[string]bool{}, KindOf(model, c)
			}
			if reason == ReasonUnreachable {
				dead[cur.Provider] = true
			}
			if !queued {
				queue, queued = f.candidates(model, kind), true
			}
			var next *llm.Model
			for len(queue) > 0 && next == nil {
				cand := queue[0]
				queue = queue[1:]
				if dead[cand.Provider] || slices.Contains(tried, modelRef(&cand)) {
					continue
				}
				next = &cand
			}
			if next == nil {
				for _, h := range held {
					if !yield(h) {
						return
					}
				}
				final := failed.Clone()
				final.ErrorMessage += fmt.Sprintf(" (no fallback left; tried %s)", strings.Join(tried, ", "))
				yield(llm.Event{Type: llm.EventError, Reason: final.StopReason, Message: &final})
				return
			}
			// With ctx: the turn worker put the session and turn on it (pkg/logging).
			f.log.WarnContext(ctx, fmt.Sprintf("fallback: %s→%s", modelRef(cur), modelRef(next)),
				"from", modelRef(cur), "to", modelRef(next), "reason", reason, "kind", string(kind),
				"attempt", attempt+1, "error", failed.ErrorMessage)
			tried = append(tried, modelRef(next))
			curOpts = f.optionsFor(model, next, opts)
			cur = next
		}
	}
}

// optionsFor adapts the call's options to a candidate: another provider gets its own key.
func (f *Fallback) optionsFor(orig, next *llm.Model, opts *llm.StreamOptions) *llm.StreamOptions {
	var o llm.StreamOptions
	if opts != nil {
		o = *opts
	}
	if next.Provider != orig.Provider {
		o.APIKey = f.opts.Registry.APIKey(next.Provider)
	}
	if next.MaxTokens > 0 && o.MaxTokens > next.MaxTokens {
		o.MaxTokens = next.MaxTokens
	}
	if !next.Reasoning {
		o.Thinking = llm.ThinkingOff
	}
	return &o
}

// candidates builds the ordered candidate list after the requested model.
func (f *Fallback) candidates(model *llm.Model, kind Kind) []llm.Model {
	if f.opts.Candidates != nil {
		return f.opts.Candidates(model, kind)
	}
	return Candidates(f.opts.Registry, f.opts.Tiers, model, kind, CandidateOptions{
		Preferred: f.opts.Preferred, PerProvider: f.opts.PerProvider, SameProviderOnly: f.opts.SameProviderOnly,
	})
}

// CandidateOptions shape Candidates.
type CandidateOptions struct {
	Preferred        []string // "provider:model" refs first
	PerProvider      int      // candidates per provider (0 = all)
	SameProviderOnly bool
}

// Candidates returns the fallback candidates after model for a turn of kind (see Fallback),
// without model itself and without duplicates. Preferred refs that do not resolve or do not
// fit kind are skipped.
func Candidates(reg *llm.Registry, tiers *Tiers, model *llm.Model, kind Kind, o CandidateOptions) []llm.Model {
	if tiers == nil {
		tiers = DefaultTiers
	}
	seen := map[string]bool{modelRef(model): true}
	var out []llm.Model
	add := func(m llm.Model) {
		if k := modelRef(&m); !seen[k] && kind.Fits(&m) {
			seen[k] = true
			out = append(out, m)
		}
	}
	for _, ref := range o.Preferred {
		prov, id, ok := strings.Cut(ref, ":")
		if !ok {
			continue
		}
		if m, err := reg.GetModel(prov, id); err == nil {
			add(*m)
		}
	}
	take := func(ms []llm.Model) {
		if o.PerProvider > 0 && len(ms) > o.PerProvider {
			ms = ms[:o.PerProvider]
		}
		for _, m := range ms {
			add(m)
		}
	}
	if ms, err := tiers.SelectModels(reg, model.Provider, kind, 0); err == nil {
		// The requested model does not count against its own provider's share.
		ms = slices.DeleteFunc(ms, func(m llm.Model) bool { return m.ID == model.ID })
		take(ms)
	}
	if o.SameProviderOnly {
		return out
	}
	type prov struct {
		alias string
		best  int
		ms    []llm.Model
	}
	var others []prov
	for _, alias := range reg.Aliases() {
		if alias == model.Provider {
			continue
		}
		ms, err := tiers.SelectModels(reg, alias, kind, 0)
		if err != nil || len(ms) == 0 {
			continue
		}
		others = append(others, prov{alias, tiers.Score(ms[0].ID), ms})
	}
	slices.SortStableFunc(others, func(a, b prov) int { return b.best - a.best })
	for _, p := range others {
		take(p.ms)
	}
	return out
}
