package turn

import (
	"fmt"
	"strings"

	"github.com/agentbus/agentbus/pkg/llm"
)

// turnReply is what a committed turn posts, in order, each its own message:
//
//   - the answers the model gave before a follow-up (/followup) or a steer made the loop go on:
//     the model's context holds them as said to the user, so the user must see them (issue 37:
//     only the follow-up's answer was posted);
//   - the turn's reply (replyFor), and when the model still asked for tools at the iteration
//     limit, a line that says the turn stopped there (issue 37: such a turn ended in silence).
//
// final is the last assistant message of msgs, the turn's messages. It sets t.limitSteps for
// the turn's outcome and log line. Pure over msgs, so a resume posts the same parts (same ids).
func (t *turnRun) turnReply(final *llm.Message, msgs []llm.Message) []string {
	texts := earlierAnswers(msgs)
	text := t.replyFor(final, msgs)
	if stoppedAtLimit(final, msgs) {
		t.limitSteps = modelCalls(msgs)
		t.a.log.Warn("turn stopped at the iteration limit", "turn", t.id, "model_calls", t.limitSteps,
			"model", final.Provider+"/"+final.Model)
		text = strings.TrimSpace(strings.TrimSpace(text) + "\n\n" + limitText(t.limitSteps))
	}
	return append(texts, text)
}

// limitText tells the user that the turn stopped at its limit of model calls.
func limitText(steps int) string {
	return fmt.Sprintf("⚠️ Stopped after %d steps: this turn reached its limit of model calls (ai.agent.maxIterations) "+
		"before the model finished. Send \"continue\" to let it go on from here.", steps)
}

// stoppedAtLimit reports whether the loop stopped with the model's tool calls answered but the
// model not asked again: the only way a turn ends on a tool batch other than ask_user's.
func stoppedAtLimit(final *llm.Message, msgs []llm.Message) bool {
	if final == nil || len(final.ToolCalls()) == 0 {
		return false
	}
	if s := final.StopReason; s == llm.StopReasonError || s == llm.StopReasonAborted {
		return false
	}
	_, ask := asked(msgs)
	return !ask
}

// modelCalls counts the assistant messages of msgs: one per model call.
func modelCalls(msgs []llm.Message) int {
	n := 0
	for i := range msgs {
		if msgs[i].Role == llm.RoleAssistant {
			n++
		}
	}
	return n
}

// earlierAnswers are the texts of the assistant messages of msgs that ended a run of the loop
// (no tool calls, not failed) and were followed by a user message: a follow-up or a steer the
// loop took after that answer.
func earlierAnswers(msgs []llm.Message) []string {
	var out []string
	for i := 0; i+1 < len(msgs); i++ {
		m := &msgs[i]
		if m.Role != llm.RoleAssistant || msgs[i+1].Role != llm.RoleUser || len(m.ToolCalls()) > 0 {
			continue
		}
		if m.StopReason == llm.StopReasonError || m.StopReason == llm.StopReasonAborted {
			continue
		}
		if text := strings.TrimSpace(m.TextContent()); text != "" && text != HeartbeatOK {
			out = append(out, text)
		}
	}
	return out
}
