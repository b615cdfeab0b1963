package openairesponses

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/internal/streambuild"
)

func buildParams(model *llm.Model, c *llm.Context, opts *llm.StreamOptions) (responses.ResponseNewParams, error) {
	params := responses.ResponseNewParams{
		Model: shared.ResponsesModel(model.ID),
		Store: openai.Bool(false), // replay carries everything (encrypted reasoning), no server state
	}
	if c.SystemPrompt != "" {
		params.Instructions = openai.String(streambuild.Sanitize(c.SystemPrompt))
	}
	maxTokens := opts.MaxTokens
	if maxTokens <= 0 {
		maxTokens = model.MaxTokens
	}
	if maxTokens > 0 {
		params.MaxOutputTokens = openai.Int(int64(maxTokens))
	}
	if opts.Temperature != nil && !model.Reasoning { // reasoning models reject temperature
		params.Temperature = openai.Float(*opts.Temperature)
	}
	if opts.SessionID != "" {
		params.PromptCacheKey = openai.String(opts.SessionID)
	}
	if model.Reasoning {
		params.Include = []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent}
		if opts.Thinking != llm.ThinkingOff {
			params.Reasoning = shared.ReasoningParam{Effort: effort(opts.Thinking), Summary: shared.ReasoningSummaryAuto}
		}
	}
	for _, t := range c.Tools {
		schema := map[string]any{"type": "object", "properties": map[string]any{}}
		if len(t.Parameters) > 0 {
			if err := json.Unmarshal(t.Parameters, &schema); err != nil {
				return params, fmt.Errorf("tool %s: parameters: %w", t.Name, err)
			}
		}
		ft := &responses.FunctionToolParam{Name: t.Name, Parameters: schema, Strict: openai.Bool(false)}
		if t.Description != "" {
			ft.Description = openai.String(t.Description)
		}
		params.Tools = append(params.Tools, responses.ToolUnionParam{OfFunction: ft})
	}
	input, err := convertMessages(llm.TransformMessages(c.Messages, model), model)
	if err != nil {
		return params, err
	}
	params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: input}
	return params, nil
}

func effort(l llm.ThinkingLevel) shared.ReasoningEffort {
	switch l {
	case llm.ThinkingMinimal:
		return shared.ReasoningEffortMinimal
	case llm.ThinkingLow:
		return shared.ReasoningEffortLow
	case llm.ThinkingHigh:
		return shared.ReasoningEffortHigh
	case llm.ThinkingXHigh:
		return shared.ReasoningEffortXhigh
	}
	return shared.ReasoningEffortMedium
}

// reasoningItem is what ThinkingSignature holds.
type reasoningItem struct {
	ID               string `json:"id"`
	EncryptedContent string `json:"encrypted_content"`
	Summary          []struct {
		Text string `json:"text"`
	} `json:"summary"`
}

func convertMessages(in []llm.Message, model *llm.Model) (responses.ResponseInputParam, error) {
	var out responses.ResponseInputParam
	images := model.SupportsImages() || len(model.Input) == 0
	for _, m := range in {
		switch m.Role {
		case llm.RoleUser:
			var content responses.ResponseInputMessageContentListParam
			for _, b := range m.Content {
				switch b.Type {
				case llm.ContentText:
					if b.Text != "" {
						content = append(content, responses.ResponseInputContentUnionParam{OfInputText: &responses.ResponseInputTextParam{Text: streambuild.Sanitize(b.Text)}})
					}
				case llm.ContentImage:
					if images {
						content = append(content, imagePart(b))
					}
				}
			}
			if len(content) == 0 {
				continue
			}
			out = append(out, responses.ResponseInputItemUnionParam{OfMessage: &responses.EasyInputMessageParam{
				Role: responses.EasyInputMessageRoleUser, Content: responses.EasyInputMessageContentUnionParam{OfInputItemContentList: content},
			}})
		case llm.RoleAssistant:
			same := m.API == model.API && m.Provider == model.Provider && m.Model == model.ID
			for _, b := range m.Content {
				switch b.Type {
				case llm.ContentThinking:
					if !same || b.Redacted || b.ThinkingSignature == "" {
						continue // foreign thinking was turned into text by transformMessages
					}
					var ri reasoningItem
					if err := json.Unmarshal([]byte(b.ThinkingSignature), &ri); err != nil || ri.ID == "" {
						continue
					}
					item := &responses.ResponseReasoningItemParam{ID: ri.ID, Summary: []responses.ResponseReasoningItemSummaryParam{}}
					for _, s := range ri.Summary {
						item.Summary = append(item.Summary, responses.ResponseReasoningItemSummaryParam{Text: s.Text})
					}
					if ri.EncryptedContent != "" {
						item.EncryptedContent = openai.String(ri.EncryptedContent)
					}
					out = append(out, responses.ResponseInputItemUnionParam{OfReasoning: item})
				case llm.ContentText:
					if b.Text == "" {
						continue
					}
					if same && strings.HasPrefix(b.TextSignature, "msg") {
						out = append(out, responses.ResponseInputItemUnionParam{OfOutputMessage: &responses.ResponseOutputMessageParam{
							ID: b.TextSignature, Status: responses.ResponseOutputMessageStatusCompleted,
							Content: []responses.ResponseOutputMessageContentUnionParam{{OfOutputText: &responses.ResponseOutputTextParam{
								Text: streambuild.Sanitize(b.Text), Annotations: []responses.ResponseOutputTextAnnotationUnionParam{},
							}}},
						}})
					} else {
						out = append(out, responses.ResponseInputItemUnionParam{OfMessage: &responses.EasyInputMessageParam{
							Role: responses.EasyInputMessageRoleAssistant, Content: responses.EasyInputMessageContentUnionParam{OfString: openai.String(streambuild.Sanitize(b.Text))},
						}})
					}
				case llm.ContentToolCall:
					call, item, _ := strings.Cut(b.ID, "|")
					args := b.Arguments
					if args == nil {
						args = map[string]any{}
					}
					raw, err := json.Marshal(args)
					if err != nil {
						return nil, fmt.Errorf("tool call %s: arguments: %w", b.ID, err)
					}
					fc := &responses.ResponseFunctionToolCallParam{CallID: call, Name: b.Name, Arguments: string(raw)}
					if same && item != "" { // another model's item ids would not match its reasoning
						fc.ID = openai.String(item)
					}
					out = append(out, responses.ResponseInputItemUnionParam{OfFunctionCall: fc})
				}
			}
		case llm.RoleToolResult:
			call, _, _ := strings.Cut(m.ToolCallID, "|")
			var text []string
			var imgs responses.ResponseInputMessageContentListParam
			for _, b := range m.Content {
				switch b.Type {
				case llm.ContentText:
					text = append(text, streambuild.Sanitize(b.Text))
				case llm.ContentImage:
					if images {
						imgs = append(imgs, imagePart(b))
					}
				}
			}
			output := strings.Join(text, "\n")
			if output == "" && len(imgs) > 0 {
				output = "(see attached image)"
			}
			out = append(out, responses.ResponseInputItemUnionParam{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{
				CallID: openai.String(call), Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String(output)},
			}})
			if len(imgs) > 0 { // function_call_output takes text; images follow as a user message
				content := append(responses.ResponseInputMessageContentListParam{{OfInputText: &responses.ResponseInputTextParam{Text: "Attached image(s) from tool result:"}}}, imgs...)
				out = append(out, responses.ResponseInputItemUnionParam{OfMessage: &responses.EasyInputMessageParam{
					Role: responses.EasyInputMessageRoleUser, Content: responses.EasyInputMessageContentUnionParam{OfInputItemContentList: content},
				}})
			}
		}
	}
	return out, nil
}

func imagePart(b llm.Content) responses.ResponseInputContentUnionParam {
	return responses.ResponseInputContentUnionParam{OfInputImage: &responses.ResponseInputImageParam{
		Detail: responses.ResponseInputImageDetailAuto, ImageURL: openai.String("data:" + b.MimeType + ";base64," + b.Data),
	}}
}
