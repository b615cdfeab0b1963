package openai

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/agentbus/agentbus/pkg/llm"
)

// The request as this provider built it before issue 40: openai-go params, encoded by the
// SDK. requestBody (encode.go) must send what this sent; TestRequestBodyMatchesSDK and
// BenchmarkRequestBody compare them.

// buildParams maps an llm.Context and options to a chat completions request.
func buildParams(model *llm.Model, c *llm.Context, opts *llm.StreamOptions, cp compat) (openai.ChatCompletionNewParams, error) {
	p := openai.ChatCompletionNewParams{Model: shared.ChatModel(model.ID)}
	switch cp.maxTokensField {
	case FieldMaxCompletionTokens, FieldMaxTokens:
	default:
		return p, fmt.Errorf("compat.maxTokensField %q: want %q or %q", cp.maxTokensField, FieldMaxCompletionTokens, FieldMaxTokens)
	}
	switch cp.thinkingFormat {
	case ThinkingFormatOpenAI, ThinkingFormatZAI, ThinkingFormatQwen:
	default:
		return p, fmt.Errorf("compat.thinkingFormat %q: want %q, %q or %q", cp.thinkingFormat, ThinkingFormatOpenAI, ThinkingFormatZAI, ThinkingFormatQwen)
	}

	msgs, err := convertMessages(model, c, cp)
	if err != nil {
		return p, err
	}
	p.Messages = msgs

	if len(c.Tools) > 0 {
		p.Tools = make([]openai.ChatCompletionToolUnionParam, 0, len(c.Tools))
		for _, t := range c.Tools {
			params := map[string]any{}
			if len(t.Parameters) > 0 && string(t.Parameters) != "null" {
				if err := json.Unmarshal(t.Parameters, &params); err != nil {
					return p, fmt.Errorf("tool %s: parameters are not a JSON Schema object: %w", t.Name, err)
				}
			}
			if len(params) == 0 {
				params = map[string]any{"type": "object", "properties": map[string]any{}}
			}
			def := shared.FunctionDefinitionParam{Name: t.Name, Parameters: params}
			if t.Description != "" {
				def.Description = openai.String(t.Description)
			}
			p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(def))
		}
	}

	if opts.MaxTokens > 0 {
		if cp.maxTokensField == FieldMaxTokens {
			p.MaxTokens = openai.Int(int64(opts.MaxTokens))
		} else {
			p.MaxCompletionTokens = openai.Int(int64(opts.MaxTokens))
		}
	}
	if opts.Temperature != nil {
		p.Temperature = openai.Float(*opts.Temperature)
	}
	if cp.usageInStreaming {
		p.StreamOptions.IncludeUsage = openai.Bool(true)
	}
	if cp.store {
		p.Store = openai.Bool(false)
	}
	if cp.promptCacheKey && opts.SessionID != "" {
		p.PromptCacheKey = openai.String(opts.SessionID)
	}

	extra := map[string]any{}
	if model.Reasoning {
		switch cp.thinkingFormat {
		case ThinkingFormatOpenAI:
			if cp.reasoningEffort && opts.Thinking != llm.ThinkingOff {
				p.ReasoningEffort = shared.ReasoningEffort(opts.Thinking)
			}
		case ThinkingFormatZAI:
			kind := "disabled"
			if opts.Thinking != llm.ThinkingOff {
				kind = "enabled"
			}
			extra["thinking"] = map[string]any{"type": kind}
		case ThinkingFormatQwen:
			extra["enable_thinking"] = opts.Thinking != llm.ThinkingOff
			if opts.Thinking != llm.ThinkingOff {
				extra["thinking_budget"] = opts.ThinkingBudgets.Budget(opts.Thinking)
			}
		}
	}
	if len(extra) > 0 {
		p.SetExtraFields(extra)
	}
	return p, nil
}

// convertMessages maps the conversation. Messages of custom roles never reach a provider
// (ConvertToLLM filters them); any left over are skipped rather than sent.
func convertMessages(model *llm.Model, c *llm.Context, cp compat) ([]openai.ChatCompletionMessageParamUnion, error) {
	out := make([]openai.ChatCompletionMessageParamUnion, 0, len(c.Messages)+1)
	if c.SystemPrompt != "" {
		if cp.developerRole && model.Reasoning {
			out = append(out, openai.DeveloperMessage(c.SystemPrompt))
		} else {
			out = append(out, openai.SystemMessage(c.SystemPrompt))
		}
	}
	// Cross-provider handoff (DESIGN.md §2): thinking from other models becomes text, tool-call
	// ids are normalized, errored/aborted steps dropped, orphan tool calls answered.
	msgs := llm.TransformMessages(c.Messages, model)
	images := model.SupportsImages()
	lastRole := ""
	for i := 0; i < len(msgs); i++ {
		m := &msgs[i]
		switch m.Role {
		case llm.RoleUser:
			if lastRole == llm.RoleToolResult && cp.assistantAfterToolResult {
				out = append(out, openai.AssistantMessage("I have processed the tool results."))
			}
			if emptyUser(m.Content) {
				continue // servers reject empty user turns; there is nothing to say
			}
			out = append(out, userMessage(m.Content, images, model.Accepts(llm.InputAudio)))
		case llm.RoleAssistant:
			if am, ok := assistantMessage(m, cp); ok {
				out = append(out, am)
			} else {
				continue // nothing to replay; do not let it count as the last role
			}
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
				tm := openai.ToolMessage(text, tr.ToolCallID)
				if cp.toolResultName && tr.ToolName != "" {
					tm.OfTool.SetExtraFields(map[string]any{"name": tr.ToolName})
				}
				out = append(out, tm)
			}
			i--
			if len(imgs) > 0 {
				parts := []llm.Content{llm.Text("Attached image(s) from tool result:")}
				out = append(out, userMessage(append(parts, imgs...), true, false))
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
	return out, nil
}

// userMessage builds a user message. Audio blocks become input_audio parts for a model that
// takes audio (InputAudio) when their format is one chat completions accepts (wav, mp3), text
// saying so otherwise; chat completions has no video part, so video blocks become text.
func userMessage(blocks []llm.Content, images, audio bool) openai.ChatCompletionMessageParamUnion {
	onlyText := true
	for _, b := range blocks {
		if b.Type != llm.ContentText {
			onlyText = false
		}
	}
	if onlyText {
		return openai.UserMessage(textOf(blocks))
	}
	parts := make([]openai.ChatCompletionContentPartUnionParam, 0, len(blocks))
	for _, b := range blocks {
		switch b.Type {
		case llm.ContentText:
			parts = append(parts, openai.TextContentPart(b.Text))
		case llm.ContentImage:
			if images {
				parts = append(parts, openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{
					URL: "data:" + b.MimeType + ";base64," + b.Data,
				}))
			} else {
				parts = append(parts, openai.TextContentPart("(image omitted: model does not accept images)"))
			}
		case llm.ContentAudio:
			format := audioFormat(b.MimeType)
			switch {
			case !audio:
				parts = append(parts, openai.TextContentPart("(audio omitted: model does not accept audio)"))
			case format == "":
				parts = append(parts, openai.TextContentPart("(audio omitted: "+b.MimeType+" is not wav or mp3)"))
			default:
				parts = append(parts, openai.InputAudioContentPart(openai.ChatCompletionContentPartInputAudioInputAudioParam{
					Data: b.Data, Format: format,
				}))
			}
		case llm.ContentVideo:
			parts = append(parts, openai.TextContentPart("(video omitted: chat completions takes no video)"))
		}
	}
	return openai.UserMessage(parts)
}

// assistantMessage replays an assistant message: text, tool calls, and thinking either as text
// (Compat.RequiresThinkingAsText), in the reasoning field it streamed in (its signature), or not
// at all. ok is false when nothing is left to send.
func assistantMessage(m *llm.Message, cp compat) (openai.ChatCompletionMessageParamUnion, bool) {
	var text, thinking strings.Builder
	thinkingField := ""
	var calls []openai.ChatCompletionMessageToolCallUnionParam
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
			args, err := json.Marshal(b.Arguments)
			if err != nil || b.Arguments == nil {
				args = []byte("{}")
			}
			calls = append(calls, openai.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID:       b.ID,
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: b.Name, Arguments: string(args)},
				},
			})
		}
	}
	content := text.String()
	var extra map[string]any
	if thinking.Len() > 0 {
		if cp.thinkingAsText {
			if content != "" {
				content = thinking.String() + "\n\n" + content
			} else {
				content = thinking.String()
			}
		} else if thinkingField != "" {
			extra = map[string]any{thinkingField: thinking.String()}
		}
	}
	if content == "" && len(calls) == 0 {
		return openai.ChatCompletionMessageParamUnion{}, false
	}
	am := openai.ChatCompletionAssistantMessageParam{ToolCalls: calls}
	if content != "" {
		am.Content.OfString = openai.String(content)
	}
	if extra != nil {
		am.SetExtraFields(extra)
	}
	return openai.ChatCompletionMessageParamUnion{OfAssistant: &am}, true
}
