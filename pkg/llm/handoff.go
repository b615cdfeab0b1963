package llm

import (
	"strconv"
	"strings"
)

// NoResultText is the text of the synthetic error result given to a tool call that has none.
const NoResultText = "No result provided"

// TransformMessages prepares a conversation, possibly produced by other models, for target
// (DESIGN.md §2, cross-provider handoff). It never mutates msgs; unchanged messages share their
// content with the input.
//
//   - Assistant messages with StopReason error or aborted are dropped, together with the tool
//     results answering their tool calls (a half-finished step is not something to continue).
//   - Assistant messages from the target model itself (same provider, api and model id) are kept
//     as they are: thinking with signatures, redacted thinking, text and thought signatures.
//   - From any other model: thinking becomes a text block with the same text (signatures
//     dropped); empty and redacted thinking are dropped; text signatures and tool-call thought
//     signatures are dropped; tool-call ids are normalized for the target API (NormalizeToolCallID)
//     and the matching toolResult.ToolCallID is rewritten to the same new id.
//   - A tool call without a result before the next user or assistant message (or the end)
//     gets a synthetic toolResult {isError: true, text NoResultText} right after its step.
//   - Tool results that answer no known tool call are dropped (providers reject them).
//   - When target declares its input kinds and they lack images, image blocks in user and
//     tool-result messages become a text placeholder.
//   - Messages with roles the model does not understand are dropped (ConvertToLLM should have
//     translated them first).
func TransformMessages(msgs []Message, target *Model) []Message {
	t := transformer{target: target, noImages: len(target.Input) > 0 && !target.SupportsImages()}
	out := make([]Message, 0, len(msgs)+1)
	// pending are the tool calls of the last kept assistant message still waiting for a result.
	var pending []pendingCall
	flush := func() {
		for _, p := range pending {
			if !p.answered {
				out = append(out, Message{
					Role: RoleToolResult, ToolCallID: p.id, ToolName: p.name, IsError: true,
					Content: []Content{Text(NoResultText)}, Timestamp: p.ts,
				})
			}
		}
		pending = pending[:0]
	}
	for i := range msgs {
		m := &msgs[i]
		switch m.Role {
		case RoleUser:
			flush()
			out = append(out, t.user(m))
		case RoleAssistant:
			flush()
			if m.StopReason == StopReasonError || m.StopReason == StopReasonAborted {
				for j := range m.Content {
					if m.Content[j].Type == ContentToolCall {
						t.dropped(m.Content[j].ID)
					}
				}
				continue
			}
			am := t.assistant(m)
			for j := range am.Content {
				if c := &am.Content[j]; c.Type == ContentToolCall {
					pending = append(pending, pendingCall{id: c.ID, name: c.Name, ts: m.Timestamp})
				}
			}
			out = append(out, am)
		case RoleToolResult:
			if t.isDropped(m.ToolCallID) {
				continue
			}
			id := t.mapped(m.ToolCallID)
			k := -1
			for j := range pending {
				if pending[j].id == id && !pending[j].answered {
					k = j
					break
				}
			}
			if k < 0 {
				continue // answers nothing the model asked for (any more)
			}
			pending[k].answered = true
			r := *m
			r.ToolCallID = id
			if t.noImages {
				r.Content = t.stripImages(r.Content)
			}
			out = append(out, r)
		}
	}
	flush()
	return out
}

type pendingCall struct {
	id, name string
	ts       int64
	answered bool
}

type transformer struct {
	target   *Model
	noImages bool
	ids      map[string]string   // original tool-call id -> id sent to the target
	used     map[string]bool     // ids handed out, to keep them unique after normalization
	drop     map[string]struct{} // tool-call ids of dropped assistant messages
}

func (t *transformer) dropped(id string) {
	if t.drop == nil {
		t.drop = map[string]struct{}{}
	}
	t.drop[id] = struct{}{}
}

func (t *transformer) isDropped(id string) bool {
	_, ok := t.drop[id]
	return ok
}

func (t *transformer) mapped(id string) string {
	if n, ok := t.ids[id]; ok {
		return n
	}
	return id
}

func (t *transformer) user(m *Message) Message {
	if !t.noImages {
		return *m
	}
	u := *m
	u.Content = t.stripImages(m.Content)
	return u
}

// ImageOmittedText replaces images sent to a model that does not take them.
const ImageOmittedText = "[image omitted: this model does not accept images]"

func (t *transformer) stripImages(c []Content) []Content {
	has := false
	for i := range c {
		if c[i].Type == ContentImage {
			has = true
			break
		}
	}
	if !has {
		return c
	}
	out := make([]Content, len(c))
	for i := range c {
		if c[i].Type == ContentImage {
			out[i] = Text(ImageOmittedText)
		} else {
			out[i] = c[i]
		}
	}
	return out
}

func (t *transformer) sameModel(m *Message) bool {
	return m.Provider == t.target.Provider && m.API == t.target.API && m.Model == t.target.ID
}

// repeatsID reports whether a tool call before c[j] has c[j]'s id: a repeated id within one
// message would get two results. A scan rather than a set: a message holds a few tool calls,
// and this runs for every assistant message of the history on every model call (a map per
// message was 3 % of agentbus up's CPU from outside, issue 40).
func repeatsID(c []Content, j int) bool {
	for k := 0; k < j; k++ {
		if c[k].Type == ContentToolCall && c[k].ID == c[j].ID {
			return true
		}
	}
	return false
}

func (t *transformer) assistant(m *Message) Message {
	if t.sameModel(m) {
		// Keep everything; only a repeated id within the message (a provider bug) is replaced.
		a := *m
		for j := range m.Content {
			c := &m.Content[j]
			if c.Type != ContentToolCall {
				continue
			}
			if c.ID == "" || repeatsID(m.Content, j) {
				if len(a.Content) > 0 && &a.Content[0] == &m.Content[0] {
					a.Content = append([]Content(nil), m.Content...)
				}
				a.Content[j].ID = t.fresh(c.ID)
				continue
			}
			t.keepID(c.ID)
		}
		return a
	}
	a := *m
	a.Content = make([]Content, 0, len(m.Content))
	for j := range m.Content {
		c := m.Content[j]
		if c.Type == ContentToolCall {
			if repeatsID(m.Content, j) {
				c.ThoughtSignature = ""
				c.ID = t.fresh(NormalizeToolCallID(t.target.API, c.ID))
				a.Content = append(a.Content, c)
				continue
			}
		}
		switch c.Type {
		case ContentThinking:
			if c.Redacted || strings.TrimSpace(c.Thinking) == "" {
				continue
			}
			a.Content = append(a.Content, Text(c.Thinking))
		case ContentText:
			c.TextSignature = ""
			a.Content = append(a.Content, c)
		case ContentToolCall:
			c.ThoughtSignature = ""
			c.ID = t.normalize(c.ID)
			a.Content = append(a.Content, c)
		default:
			a.Content = append(a.Content, c)
		}
	}
	return a
}

func (t *transformer) keepID(id string) {
	if t.used == nil {
		t.used = map[string]bool{}
	}
	t.used[id] = true
}

// normalize maps a foreign tool-call id to one the target accepts, unique in this conversation.
// The same original id always maps to the same new id, so its results follow it.
func (t *transformer) normalize(id string) string {
	if n, ok := t.ids[id]; ok {
		return n
	}
	n := NormalizeToolCallID(t.target.API, id)
	if n == "" || t.used[n] {
		n = t.fresh(n)
	} else {
		t.keepID(n)
	}
	if n != id {
		if t.ids == nil {
			t.ids = map[string]string{}
		}
		t.ids[id] = n
	}
	return n
}

// fresh returns an unused id derived from base (within the target's length limit) and marks
// it used.
func (t *transformer) fresh(base string) string {
	if base == "" {
		base = "call"
	}
	limit := maxToolCallIDLen(t.target.API)
	if limit > 0 && len(base) > limit {
		base = base[:limit]
	}
	for k := len(t.used) + 1; ; k++ {
		suffix := "_" + strconv.Itoa(k)
		cand := base
		if limit > 0 && len(cand)+len(suffix) > limit {
			cand = cand[:limit-len(suffix)]
		}
		cand += suffix
		if !t.used[cand] {
			t.keepID(cand)
			return cand
		}
	}
}

// maxToolCallIDLen is the longest tool-call id an API accepts (0: no limit we enforce).
func maxToolCallIDLen(api string) int {
	switch api {
	case APIAnthropicMessages, APIOpenAIResponses:
		return 64
	case APIOpenAICompletions:
		return 40
	}
	return 0
}

// NormalizeToolCallID rewrites a tool-call id made by another provider so that api accepts it:
//
//	anthropic-messages:   ^[a-zA-Z0-9_-]{1,64}$ (other characters become "_")
//	openai-completions:   the call part of an OpenAI Responses "call|item" id, [a-zA-Z0-9_-], at most 40
//	openai-responses:     [a-zA-Z0-9_-], at most 64 (a foreign "call|item" keeps only the call part)
//	others:               the call part of a "call|item" id, otherwise unchanged
//
// An id that becomes empty is returned empty; TransformMessages then generates one.
func NormalizeToolCallID(api, id string) string {
	if i := strings.IndexByte(id, '|'); i >= 0 {
		id = id[:i]
	}
	limit := maxToolCallIDLen(api)
	if limit == 0 {
		return id
	}
	clean := true
	for i := 0; i < len(id); i++ {
		if !idChar(id[i]) {
			clean = false
			break
		}
	}
	if !clean {
		b := make([]byte, len(id))
		for i := 0; i < len(id); i++ {
			if idChar(id[i]) {
				b[i] = id[i]
			} else {
				b[i] = '_'
			}
		}
		id = string(b)
	}
	if len(id) > limit {
		id = id[:limit]
	}
	return id
}

func idChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}
