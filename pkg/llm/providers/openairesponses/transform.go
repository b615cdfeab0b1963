package openairesponses

import "github.com/agentbus/agentbus/pkg/llm"

// transformMessages prepares a stored conversation for this provider (cross-provider handoff):
// custom kinds and errored/aborted assistant messages are dropped; thinking from another model
// becomes text and foreign signatures are dropped; tool-call ids are normalized with normID
// (results follow their call); a tool call without a result gets a synthetic error result
// "No result provided" so the request is valid.
func transformMessages(msgs []llm.Message, model *llm.Model, normID func(string) string) []llm.Message {
	out := make([]llm.Message, 0, len(msgs)+1)
	ids := map[string]string{}
	var pending []llm.Content // tool calls of the last assistant message still without a result
	flush := func() {
		for _, tc := range pending {
			out = append(out, llm.Message{
				Role: llm.RoleToolResult, ToolCallID: tc.ID, ToolName: tc.Name, IsError: true,
				Content: []llm.Content{llm.Text("No result provided")},
			})
		}
		pending = nil
	}
	for _, m := range msgs {
		switch m.Role {
		case llm.RoleUser:
			flush()
			out = append(out, m)
		case llm.RoleToolResult:
			if id, ok := ids[m.ToolCallID]; ok {
				m.ToolCallID = id
			}
			for i, tc := range pending {
				if tc.ID == m.ToolCallID {
					pending = append(pending[:i:i], pending[i+1:]...)
					out = append(out, m)
					break
				}
			}
		case llm.RoleAssistant:
			flush()
			if m.StopReason == llm.StopReasonError || m.StopReason == llm.StopReasonAborted {
				continue
			}
			same := m.API == model.API && m.Provider == model.Provider && m.Model == model.ID
			c := m.Clone()
			c.Content = c.Content[:0]
			for _, b := range m.Content {
				switch b.Type {
				case llm.ContentThinking:
					if same {
						c.Content = append(c.Content, b)
					} else if !b.Redacted && b.Thinking != "" {
						c.Content = append(c.Content, llm.Text(b.Thinking))
					}
				case llm.ContentText:
					if !same {
						b.TextSignature = ""
					}
					c.Content = append(c.Content, b)
				case llm.ContentToolCall:
					if !same {
						b.ThoughtSignature = ""
					}
					if id := normID(b.ID); id != b.ID {
						ids[b.ID] = id
						b.ID = id
					}
					if b.Arguments == nil {
						b.Arguments = map[string]any{}
					}
					c.Content = append(c.Content, b)
					pending = append(pending, b)
				default:
					c.Content = append(c.Content, b)
				}
			}
			out = append(out, c)
		}
	}
	flush()
	return out
}
