package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/llm"
)

// The request body is written here directly instead of being built as openai-go params and
// encoded by the SDK: the SDK's encoder is reflective (and merges extra fields through
// gjson/sjson), and since the whole chat history goes out on every model call it was 10 % of
// agentbus up's CPU under load from outside (issue 40). BenchmarkRequestBody compares the two;
// TestRequestBodyMatchesSDK decodes both bodies for the same inputs and requires them equal, so
// what a server receives has not changed. Object keys are written in a fixed order; servers
// read JSON objects as maps.

// requestBody encodes the chat completions request for a call: the JSON the SDK would send
// for the same parameters, "stream": true included.
func requestBody(model *llm.Model, c *llm.Context, opts *llm.StreamOptions, cp compat) ([]byte, error) {
	switch cp.maxTokensField {
	case FieldMaxCompletionTokens, FieldMaxTokens:
	default:
		return nil, fmt.Errorf("compat.maxTokensField %q: want %q or %q", cp.maxTokensField, FieldMaxCompletionTokens, FieldMaxTokens)
	}
	switch cp.thinkingFormat {
	case ThinkingFormatOpenAI, ThinkingFormatZAI, ThinkingFormatQwen:
	default:
		return nil, fmt.Errorf("compat.thinkingFormat %q: want %q, %q or %q", cp.thinkingFormat, ThinkingFormatOpenAI, ThinkingFormatZAI, ThinkingFormatQwen)
	}
	e := &encoder{b: make([]byte, 0, sizeHint(c))}
	// "stream" first, where the SDK put it.
	e.raw(`{"stream":true,"model":`)
	e.str(model.ID)
	e.raw(`,"messages":[`)
	e.messages(model, c, cp)
	e.raw(`]`)

	if len(c.Tools) > 0 {
		e.raw(`,"tools":[`)
		for i := range c.Tools {
			t := &c.Tools[i]
			if i > 0 {
				e.raw(",")
			}
			e.raw(`{"type":"function","function":{"name":`)
			e.str(t.Name)
			if t.Description != "" {
				e.raw(`,"description":`)
				e.str(t.Description)
			}
			e.raw(`,"parameters":`)
			if err := e.schema(t.Parameters); err != nil {
				return nil, fmt.Errorf("tool %s: parameters are not a JSON Schema object: %w", t.Name, err)
			}
			e.raw(`}}`)
		}
		e.raw(`]`)
	}

	if opts.MaxTokens > 0 {
		e.raw(`,"`)
		e.raw(cp.maxTokensField) // checked above: a plain identifier
		e.raw(`":`)
		e.b = strconv.AppendInt(e.b, int64(opts.MaxTokens), 10)
	}
	if opts.Temperature != nil {
		f := *opts.Temperature
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("temperature %v is not a JSON number", f)
		}
		e.raw(`,"temperature":`)
		e.b = strconv.AppendFloat(e.b, f, 'g', -1, 64)
	}
	if cp.usageInStreaming {
		e.raw(`,"stream_options":{"include_usage":true}`)
	}
	if cp.store {
		e.raw(`,"store":false`)
	}
	if cp.promptCacheKey && opts.SessionID != "" {
		e.raw(`,"prompt_cache_key":`)
		e.str(opts.SessionID)
	}
	if model.Reasoning {
		switch cp.thinkingFormat {
		case ThinkingFormatOpenAI:
			if cp.reasoningEffort && opts.Thinking != llm.ThinkingOff {
				e.raw(`,"reasoning_effort":`)
				e.str(string(opts.Thinking))
			}
		case ThinkingFormatZAI:
			if opts.Thinking != llm.ThinkingOff {
				e.raw(`,"thinking":{"type":"enabled"}`)
			} else {
				e.raw(`,"thinking":{"type":"disabled"}`)
			}
		case ThinkingFormatQwen:
			if opts.Thinking != llm.ThinkingOff {
				e.raw(`,"enable_thinking":true,"thinking_budget":`)
				e.b = strconv.AppendInt(e.b, int64(opts.ThinkingBudgets.Budget(opts.Thinking)), 10)
			} else {
				e.raw(`,"enable_thinking":false`)
			}
		}
	}
	e.raw(`}`)
	return e.b, nil
}

// messages writes the conversation (the members of the "messages" array). Messages of custom
// roles never reach a provider (ConvertToLLM filters them); any left over are skipped rather
// than sent.
func (e *encoder) messages(model *llm.Model, c *llm.Context, cp compat) {
	n := 0
	next := func() {
		if n > 0 {
			e.raw(",")
		}
		n++
	}
	if c.SystemPrompt != "" {
		next()
		if cp.developerRole && model.Reasoning {
			e.raw(`{"role":"developer","content":`)
		} else {
			e.raw(`{"role":"system","content":`)
		}
		e.str(c.SystemPrompt)
		e.raw(`}`)
	}
	// Cross-provider handoff (DESIGN.md §2): thinking from other models becomes text, tool-call
	// ids are normalized, errored/aborted steps dropped, orphan tool calls answered.
	msgs := llm.TransformMessages(c.Messages, model)
	images := model.SupportsImages()
	audio := model.Accepts(llm.InputAudio)
	lastRole := ""
	for i := 0; i < len(msgs); i++ {
		m := &msgs[i]
		switch m.Role {
		case llm.RoleUser:
			if lastRole == llm.RoleToolResult && cp.assistantAfterToolResult {
				next()
				e.raw(`{"role":"assistant","content":"I have processed the tool results."}`)
			}
			if emptyUser(m.Content) {
				continue // servers reject empty user turns; there is nothing to say
			}
			next()
			e.user(m.Content, images, audio)
		case llm.RoleAssistant:
			mark := len(e.b)
			if n > 0 {
				e.raw(",")
			}
			if !e.assistant(m, cp) {
				e.b = e.b[:mark]
				continue // nothing to replay; do not let it count as the last role
			}
			n++
		case llm.RoleToolResult:
			// A run of tool results becomes tool messages; their images follow in one user
			// message, because role "tool" only carries text.
			var imgs []llm.Content
			for ; i < len(msgs) && msgs[i].Role == llm.RoleToolResult; i++ {
				tr := &msgs[i]
				text := textOf(tr.Content)
				var hasImg bool
				for _, b := range tr.Content {
					if b.Type == llm.ContentImage {
						hasImg = true
						if images {
							imgs = append(imgs, b)
						}
					}
				}
				if text == "" && hasImg {
					if images {
						text = "(see attached image)"
					} else {
						text = "(image omitted: model does not accept images)"
					}
				}
				next()
				e.raw(`{"role":"tool","content":`)
				e.str(text)
				e.raw(`,"tool_call_id":`)
				e.str(tr.ToolCallID)
				if cp.toolResultName && tr.ToolName != "" {
					e.raw(`,"name":`)
					e.str(tr.ToolName)
				}
				e.raw(`}`)
			}
			i--
			if len(imgs) > 0 {
				parts := append([]llm.Content{llm.Text("Attached image(s) from tool result:")}, imgs...)
				next()
				e.user(parts, true, false)
				lastRole = llm.RoleUser
				continue
			}
			lastRole = llm.RoleToolResult
			continue
		default:
			continue
		}
		lastRole = m.Role
	}
}

// user writes a user message: its text as a string when it has only text, content parts
// otherwise. Audio blocks become input_audio parts for a model that takes audio (InputAudio)
// when their format is one chat completions accepts (wav, mp3), text saying so otherwise; chat
// completions has no video part, so video blocks become text.
func (e *encoder) user(blocks []llm.Content, images, audio bool) {
	onlyText := true
	for _, b := range blocks {
		if b.Type != llm.ContentText {
			onlyText = false
		}
	}
	e.raw(`{"role":"user","content":`)
	if onlyText {
		e.strOf(blocks)
		e.raw(`}`)
		return
	}
	e.raw(`[`)
	n := 0
	text := func(s string) {
		if n > 0 {
			e.raw(",")
		}
		n++
		e.raw(`{"type":"text","text":`)
		e.str(s)
		e.raw(`}`)
	}
	for _, b := range blocks {
		switch b.Type {
		case llm.ContentText:
			text(b.Text)
		case llm.ContentImage:
			if !images {
				text("(image omitted: model does not accept images)")
				continue
			}
			if n > 0 {
				e.raw(",")
			}
			n++
			e.raw(`{"type":"image_url","image_url":{"url":`)
			e.str3("data:", b.MimeType, ";base64,", b.Data)
			e.raw(`}}`)
		case llm.ContentAudio:
			format := audioFormat(b.MimeType)
			switch {
			case !audio:
				text("(audio omitted: model does not accept audio)")
			case format == "":
				text("(audio omitted: " + b.MimeType + " is not wav or mp3)")
			default:
				if n > 0 {
					e.raw(",")
				}
				n++
				e.raw(`{"type":"input_audio","input_audio":{"data":`)
				e.str(b.Data)
				e.raw(`,"format":`)
				e.str(format)
				e.raw(`}}`)
			}
		case llm.ContentVideo:
			text("(video omitted: chat completions takes no video)")
		}
	}
	e.raw(`]}`)
}

// assistant writes an assistant message: text, tool calls, and thinking either as text
// (Compat.RequiresThinkingAsText), in the reasoning field it streamed in (its signature), or
// not at all. It returns false, having written garbage the caller cuts off, when nothing is
// left to send.
func (e *encoder) assistant(m *llm.Message, cp compat) bool {
	var text, thinking strings.Builder
	thinkingField := ""
	calls := 0
	for _, b := range m.Content {
		switch b.Type {
		case llm.ContentText:
			// Several text blocks (e.g. another model's thinking turned into text by the
			// handoff) are kept apart by a blank line.
			if text.Len() > 0 && b.Text != "" {
				text.WriteString("\n\n")
			}
			text.WriteString(b.Text)
		case llm.ContentThinking:
			if b.Redacted || strings.TrimSpace(b.Thinking) == "" {
				continue
			}
			if thinking.Len() > 0 {
				thinking.WriteString("\n\n")
			}
			thinking.WriteString(b.Thinking)
			if thinkingField == "" && isReasoningField(b.ThinkingSignature) {
				thinkingField = b.ThinkingSignature
			}
		case llm.ContentToolCall:
			calls++
		}
	}
	content := text.String()
	reasoning := ""
	if thinking.Len() > 0 {
		if cp.thinkingAsText {
			if content != "" {
				content = thinking.String() + "\n\n" + content
			} else {
				content = thinking.String()
			}
		} else if thinkingField != "" {
			reasoning = thinking.String()
		}
	}
	if content == "" && calls == 0 {
		return false
	}
	e.raw(`{"role":"assistant"`)
	if content != "" {
		e.raw(`,"content":`)
		e.str(content)
	}
	if calls > 0 {
		e.raw(`,"tool_calls":[`)
		n := 0
		for i := range m.Content {
			b := &m.Content[i]
			if b.Type != llm.ContentToolCall {
				continue
			}
			if n > 0 {
				e.raw(",")
			}
			n++
			e.raw(`{"id":`)
			e.str(b.ID)
			e.raw(`,"type":"function","function":{"name":`)
			e.str(b.Name)
			e.raw(`,"arguments":`)
			e.args(b.Arguments)
			e.raw(`}}`)
		}
		e.raw(`]`)
	}
	if reasoning != "" {
		e.raw(`,"`)
		e.raw(thinkingField) // one of reasoningFields: a plain identifier
		e.raw(`":`)
		e.str(reasoning)
	}
	e.raw(`}`)
	return true
}

// sizeHint estimates the body's size, so the buffer is allocated once rather than regrown
// (and copied) through every power of two on a long history.
func sizeHint(c *llm.Context) int {
	n := 512 + len(c.SystemPrompt)
	for i := range c.Messages {
		n += 64
		for j := range c.Messages[i].Content {
			b := &c.Messages[i].Content[j]
			n += 48 + len(b.Text) + len(b.Thinking) + len(b.Data) + len(b.ID) + len(b.Name) + 32*len(b.Arguments)
		}
	}
	for i := range c.Tools {
		n += 64 + len(c.Tools[i].Name) + len(c.Tools[i].Description) + len(c.Tools[i].Parameters)
	}
	return n + n/8
}

// float writes f in encoding/json's format: shortest decimal, exponent form only below 1e-6
// or from 1e21 on, with a two-digit negative exponent shortened (1e-07 → 1e-7).
func (e *encoder) float(f float64) {
	format := byte('f')
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		format = 'e'
	}
	e.b = strconv.AppendFloat(e.b, f, format, -1, 64)
	if n := len(e.b); format == 'e' && n >= 4 && e.b[n-4] == 'e' && e.b[n-3] == '-' && e.b[n-2] == '0' {
		e.b[n-2] = e.b[n-1]
		e.b = e.b[:n-1]
	}
}

// encoder appends JSON to b.
type encoder struct {
	b       []byte
	scratch []byte // a tool call's arguments, before they are written as a JSON string
	keys    []string
}

// args writes a tool call's arguments: their JSON text, as a JSON string; "{}" when there are
// none or they do not encode (as the SDK path did). The values a decoded JSON object holds are
// written directly; anything else goes through encoding/json.
func (e *encoder) args(a map[string]any) {
	if a == nil {
		e.raw(`"{}"`)
		return
	}
	out := e.b
	e.b = e.scratch[:0]
	ok := e.value(a)
	e.scratch, e.b = e.b, out
	if !ok {
		raw, err := json.Marshal(a)
		if err != nil {
			raw = []byte("{}")
		}
		e.scratch = append(e.scratch[:0], raw...)
	}
	e.b = append(e.b, '"')
	e.esc(string(e.scratch))
	e.b = append(e.b, '"')
}

// value writes v as JSON if it is one of the types encoding/json decodes into an any (object
// keys sorted, as encoding/json writes maps); false, with e.b in an unspecified state, for any
// other type or a number JSON cannot hold.
func (e *encoder) value(v any) bool {
	switch v := v.(type) {
	case nil:
		e.raw("null")
	case string:
		// Written byte for byte as encoding/json would (HTML escaped), so a call's arguments
		// read exactly as before.
		e.b = append(e.b, '"')
		e.escape(v, true)
		e.b = append(e.b, '"')
	case bool:
		if v {
			e.raw("true")
		} else {
			e.raw("false")
		}
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return false
		}
		e.float(v)
	case json.Number:
		if !json.Valid([]byte(v)) {
			return false
		}
		e.raw(string(v))
	case []any:
		e.b = append(e.b, '[')
		for i, x := range v {
			if i > 0 {
				e.b = append(e.b, ',')
			}
			if !e.value(x) {
				return false
			}
		}
		e.b = append(e.b, ']')
	case map[string]any:
		base := len(e.keys)
		for k := range v {
			e.keys = append(e.keys, k)
		}
		keys := e.keys[base:]
		slices.Sort(keys)
		e.b = append(e.b, '{')
		for i, k := range keys {
			if i > 0 {
				e.b = append(e.b, ',')
			}
			e.b = append(e.b, '"')
			e.escape(k, true)
			e.b = append(e.b, '"', ':')
			if !e.value(v[k]) {
				e.keys = e.keys[:base]
				return false
			}
		}
		e.keys = e.keys[:base]
		e.b = append(e.b, '}')
	default:
		return false
	}
	return true
}

func (e *encoder) raw(s string) { e.b = append(e.b, s...) }

// schema writes a tool's parameters: the JSON Schema object as given (compacted), or an empty
// object schema when there is none, as the SDK path did after decoding it into a map.
func (e *encoder) schema(p json.RawMessage) error {
	p = bytes.TrimSpace(p)
	if len(p) == 0 || string(p) == "null" {
		e.raw(`{"type":"object","properties":{}}`)
		return nil
	}
	if p[0] != '{' {
		return fmt.Errorf("a JSON %s", jsonKind(p[0]))
	}
	mark := len(e.b)
	buf := bytes.NewBuffer(e.b)
	if err := json.Compact(buf, p); err != nil {
		e.b = e.b[:mark]
		return err
	}
	e.b = buf.Bytes()
	if string(e.b[mark:]) == "{}" {
		e.b = e.b[:mark]
		e.raw(`{"type":"object","properties":{}}`)
	}
	return nil
}

func jsonKind(c byte) string {
	switch c {
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	}
	return "number or something else"
}

// strOf writes the concatenated text of blocks as one JSON string.
func (e *encoder) strOf(blocks []llm.Content) {
	e.b = append(e.b, '"')
	for _, c := range blocks {
		if c.Type == llm.ContentText {
			e.esc(c.Text)
		}
	}
	e.b = append(e.b, '"')
}

// str3 writes the concatenation of its arguments as one JSON string.
func (e *encoder) str3(a, b, c, d string) {
	e.b = append(e.b, '"')
	e.esc(a)
	e.esc(b)
	e.esc(c)
	e.esc(d)
	e.b = append(e.b, '"')
}

// str writes s as a JSON string.
func (e *encoder) str(s string) {
	e.b = append(e.b, '"')
	e.esc(s)
	e.b = append(e.b, '"')
}

const hexDigits = "0123456789abcdef"

// esc appends s escaped for the inside of a JSON string, decoding to exactly what
// encoding/json's encoding of s decodes to: control characters escaped, invalid UTF-8 as
// U+FFFD. HTML characters are left alone (the SDK does not escape them either); U+2028 and
// U+2029 are escaped as encoding/json does, for JavaScript readers.
func (e *encoder) esc(s string) { e.escape(s, false) }

// escape is esc, and with html also escapes <, > and & as \u003c, \u003e and \u0026, as
// encoding/json does by default.
func (e *encoder) escape(s string, html bool) {
	b := e.b
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && (!html || (c != '<' && c != '>' && c != '&')) {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	e.b = append(b, s[start:]...)
}
