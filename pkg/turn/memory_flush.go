package turn

import (
	"context"
	"strings"

	"github.com/agentbus/agentbus/pkg/compaction"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/loop"
	"github.com/agentbus/agentbus/pkg/memory"
	"github.com/agentbus/agentbus/pkg/store"
)

// memoryFlushPrompt starts the silent housekeeping turn before an automatic compaction.
const memoryFlushPrompt = "[housekeeping — not from a user, nothing you write here is shown in the chat] " +
	"The older part of this conversation is about to be replaced by a summary. Before that, save what is worth " +
	"remembering beyond this conversation with the memory_write tool: durable facts about the users, their preferences, " +
	"decisions, promises and open tasks (file \"MEMORY.md\"), and today's notable events (file \"today\"). " +
	"Keep notes short, keep identifiers verbatim, do not repeat what the memory already holds. " +
	"When you are done, or if nothing is worth saving, answer NO_REPLY."

// memoryFlushIterations bounds the housekeeping turn's model calls.
const memoryFlushIterations = 4

// memoryFlush runs the housekeeping turn: the model sees the context about to be compacted and
// may write memory files through the in-process memory_write tool. Nothing is delivered to the
// chat and nothing is committed to the context; failures are logged and do not stop the
// compaction. A worker that dies during it leaves no trace but the files it wrote; the next
// owner runs the flush again before its own compaction.
func (co contextOps) memoryFlush(ctx context.Context, t *turnRun, loaded store.Loaded, system string) {
	a := co.a
	mem := a.w.opts.Memory
	if mem == nil || a.w.opts.Compaction.NoMemoryFlush {
		return
	}
	if !mayWriteSharedMemory(t.msg.Sender) {
		// The files are shared by every chat (and AGENTS.md is part of every system prompt):
		// a turn of someone who may not write them must not let the model write them, whatever
		// the conversation about to be compacted asks for (issue 36: a group without masters
		// put a spoofed sender prefix into AGENTS.md, which the master's private chat then read).
		a.log.Info("memory flush skipped: the turn's sender may not write shared memory", "turn", t.id, "sender", t.msg.Sender.ID)
		return
	}
	tool := mem.Tool()
	s := a.w.compactionSettings(t.model)
	cfg := &loop.Config{
		Model: t.model, StreamFn: a.w.opts.StreamFn, GetAPIKey: a.w.opts.Models.APIKey,
		Executor: loop.InProcess, MaxIterations: memoryFlushIterations, ToolExecution: loop.Sequential,
		TransformContext: t.microCompact(s),
	}
	cfg.StreamOptions.SessionID = t.sidStr
	sys := system + "\n## Memory files\nYou may write memory/MEMORY.md, today's notes and AGENTS.md with memory_write; SOUL.md is read-only.\n"
	ac := &loop.AgentContext{SystemPrompt: sys, Messages: contextMessages(loaded), Tools: []loop.AgentTool{tool}}
	out, err := loop.Run(ctx, []llm.Message{llm.UserText(memoryFlushPrompt, 0)}, ac, cfg, nil)
	writes := 0
	for i := range out {
		for _, c := range out[i].ToolCalls() {
			if c.Name == memory.ToolName {
				writes++
			}
		}
	}
	final := lastAssistant(out)
	if err != nil || final == nil || final.StopReason == llm.StopReasonError {
		msg := ""
		if final != nil {
			msg = final.ErrorMessage
		}
		a.log.Warn("memory flush failed", "turn", t.id, "err", err, "model_error", msg, "writes", writes)
		return
	}
	a.log.Info("memory flushed before compaction", "turn", t.id, "writes", writes,
		"tokens", compaction.Estimate(ac.Messages), "said", strings.TrimSpace(compaction.TruncateUTF8(final.TextContent(), 80)))
}

// mayWriteSharedMemory reports whether a turn acting for sender may write the memory files
// every chat shares (MEMORY.md, the daily notes, AGENTS.md): masters and trusted users only.
// Roles come from ingest's configuration (ai.trigger, the bot's lists), never from a message's
// text; a turn without such a sender (a reminder, which carries no roles) may not.
func mayWriteSharedMemory(sender events.Sender) bool {
	return sender.HasRole(events.RoleMaster) || sender.HasRole(events.RoleTrusted)
}
