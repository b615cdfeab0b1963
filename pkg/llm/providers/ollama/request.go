package ollama

import (
	"encoding/json"
	"regexp"
	"strings"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/internal/streambuild"
)

type chatRequest struct {
	Model    string         `json:"model"`
	Messages []message      `json:"messages"`
	Tools    []tool         `json:"tools,omitempty"`
	Stream   bool           `json:"stream"`
	Think    any            `json:"think,omitempty"`
	Options  map[string]any `json:"options,omitempty"`
}

type message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	Thinking   string     `json:"thinking,omitempty"`
	Images     []string   `json:"images,omitempty"`
	ToolCalls  []toolCall `json:"tool_calls,omitempty"`
	ToolName   string     `json:"tool_name,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

type tool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// levelModels take a thinking level instead of a boolean.
var levelModels = regexp.MustCompile(`(?i)gpt-oss`)

func buildRequest(model *llm.Model, c *llm.Context, opts *llm.StreamOptions) chatRequest {
	req := chatRequest{Model: model.ID, Stream: true, Options: map[string]any{}}
	if n := numCtx(model, opts); n > 0 {
		req.Options["num_ctx"] = n
	}
	maxTokens := opts.MaxTokens
	if maxTokens <= 0 {
		maxTokens = model.MaxTokens
	}
	if maxTokens > 0 {
		req.Options["num_predict"] = maxTokens
	}
	if opts.Temperature != nil {
		req.Options["temperature"] = *opts.Temperature
	}
	if len(req.Options) == 0 {
		req.Options = nil
	}
	if v, ok := opts.Extra["ollama.think"]; ok {
		req.Think = v
	} else if model.Reasoning {
		switch {
		case opts.Thinking == llm.ThinkingOff:
			req.Think = false
		case levelModels.MatchString(model.ID):
			req.Think = level(opts.Thinking)
		default:
			req.Think = true
		}
	}
	if c.SystemPrompt != "" {
		req.Messages = append(req.Messages, message{Role: "system", Content: streambuild.Sanitize(c.SystemPrompt)})
	}
	images := model.SupportsImages() || len(model.Input) == 0
	for _, m := range llm.TransformMessages(c.Messages, model) {
		switch m.Role {
		case llm.RoleUser:
			om := message{Role: "user"}
			var text []string
			for _, b := range m.Content {
				switch b.Type {
				case llm.ContentText:
					if b.Text != "" {
						text = append(text, streambuild.Sanitize(b.Text))
					}
				case llm.ContentImage:
					if images {
						om.Images = append(om.Images, b.Data)
					}
				}
			}
			om.Content = strings.Join(text, "\n")
			if om.Content == "" && len(om.Images) == 0 {
				continue
			}
			req.Messages = append(req.Messages, om)
		case llm.RoleAssistant:
			om := message{Role: "assistant"}
			var text, thinking []string
			for _, b := range m.Content {
				switch b.Type {
				case llm.ContentText:
					if b.Text != "" {
						text = append(text, streambuild.Sanitize(b.Text))
					}
				case llm.ContentThinking:
					if !b.Redacted && b.Thinking != "" {
						thinking = append(thinking, streambuild.Sanitize(b.Thinking))
					}
				case llm.ContentToolCall:
					var tc toolCall
					tc.ID = b.ID
					tc.Function.Name = b.Name
					args := b.Arguments
					if args == nil {
						args = map[string]any{}
					}
					raw, _ := json.Marshal(args) // encoding/json writes invalid UTF-8 as U+FFFD
					tc.Function.Arguments = raw
					om.ToolCalls = append(om.ToolCalls, tc)
				}
			}
			om.Content = strings.Join(text, "\n")
			om.Thinking = strings.Join(thinking, "\n")
			if om.Content == "" && om.Thinking == "" && len(om.ToolCalls) == 0 {
				continue
			}
			req.Messages = append(req.Messages, om)
		case llm.RoleToolResult:
			om := message{Role: "tool", ToolName: m.ToolName, ToolCallID: m.ToolCallID}
			var text []string
			for _, b := range m.Content {
				switch b.Type {
				case llm.ContentText:
					text = append(text, streambuild.Sanitize(b.Text))
				case llm.ContentImage:
					if images {
						om.Images = append(om.Images, b.Data)
					}
				}
			}
			om.Content = strings.Join(text, "\n")
			if m.IsError && !strings.HasPrefix(om.Content, "Error") {
				om.Content = "Error: " + om.Content
			}
			req.Messages = append(req.Messages, om)
		}
	}
	for _, t := range c.Tools {
		var ot tool
		ot.Type = "function"
		ot.Function.Name = t.Name
		ot.Function.Description = t.Description
		ot.Function.Parameters = t.Parameters
		if len(ot.Function.Parameters) == 0 {
			ot.Function.Parameters = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		req.Tools = append(req.Tools, ot)
	}
	return req
}

func numCtx(model *llm.Model, opts *llm.StreamOptions) int {
	switch v := opts.Extra["ollama.num_ctx"].(type) {
	case int:
		return v
	case int64:
		return int(v)
	case float64:
		return int(v)
	}
	return model.ContextWindow
}

func level(l llm.ThinkingLevel) string {
	switch l {
	case llm.ThinkingMinimal, llm.ThinkingLow:
		return "low"
	case llm.ThinkingHigh, llm.ThinkingXHigh:
		return "high"
	}
	return "medium"
}
