package google

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"google.golang.org/genai"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providers/internal/streambuild"
)

func jsonMarshal(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

func buildRequest(model *llm.Model, c *llm.Context, opts *llm.StreamOptions) ([]*genai.Content, *genai.GenerateContentConfig, error) {
	cfg := &genai.GenerateContentConfig{}
	if c.SystemPrompt != "" {
		cfg.SystemInstruction = &genai.Content{Parts: []*genai.Part{{Text: streambuild.Sanitize(c.SystemPrompt)}}}
	}
	maxTokens := opts.MaxTokens
	if maxTokens <= 0 {
		maxTokens = model.MaxTokens
	}
	if maxTokens > 0 {
		cfg.MaxOutputTokens = int32(maxTokens)
	}
	if opts.Temperature != nil {
		t := float32(*opts.Temperature)
		cfg.Temperature = &t
	}
	if len(c.Tools) > 0 {
		var decls []*genai.FunctionDeclaration
		for _, t := range c.Tools {
			var schema any = map[string]any{"type": "object", "properties": map[string]any{}}
			if len(t.Parameters) > 0 {
				if err := json.Unmarshal(t.Parameters, &schema); err != nil {
					return nil, nil, fmt.Errorf("tool %s: parameters: %w", t.Name, err)
				}
			}
			decls = append(decls, &genai.FunctionDeclaration{Name: t.Name, Description: t.Description, ParametersJsonSchema: schema})
		}
		cfg.Tools = []*genai.Tool{{FunctionDeclarations: decls}}
	}
	if model.Reasoning {
		gemini3 := strings.Contains(model.ID, "gemini-3")
		switch {
		case opts.Thinking != llm.ThinkingOff && gemini3:
			cfg.ThinkingConfig = &genai.ThinkingConfig{IncludeThoughts: true, ThinkingLevel: thinkingLevel(opts.Thinking)}
		case opts.Thinking != llm.ThinkingOff:
			budget := int32(opts.ThinkingBudgets.Budget(opts.Thinking))
			cfg.ThinkingConfig = &genai.ThinkingConfig{IncludeThoughts: true, ThinkingBudget: &budget}
		case !gemini3 && strings.Contains(model.ID, "flash"):
			zero := int32(0) // 2.5 Flash models can switch thinking off; Pro and Gemini 3 cannot
			cfg.ThinkingConfig = &genai.ThinkingConfig{ThinkingBudget: &zero}
		}
	}
	if strings.Contains(model.ID, "gemini-3") {
		// Per request: genai v1.77 applies ExtrasRequestProvider only from the call's options.
		cfg.HTTPOptions = &genai.HTTPOptions{ExtrasRequestProvider: skipMissingSignatures}
	}
	contents, err := convertMessages(llm.TransformMessages(c.Messages, model), model)
	return contents, cfg, err
}

func thinkingLevel(l llm.ThinkingLevel) genai.ThinkingLevel {
	switch l {
	case llm.ThinkingMinimal:
		return genai.ThinkingLevelMinimal
	case llm.ThinkingLow:
		return genai.ThinkingLevelLow
	case llm.ThinkingMedium:
		return genai.ThinkingLevelMedium
	}
	return genai.ThinkingLevelHigh
}

func decodeSig(s string) []byte {
	if s == "" {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil // not ours (another provider's signature format): drop it
	}
	return b
}

func convertMessages(in []llm.Message, model *llm.Model) ([]*genai.Content, error) {
	var out []*genai.Content
	images := model.SupportsImages() || len(model.Input) == 0
	for i := 0; i < len(in); i++ {
		m := in[i]
		switch m.Role {
		case llm.RoleUser:
			var parts []*genai.Part
			for _, b := range m.Content {
				switch b.Type {
				case llm.ContentText:
					if b.Text != "" {
						parts = append(parts, &genai.Part{Text: streambuild.Sanitize(b.Text)})
					}
				case llm.ContentImage:
					if !images {
						continue
					}
					data, err := base64.StdEncoding.DecodeString(b.Data)
					if err != nil {
						return nil, fmt.Errorf("image: invalid base64 data: %w", err)
					}
					parts = append(parts, &genai.Part{InlineData: &genai.Blob{MIMEType: b.MimeType, Data: data}})
				case llm.ContentAudio, llm.ContentVideo:
					// Gemini takes audio and video as inline data; a model declared
					// without that input gets a note instead.
					kind := llm.InputAudio
					if b.Type == llm.ContentVideo {
						kind = llm.InputVideo
					}
					if len(model.Input) > 0 && !model.Accepts(kind) {
						parts = append(parts, &genai.Part{Text: "(" + kind + " omitted: model does not accept " + kind + ")"})
						continue
					}
					data, err := base64.StdEncoding.DecodeString(b.Data)
					if err != nil {
						return nil, fmt.Errorf("%s: invalid base64 data: %w", kind, err)
					}
					parts = append(parts, &genai.Part{InlineData: &genai.Blob{MIMEType: b.MimeType, Data: data}})
				}
			}
			if len(parts) > 0 {
				out = append(out, &genai.Content{Role: genai.RoleUser, Parts: parts})
			}
		case llm.RoleAssistant:
			var parts []*genai.Part
			for _, b := range m.Content {
				switch b.Type {
				case llm.ContentText:
					if b.Text != "" {
						parts = append(parts, &genai.Part{Text: streambuild.Sanitize(b.Text), ThoughtSignature: decodeSig(b.TextSignature)})
					}
				case llm.ContentThinking:
					if b.Redacted {
						continue
					}
					if b.Thinking != "" || b.ThinkingSignature != "" {
						parts = append(parts, &genai.Part{Text: streambuild.Sanitize(b.Thinking), Thought: true, ThoughtSignature: decodeSig(b.ThinkingSignature)})
					}
				case llm.ContentToolCall:
					args := b.Arguments
					if args == nil {
						args = map[string]any{}
					}
					parts = append(parts, &genai.Part{
						FunctionCall:     &genai.FunctionCall{ID: normalizeID(b.ID), Name: b.Name, Args: sanitizeMap(args)},
						ThoughtSignature: decodeSig(b.ThoughtSignature),
					})
				}
			}
			if len(parts) > 0 {
				out = append(out, &genai.Content{Role: genai.RoleModel, Parts: parts})
			}
		case llm.RoleToolResult:
			var parts []*genai.Part
			for ; i < len(in) && in[i].Role == llm.RoleToolResult; i++ {
				parts = append(parts, functionResponse(in[i], images)...)
			}
			i--
			out = append(out, &genai.Content{Role: genai.RoleUser, Parts: parts})
		}
	}
	return out, nil
}

func functionResponse(m llm.Message, images bool) []*genai.Part {
	var text []string
	var extra []*genai.Part
	for _, b := range m.Content {
		switch b.Type {
		case llm.ContentText:
			text = append(text, streambuild.Sanitize(b.Text))
		case llm.ContentImage:
			if data, err := base64.StdEncoding.DecodeString(b.Data); err == nil && images {
				extra = append(extra, &genai.Part{InlineData: &genai.Blob{MIMEType: b.MimeType, Data: data}})
			}
		}
	}
	key := "output"
	if m.IsError {
		key = "error"
	}
	resp := map[string]any{key: strings.Join(text, "\n")}
	return append([]*genai.Part{{FunctionResponse: &genai.FunctionResponse{ID: normalizeID(m.ToolCallID), Name: m.ToolName, Response: resp}}}, extra...)
}

func sanitizeMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[streambuild.Sanitize(k)] = sanitizeAny(v)
	}
	return out
}

func sanitizeAny(v any) any {
	switch x := v.(type) {
	case string:
		return streambuild.Sanitize(x)
	case map[string]any:
		return sanitizeMap(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = sanitizeAny(e)
		}
		return out
	}
	return v
}
