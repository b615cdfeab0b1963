package faux

import (
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/llm"
)

// DemoModel is the model `agentbus up` announces when no real provider is configured.
var DemoModel = llm.Model{
	ID: "demo", Name: "agentbus built-in demo model", API: llm.APIFaux, Provider: "demo",
	Input: []string{llm.InputText}, ContextWindow: 32768, MaxTokens: 4096,
}

// Demo is the built-in demo model's Responder. It is deliberately simple and predictable:
//
//   - If the last message is a tool result, it reports it: "The <tool> tool returned: <text>"
//     (text cut to 500 runes; "The <tool> tool failed: ..." for an error result).
//   - Else, if the last user message mentions a tool from the context by name (as a whole word,
//     case-insensitive; the longest name wins), it calls that tool. Arguments are made from the
//     tool's schema: each required property of type string gets the user's text after the tool's
//     name (or the whole text when nothing follows), integer/number the first number in the
//     text (else 0), boolean false, array [], object {}.
//   - Otherwise it echoes the user's text in a friendly way and says it is a demo model.
func Demo(c *llm.Context) Response {
	if c == nil || len(c.Messages) == 0 {
		return Response{Text: "Hello! I'm agentbus's built-in demo model. Configure a provider under ai.providers to talk to a real LLM."}
	}
	last := &c.Messages[len(c.Messages)-1]
	if last.Role == llm.RoleToolResult {
		verb := " tool returned: "
		if last.IsError {
			verb = " tool failed: "
		}
		return Response{Text: "The " + last.ToolName + verb + truncateRunes(last.TextContent(), 500)}
	}
	var user string
	images := 0
	for i := len(c.Messages) - 1; i >= 0; i-- {
		if m := &c.Messages[i]; m.Role == llm.RoleUser {
			user = m.TextContent()
			for j := range m.Content {
				if m.Content[j].Type == llm.ContentImage {
					images++
				}
			}
			break
		}
	}
	if tool, rest := mentionedTool(c.Tools, user); tool != nil {
		return Response{
			Text:      "Let me use the " + tool.Name + " tool.",
			ToolCalls: []llm.Content{llm.ToolCall("", tool.Name, demoArgs(tool, rest, user))},
		}
	}
	var b strings.Builder
	if strings.TrimSpace(user) == "" {
		b.WriteString("Hi there!")
	} else {
		b.WriteString("You said: “")
		b.WriteString(truncateRunes(strings.TrimSpace(user), 1000))
		b.WriteString("”.")
	}
	if images > 0 {
		b.WriteString(" You also sent " + strconv.Itoa(images) + " image(s), but I cannot look at them.")
	}
	b.WriteString(" I'm agentbus's built-in demo model, so I can only echo you — configure a provider under ai.providers to talk to a real LLM.")
	return Response{Text: b.String()}
}

// mentionedTool finds the tool whose name occurs in text as a whole word and returns it with
// the text that follows the mention.
func mentionedTool(tools []llm.Tool, text string) (*llm.Tool, string) {
	if len(tools) == 0 || text == "" {
		return nil, ""
	}
	order := make([]int, len(tools))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return len(tools[order[a]].Name) > len(tools[order[b]].Name) })
	lower := strings.ToLower(text)
	if len(lower) != len(text) { // lower-casing changed byte offsets (rare scripts): match exactly
		lower = text
	}
	for _, i := range order {
		name := strings.ToLower(tools[i].Name)
		if name == "" {
			continue
		}
		for from := 0; from < len(lower); {
			k := strings.Index(lower[from:], name)
			if k < 0 {
				break
			}
			k += from
			end := k + len(name)
			if wordBoundary(lower, k-1, true) && wordBoundary(lower, end, false) {
				rest := strings.TrimLeftFunc(text[end:], func(r rune) bool {
					return unicode.IsSpace(r) || unicode.IsPunct(r) && r != '/' && r != '.' && r != '~' && r != '"' && r != '\''
				})
				return &tools[i], strings.TrimSpace(rest)
			}
			from = k + 1
		}
	}
	return nil, ""
}

// wordBoundary reports whether the rune before (or at) byte i of s is not an identifier rune.
func wordBoundary(s string, i int, before bool) bool {
	if i < 0 || i >= len(s) {
		return true
	}
	var r rune
	if before {
		r, _ = utf8.DecodeLastRuneInString(s[:i+1])
	} else {
		r, _ = utf8.DecodeRuneInString(s[i:])
	}
	return !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '-')
}

// demoSchema is what demoArgs needs of a tool's parameters: the required names and their types.
type demoSchema struct {
	required []string
	types    []string
}

// demoSchemas caches parsed parameter schemas by their text: a demo model called for every
// message of a benchmark would otherwise decode the same schema each time.
var (
	demoSchemas     sync.Map // string -> *demoSchema (nil: not an object schema)
	demoSchemaCount atomic.Int32
)

// maxDemoSchemas bounds the cache (a deployment has tens of tools, not thousands).
const maxDemoSchemas = 1024

func parseDemoSchema(params json.RawMessage) *demoSchema {
	if v, ok := demoSchemas.Load(string(params)); ok {
		return v.(*demoSchema)
	}
	var schema struct {
		Properties map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	var out *demoSchema
	if json.Unmarshal(params, &schema) == nil {
		out = &demoSchema{}
		for _, name := range schema.Required {
			typ := "string"
			switch t := schema.Properties[name].Type.(type) {
			case string:
				typ = t
			case []any:
				if len(t) > 0 {
					if s, ok := t[0].(string); ok {
						typ = s
					}
				}
			}
			out.required, out.types = append(out.required, name), append(out.types, typ)
		}
	}
	if demoSchemaCount.Add(1) <= maxDemoSchemas {
		demoSchemas.Store(string(params), out)
	}
	return out
}

func demoArgs(tool *llm.Tool, rest, whole string) map[string]any {
	args := map[string]any{}
	if len(tool.Parameters) == 0 {
		return args
	}
	schema := parseDemoSchema(tool.Parameters)
	if schema == nil {
		return args
	}
	text := rest
	if text == "" {
		text = whole
	}
	for i, name := range schema.required {
		switch typ := schema.types[i]; typ {
		case "integer", "number":
			args[name] = firstNumber(whole)
		case "boolean":
			args[name] = false
		case "array":
			args[name] = []any{}
		case "object":
			args[name] = map[string]any{}
		default:
			args[name] = text
		}
	}
	return args
}

func firstNumber(s string) float64 {
	start := -1
	for i := 0; i <= len(s); i++ {
		digit := i < len(s) && s[i] >= '0' && s[i] <= '9'
		if digit && start < 0 {
			start = i
		}
		if !digit && start >= 0 {
			f, _ := strconv.ParseFloat(s[start:i], 64)
			return f
		}
	}
	return 0
}

func truncateRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for k := 0; k < n; k++ {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return s[:i] + "…"
}
