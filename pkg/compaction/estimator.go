package compaction

import (
	"sync"

	"github.com/agentbus/agentbus/pkg/llm"
)

// Estimator memoizes EstimateTokens for a caller that sizes the same history again and again:
// a session's turns estimate the whole context before the first model call (auto compaction)
// and again before every model call (L1), and the context log hands every turn the same cached
// messages. A message is recognized by its position and its content blocks' backing array,
// which every copy of a message shares; a message whose content was replaced (a new slice) is
// estimated anew. Messages are treated as immutable, as everywhere in a turn.
//
// The zero value is ready to use; safe for concurrent use. It holds at most as many entries as
// the longest history it was asked about.
type Estimator struct {
	mu     sync.Mutex
	blocks []*llm.Content
	counts []int
	tokens []int
}

// Tokens is EstimateTokens(&msgs[i]).
func (e *Estimator) Tokens(msgs []llm.Message, i int) int {
	m := &msgs[i]
	if len(m.Content) == 0 {
		return EstimateTokens(m)
	}
	key := &m.Content[0]
	e.mu.Lock()
	if i < len(e.blocks) && e.blocks[i] == key && e.counts[i] == len(m.Content) {
		n := e.tokens[i]
		e.mu.Unlock()
		return n
	}
	e.mu.Unlock()
	n := EstimateTokens(m)
	e.mu.Lock()
	for len(e.blocks) <= i {
		e.blocks, e.counts, e.tokens = append(e.blocks, nil), append(e.counts, 0), append(e.tokens, 0)
	}
	e.blocks[i], e.counts[i], e.tokens[i] = key, len(m.Content), n
	e.mu.Unlock()
	return n
}

// Estimate is Estimate(msgs) through the memo. A nil Estimator estimates without one.
func (e *Estimator) Estimate(msgs []llm.Message) int {
	if e == nil {
		return Estimate(msgs)
	}
	n := 0
	for i := range msgs {
		n += e.Tokens(msgs, i)
	}
	return n
}

// Reset forgets every entry (e.g. when the history it sized is gone), releasing the messages.
func (e *Estimator) Reset() {
	e.mu.Lock()
	e.blocks, e.counts, e.tokens = nil, nil, nil
	e.mu.Unlock()
}

// tokensOf is EstimateTokens(&msgs[i]) through e when e is set.
func (e *Estimator) tokensOf(msgs []llm.Message, i int) int {
	if e == nil {
		return EstimateTokens(&msgs[i])
	}
	return e.Tokens(msgs, i)
}
