package anthropic

import (
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/anthropics/anthropic-sdk-go"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/internal/streambuild"
)

// defaultMaxTokens is used when neither the options nor the model say (the API requires one).
const defaultMaxTokens = 4096

// adaptiveModels have adaptive thinking with an effort instead of a token budget.
var adaptiveModels = regexp.MustCompile(`claude-(opus|sonnet)-4-([6-9]|\d\d)|claude-(opus|sonnet)-[5-9]`)

func buildParams(model *llm.Model, c *llm.Context, opts *llm.StreamOptions) (anthropic.MessageNewParams, error) {
	maxTokens := opts.MaxTokens
	if maxTokens <= 0 {
		maxTokens = model.MaxTokens
	}
	if maxTokens <= 0 {
		maxTokens = defaultMaxTokens
	}
	params := anthropic.MessageNewParams{Model: anthropic.Model(model.ID)}

	cache, ttl := cacheOption(opts)
	if c.SystemPrompt != "" {
		sys := anthropic.TextBlockParam{Text: streambuild.Sanitize(c.SystemPrompt)}
		if cache {
			sys.CacheControl = ephemeral(ttl)
		}
		params.System = []anthropic.TextBlockParam{sys}
	}
	msgs, err := convertMessages(llm.TransformMessages(c.Messages, model), model)
	if err != nil {
		return params, err
	}
	if cache {
		markLastUser(msgs, ttl)
	}
	params.Messages = msgs

	for _, t := range c.Tools {
		schema := anthropic.ToolInputSchemaParam{}
		if len(t.Parameters) > 0 {
			var m map[string]any
			if err := json.Unmarshal(t.Parameters, &m); err != nil {
				return params, fmt.Errorf("tool %s: parameters: %w", t.Name, err)
			}
			schema.Properties = m["properties"]
			if req, ok := m["required"].([]any); ok {
				for _, r := range req {
					if s, ok := r.(string); ok {
						schema.Required = append(schema.Required, s)
					}
				}
			}
			extra := map[string]any{}
			for k, v := range m {
				if k != "properties" && k != "required" && k != "type" {
					extra[k] = v
				}
			}
			if len(extra) > 0 {
				schema.ExtraFields = extra
			}
		}
		tp := anthropic.ToolParam{Name: t.Name, InputSchema: schema}
		if t.Description != "" {
			tp.Description = anthropic.String(t.Description)
		}
		params.Tools = append(params.Tools, anthropic.ToolUnionParam{OfTool: &tp})
	}

	thinking := opts.Thinking != llm.ThinkingOff && model.Reasoning
	if thinking {
		adaptive := adaptiveModels.MatchString(model.ID)
		if v, ok := opts.Extra["anthropic.adaptive"].(bool); ok {
			adaptive = v
		}
		if adaptive {
			params.Thinking = anthropic.ThinkingConfigParamUnion{OfAdaptive: &anthropic.ThinkingConfigAdaptiveParam{}}
			params.OutputConfig = anthropic.OutputConfigParam{Effort: effort(opts.Thinking)}
		} else {
			budget := opts.ThinkingBudgets.Budget(opts.Thinking)
			if budget < 1024 {
				budget = 1024
			}
			if maxTokens <= budget { // the budget counts toward max_tokens and must be below it
				maxTokens = budget + defaultMaxTokens
				if model.MaxTokens > budget && maxTokens > model.MaxTokens {
					maxTokens = model.MaxTokens
				}
			}
			params.Thinking = anthropic.ThinkingConfigParamOfEnabled(int64(budget))
		}
	} else if opts.Temperature != nil { // temperature is rejected together with thinking
		params.Temperature = anthropic.Float(*opts.Temperature)
	}
	params.MaxTokens = int64(maxTokens)
	return params, nil
}

func effort(l llm.ThinkingLevel) anthropic.OutputConfigEffort {
	switch l {
	case llm.ThinkingMinimal, llm.ThinkingLow:
		return anthropic.OutputConfigEffortLow
	case llm.ThinkingMedium:
		return anthropic.OutputConfigEffortMedium
	case llm.ThinkingXHigh:
		return anthropic.OutputConfigEffortXhigh
	}
	return anthropic.OutputConfigEffortHigh
}

func cacheOption(opts *llm.StreamOptions) (bool, anthropic.CacheControlEphemeralTTL) {
	switch v := opts.Extra["anthropic.cacheControl"].(type) {
	case bool:
		return v, ""
	case string:
		switch v {
		case "none", "off", "false":
			return false, ""
		case "1h":
			return true, anthropic.CacheControlEphemeralTTLTTL1h
		}
	}
	return true, ""
}

func ephemeral(ttl anthropic.CacheControlEphemeralTTL) anthropic.CacheControlEphemeralParam {
	cc := anthropic.NewCacheControlEphemeralParam()
	cc.TTL = ttl
	return cc
}

// markLastUser puts the cache breakpoint on the last block of the last user message, so the
// whole conversation up to the newest turn is cached.
func markLastUser(msgs []anthropic.MessageParam, ttl anthropic.CacheControlEphemeralTTL) {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role != anthropic.MessageParamRoleUser || len(msgs[i].Content) == 0 {
			continue
		}
		last := msgs[i].Content[len(msgs[i].Content)-1]
		if cc := last.GetCacheControl(); cc != nil {
			*cc = ephemeral(ttl)
		}
		return
	}
}

func convertMessages(in []llm.Message, model *llm.Model) ([]anthropic.MessageParam, error) {
	var out []anthropic.MessageParam
	images := model.SupportsImages() || len(model.Input) == 0
	for i := 0; i < len(in); i++ {
		m := in[i]
		switch m.Role {
		case llm.RoleUser:
			var blocks []anthropic.ContentBlockParamUnion
			for _, b := range m.Content {
				switch b.Type {
				case llm.ContentText:
					if b.Text != "" {
						blocks = append(blocks, anthropic.NewTextBlock(streambuild.Sanitize(b.Text)))
					}
				case llm.ContentImage:
					if images {
						blocks = append(blocks, anthropic.NewImageBlockBase64(b.MimeType, b.Data))
					} else {
						blocks = append(blocks, anthropic.NewTextBlock("(image omitted: model does not accept images)"))
					}
				}
			}
			if len(blocks) == 0 {
				continue // the API rejects empty user content
			}
			out = append(out, anthropic.NewUserMessage(blocks...))
		case llm.RoleAssistant:
			var blocks []anthropic.ContentBlockParamUnion
			for _, b := range m.Content {
				switch b.Type {
				case llm.ContentText:
					if b.Text != "" {
						blocks = append(blocks, anthropic.NewTextBlock(streambuild.Sanitize(b.Text)))
					}
				case llm.ContentThinking:
					switch {
					case b.Redacted:
						blocks = append(blocks, anthropic.NewRedactedThinkingBlock(b.Thinking))
					case b.ThinkingSignature == "":
						// Without a signature the API would reject the block; keep what was
						// thought as text.
						if b.Thinking != "" {
							blocks = append(blocks, anthropic.NewTextBlock(streambuild.Sanitize(b.Thinking)))
						}
					default:
						blocks = append(blocks, anthropic.NewThinkingBlock(b.ThinkingSignature, streambuild.Sanitize(b.Thinking)))
					}
				case llm.ContentToolCall:
					args := b.Arguments
					if args == nil {
						args = map[string]any{}
					}
					blocks = append(blocks, anthropic.NewToolUseBlock(b.ID, sanitizeAny(args), b.Name))
				}
			}
			if len(blocks) == 0 {
				continue
			}
			out = append(out, anthropic.NewAssistantMessage(blocks...))
		case llm.RoleToolResult:
			// All results that follow one another go into one user message.
			var blocks []anthropic.ContentBlockParamUnion
			for ; i < len(in) && in[i].Role == llm.RoleToolResult; i++ {
				blocks = append(blocks, toolResult(in[i], images))
			}
			i--
			out = append(out, anthropic.NewUserMessage(blocks...))
		}
	}
	return out, nil
}

func toolResult(m llm.Message, images bool) anthropic.ContentBlockParamUnion {
	tr := anthropic.ToolResultBlockParam{ToolUseID: m.ToolCallID}
	if m.IsError {
		tr.IsError = anthropic.Bool(true)
	}
	for _, b := range m.Content {
		switch b.Type {
		case llm.ContentText:
			if b.Text != "" {
				tr.Content = append(tr.Content, anthropic.ToolResultBlockParamContentUnion{OfText: &anthropic.TextBlockParam{Text: streambuild.Sanitize(b.Text)}})
			}
		case llm.ContentImage:
			if images {
				img := anthropic.NewImageBlockBase64(b.MimeType, b.Data)
				tr.Content = append(tr.Content, anthropic.ToolResultBlockParamContentUnion{OfImage: img.OfImage})
			}
		}
	}
	if len(tr.Content) == 0 {
		tr.Content = append(tr.Content, anthropic.ToolResultBlockParamContentUnion{OfText: &anthropic.TextBlockParam{Text: "(no output)"}})
	}
	return anthropic.ContentBlockParamUnion{OfToolResult: &tr}
}

// sanitizeAny makes every string inside a decoded JSON value valid UTF-8.
func sanitizeAny(v any) any {
	switch x := v.(type) {
	case string:
		return streambuild.Sanitize(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[streambuild.Sanitize(k)] = sanitizeAny(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = sanitizeAny(e)
		}
		return out
	}
	return v
}
