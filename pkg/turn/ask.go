package turn

import (
	"strings"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/tools"
)

// askTool is the tool whose result is a question for the user (tools.AskDetails): the turn ends
// after it, the question is the reply, and the user's answer arrives as the next message (a
// new turn that sees the question and the call in its context).
const askTool = "ask_user"

// asked returns the question of a successful ask_user result among msgs. Only ask_user's
// results count: another tool cannot end a turn by returning an "ask" payload.
func asked(msgs []llm.Message) (tools.AskDetails, bool) {
	for i := len(msgs) - 1; i >= 0; i-- {
		m := &msgs[i]
		if m.Role == llm.RoleAssistant {
			break // only the last tool batch
		}
		if m.Role != llm.RoleToolResult || m.ToolName != askTool || m.IsError {
			continue
		}
		if d, ok := tools.AskQuestion(tools.Result{Details: m.Details}); ok {
			return d, true
		}
	}
	return tools.AskDetails{}, false
}

// stopOnAsk is the loop's StopAfterTools: a batch with an ask_user question ends the run.
func stopOnAsk(results []llm.Message) bool {
	_, ok := asked(results)
	return ok
}

// replyFor is the reply of a turn that ended with msgs (the turn's messages, final the last
// assistant message): the question when it ended on ask_user, else the final text.
func (t *turnRun) replyFor(final *llm.Message, msgs []llm.Message) string {
	d, ok := asked(msgs)
	if !ok {
		return t.replyText(final)
	}
	var b strings.Builder
	if final != nil {
		if s := strings.TrimSpace(final.TextContent()); s != "" && !strings.Contains(s, d.Ask) {
			b.WriteString(s)
			b.WriteString("\n\n")
		}
	}
	b.WriteString(d.Ask)
	for _, o := range d.Options {
		b.WriteString("\n- ")
		b.WriteString(o)
	}
	return b.String()
}
