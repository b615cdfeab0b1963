// Package compaction keeps a long conversation inside a model's context window, in the two
// levels of the seed's 会话压缩:
//
//   - L1, Micro: before each model call, old tool results and oversized blocks are replaced by
//     short placeholders, in memory only (the context log keeps them whole).
//   - L2, summary: when the context nears the window, the older messages are summarized by a
//     model (Summarize) and the caller commits the summary in place of them. FindCut picks where
//     to cut so that a recent token budget and a minimum message count stay verbatim and a tool
//     call is never separated from its result; Summarize checks that identifiers (ids, URLs,
//     file names, numbers) of the summarized span survive and re-appends the ones a model
//     dropped.
//
// Like pkg/llm and pkg/loop, this package knows nothing of NATS, storage or agentbus's
// configuration file: the turn worker adapts it to the context log.
//
// Token counts are estimates (about four bytes of text per token, a fixed cost per image) unless
// a model reported usage: ContextTokens starts from the last reported usage and estimates only
// the messages after it, as pi does.
package compaction

import (
	"fmt"
	"sync"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/llm"
)

// Settings are the seed's ai.agent.compaction keys plus what the caller knows of the model.
type Settings struct {
	// Enabled turns L1 and L2 on (compaction.enabled).
	Enabled bool
	// Auto runs L2 on its own when the context nears the window (compaction.auto); without it
	// only /compact and an overflow compact.
	Auto bool
	// KeepRecentTokens is the budget of newest messages kept verbatim by L2 (and by L1: tool
	// results inside it stay whole).
	KeepRecentTokens int
	// MinKeepCount is the fewest messages L2 keeps verbatim.
	MinKeepCount int
	// ReserveTokens is the headroom left for the reply and the system prompt: L2 runs when the
	// context exceeds ContextWindow - ReserveTokens.
	ReserveTokens int
	// ContextWindow of the model in tokens (0 = unknown: Auto never triggers).
	ContextWindow int
	// SummaryTokens is the length a summary is asked to stay under (0 = no target). The caller
	// counts it as part of what a compaction leaves, next to the KeepRecentTokens kept.
	SummaryTokens int
}

// Effective clamps the settings to the window: a 20,000-token keep budget means nothing for an
// 8k model, so the keep budget is at most half of what the window leaves after the reserve, and
// the reserve at most a quarter of the window.
func (s Settings) Effective() Settings {
	if s.ContextWindow <= 0 {
		return s
	}
	if s.ReserveTokens <= 0 || s.ReserveTokens > s.ContextWindow/4 {
		s.ReserveTokens = s.ContextWindow / 4
	}
	if limit := (s.ContextWindow - s.ReserveTokens) / 2; s.KeepRecentTokens <= 0 || s.KeepRecentTokens > limit {
		s.KeepRecentTokens = limit
	}
	if s.MinKeepCount < 1 {
		s.MinKeepCount = 1
	}
	return s
}

// Threshold is the context size (tokens) above which L2 should run; 0 when the window is unknown.
func (s Settings) Threshold() int {
	s = s.Effective()
	if s.ContextWindow <= 0 {
		return 0
	}
	return s.ContextWindow - s.ReserveTokens
}

// ShouldCompact reports whether a context of tokens should be compacted before the next call.
func (s Settings) ShouldCompact(tokens int) bool {
	th := s.Threshold()
	return s.Enabled && s.Auto && th > 0 && tokens > th
}

// imageTokens is what one image is counted as (providers bill roughly 1-2k tokens per image).
const imageTokens = 1200

// EstimateTokens estimates the tokens one message costs in a prompt.
func EstimateTokens(m *llm.Message) int {
	n := 0
	for i := range m.Content {
		c := &m.Content[i]
		switch c.Type {
		case llm.ContentImage:
			n += imageTokens * 4
		case llm.ContentToolCall:
			n += len(c.Name)
			if l, ok := jsonLen(c.Arguments); ok {
				n += l
			}
		default:
			n += len(c.Text) + len(c.Thinking)
		}
	}
	return (n+3)/4 + 4 // + role and framing
}

// Estimate sums EstimateTokens over msgs.
func Estimate(msgs []llm.Message) int {
	n := 0
	for i := range msgs {
		n += EstimateTokens(&msgs[i])
	}
	return n
}

// usageTokens is the context size a usage report shows (the prompt plus the reply).
func usageTokens(u *llm.Usage) int {
	if u == nil {
		return 0
	}
	if u.TotalTokens > 0 {
		return u.TotalTokens
	}
	return u.Input + u.Output + u.CacheRead + u.CacheWrite
}

// ContextTokens estimates the tokens msgs take in a prompt: the usage the last successful
// assistant message reported (which counts everything before it, the system prompt and tools
// too) plus estimates of the messages after it; without any usage, estimates throughout.
func ContextTokens(msgs []llm.Message) int {
	if n, ok := UsageTokens(msgs); ok {
		return n
	}
	return Estimate(msgs)
}

// UsageTokens is the usage the last successful assistant message of msgs reported plus
// estimates of the messages after it; ok is false when no message reported usage.
func UsageTokens(msgs []llm.Message) (int, bool) {
	for i := len(msgs) - 1; i >= 0; i-- {
		m := &msgs[i]
		if m.Role != llm.RoleAssistant || m.StopReason == llm.StopReasonError || m.StopReason == llm.StopReasonAborted {
			continue
		}
		if u := usageTokens(m.Usage); u > 0 {
			return u + Estimate(msgs[i+1:]), true
		}
	}
	return 0, false
}

// FindCut returns k such that msgs[:k] is summarized and msgs[k:] kept verbatim: the kept part
// holds at least the newest KeepRecentTokens (estimated) and at least MinKeepCount messages
// where msgs allow it. A cut never lands on a toolResult (its call stays with it), and only
// where boundary(k) allows (the caller's unit of commit: a summary stands for whole records);
// boundary may be nil. 0 means nothing can be summarized.
//
// The cut moves to the nearest allowed point that keeps more; when there is none (one huge
// record), it takes the nearest one that keeps less but still MinKeepCount messages.
func FindCut(msgs []llm.Message, s Settings, boundary func(k int) bool) int {
	s = s.Effective()
	ok := func(k int) bool {
		return k > 0 && k < len(msgs) && msgs[k].Role != llm.RoleToolResult && (boundary == nil || boundary(k))
	}
	// want: the largest k whose tail msgs[k:] meets both budgets.
	want, tokens := len(msgs), 0
	for {
		if tokens >= s.KeepRecentTokens && len(msgs)-want >= s.MinKeepCount {
			break
		}
		if want == 0 {
			return 0 // everything fits what is kept verbatim
		}
		want--
		tokens += EstimateTokens(&msgs[want])
	}
	for k := want; k > 0; k-- {
		if ok(k) {
			return k
		}
	}
	for k := want + 1; k <= len(msgs)-s.MinKeepCount; k++ {
		if ok(k) {
			return k
		}
	}
	return 0
}

// Placeholder texts of L1. They say what was there, so the model can ask for it again.
const (
	elidedToolResult = "[tool result elided to save context: %s, %d bytes; run the tool again if you need it]"
	elidedBlock      = "\n[… %d bytes elided to save context …]\n"
)

// MicroOptions tune L1.
type MicroOptions struct {
	// KeepRecentTokens: tool results within the newest this many tokens stay whole.
	KeepRecentTokens int
	// MinToolResultBytes: smaller tool results are kept (a placeholder would not save much).
	MinToolResultBytes int
	// MaxBlockBytes caps any single text block (0 = no cap): the middle of a longer one is
	// elided, head and tail kept, on UTF-8 boundaries.
	MaxBlockBytes int
	// Estimator, when set, remembers the estimates of messages seen before (nil: estimate
	// every message on every call).
	Estimator *Estimator
}

// Micro is L1: it returns msgs with the tool results older than the recent budget replaced by
// placeholders and oversized text blocks shortened. msgs is not modified; messages that change
// are copies, the others are shared. The result has the same length and order, so tool calls
// and results stay paired.
func Micro(msgs []llm.Message, o MicroOptions) []llm.Message {
	if o.MinToolResultBytes <= 0 {
		o.MinToolResultBytes = 256
	}
	out := msgs
	copied := false
	set := func(i int, m llm.Message) {
		if !copied {
			out = append([]llm.Message(nil), msgs...)
			copied = true
		}
		out[i] = m
	}
	var known []msgInfo
	if o.Estimator != nil {
		buf := infoBufs.Get().(*[]msgInfo)
		known = o.Estimator.infos(msgs, *buf)
		defer func() { *buf = known[:0]; infoBufs.Put(buf) }()
	}
	recent := 0
	for i := len(msgs) - 1; i >= 0; i-- {
		m := &msgs[i]
		inRecent := recent < o.KeepRecentTokens
		if inRecent { // past the budget the sum no longer matters
			if known != nil {
				recent += known[i].tokens
			} else {
				recent += EstimateTokens(m)
			}
		}
		if m.Role == llm.RoleToolResult && !inRecent {
			if n := contentBytes(m.Content); n >= o.MinToolResultBytes {
				c := *m
				c.Content = []llm.Content{llm.Text(fmt.Sprintf(elidedToolResult, m.ToolName, n))}
				c.Details = nil
				set(i, c)
				continue
			}
		}
		if o.MaxBlockBytes > 0 && (known == nil || known[i].maxText > o.MaxBlockBytes) {
			if cs, changed := capBlocks(m.Content, o.MaxBlockBytes); changed {
				c := *m
				c.Content = cs
				set(i, c)
			}
		}
	}
	return out
}

func contentBytes(cs []llm.Content) int {
	n := 0
	for _, c := range cs {
		n += len(c.Text) + len(c.Data)
	}
	return n
}

// infoBufs recycles Micro's per-call view of the Estimator (one entry per message of the
// history, before every model call).
var infoBufs = sync.Pool{New: func() any { return new([]msgInfo) }}

// capBlocks shortens text blocks longer than max, keeping the head and the tail.
func capBlocks(cs []llm.Content, max int) ([]llm.Content, bool) {
	var out []llm.Content
	for i, c := range cs {
		if c.Type != llm.ContentText || len(c.Text) <= max {
			continue
		}
		if out == nil {
			out = append([]llm.Content(nil), cs...)
		}
		head := TruncateUTF8(c.Text, max*2/3)
		tail := tailUTF8(c.Text, max/3)
		out[i].Text = head + fmt.Sprintf(elidedBlock, len(c.Text)-len(head)-len(tail)) + tail
	}
	return out, out != nil
}

// TruncateUTF8 returns the longest prefix of s of at most n bytes that does not cut a UTF-8
// character.
func TruncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// tailUTF8 is the longest suffix of s of at most n bytes that starts on a character.
func tailUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}
