package compaction

import (
	"sync"

	"github.com/agentbus/agentbus/pkg/llm"
)

// Estimator memoizes what Micro and Estimate learn of a message, for a caller that sizes the
// same history again and again: a session's turns estimate the whole context before the first
// model call (auto compaction) and L1 walks it before every model call, while the context log
// hands every turn the same cached messages. A message is recognized by its content blocks'
// backing array, which every copy of a message shares; a message whose content was replaced
// (a new slice) is looked at anew. Messages are treated as immutable, as everywhere in a turn.
//
// The zero value is ready to use; safe for concurrent use. It keeps the entries of the
// messages of the last few calls only, so it holds about as many entries as the history has
// messages.
type Estimator struct {
	mu  sync.Mutex
	gen uint32
	// memo maps a message to its entry in entries. The entries live in one slice, not one
	// allocation each, so that a long-lived session's estimator is a few objects for the
	// collector to trace instead of one per message; a call marks the entry it finds as seen
	// (gen) in place, without a map assignment per message.
	memo    map[*llm.Content]int32
	entries []msgInfo
	// forgotAt is the call (gen) that last forgot entries.
	forgotAt uint32
}

// msgInfo is what is remembered of one message.
type msgInfo struct {
	blocks  int // len(Content): a slice cut shorter is another message
	tokens  int // EstimateTokens
	maxText int // the longest text block, in bytes (capBlocks has nothing to do below its limit)
	gen     uint32
}

func infoOf(m *llm.Message) msgInfo {
	in := msgInfo{blocks: len(m.Content), tokens: EstimateTokens(m)}
	for i := range m.Content {
		if c := &m.Content[i]; c.Type == llm.ContentText && len(c.Text) > in.maxText {
			in.maxText = len(c.Text)
		}
	}
	return in
}

// infos returns what is known of each message of msgs, looking at the new ones, in buf's
// backing array when it is large enough. A nil Estimator looks at every message.
func (e *Estimator) infos(msgs []llm.Message, buf []msgInfo) []msgInfo {
	out := buf[:0]
	if cap(out) < len(msgs) {
		out = make([]msgInfo, 0, len(msgs))
	}
	out = out[:len(msgs)]
	if e == nil {
		for i := range msgs {
			out[i] = infoOf(&msgs[i])
		}
		return out
	}
	e.each(msgs, func(i int, in msgInfo) { out[i] = in })
	return out
}

// each calls fn with what is known of each message of msgs, in order, looking at the new
// ones. fn runs under e's lock and must not call e.
func (e *Estimator) each(msgs []llm.Message, fn func(i int, in msgInfo)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.memo == nil {
		e.memo = make(map[*llm.Content]int32, len(msgs))
		e.entries = make([]msgInfo, 0, len(msgs))
	}
	e.gen++
	for i := range msgs {
		m := &msgs[i]
		if len(m.Content) == 0 {
			fn(i, infoOf(m))
			continue
		}
		key := &m.Content[0]
		at, ok := e.memo[key]
		switch {
		case !ok:
			at = int32(len(e.entries))
			e.entries = append(e.entries, infoOf(m))
			e.memo[key] = at
		case e.entries[at].blocks != len(m.Content):
			e.entries[at] = infoOf(m)
		}
		in := &e.entries[at]
		in.gen = e.gen
		fn(i, *in)
	}
	// Forget messages no call of the last few has seen (cut from the tail, compacted away, or
	// another session id), moving the entries kept to a new slice. The memo's keys keep their
	// messages reachable, so it forgets once it holds a quarter more than msgs; at most every
	// fifth call, so that calls with a short slice do not make every call rebuild.
	if len(e.memo) > len(msgs)+len(msgs)/4+16 && e.gen-e.forgotAt > 4 {
		e.forgotAt = e.gen
		kept := make([]msgInfo, 0, len(msgs)+32)
		for k, at := range e.memo {
			if in := e.entries[at]; e.gen-in.gen <= 4 {
				e.memo[k] = int32(len(kept))
				kept = append(kept, in)
			} else {
				delete(e.memo, k)
			}
		}
		e.entries = kept
	}
}

// Estimate is Estimate(msgs) through the memo. A nil Estimator estimates without one.
func (e *Estimator) Estimate(msgs []llm.Message) int {
	if e == nil {
		return Estimate(msgs)
	}
	n := 0
	e.each(msgs, func(_ int, in msgInfo) { n += in.tokens })
	return n
}

// Reset forgets every entry, releasing the messages it refers to.
func (e *Estimator) Reset() {
	e.mu.Lock()
	e.memo, e.entries = nil, nil
	e.mu.Unlock()
}
