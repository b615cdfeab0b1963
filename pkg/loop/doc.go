// Package loop is agentbus's agent loop, shaped after pi's packages/agent: Run and Continue are
// the stateless loop (prompt -> LLM step -> tool calls -> tool results -> LLM step ... until the
// model stops), Agent is the stateful wrapper (conversation, one run at a time, steering and
// follow-up queues, abort, listeners). It knows nothing of NATS, IM platforms or storage: the
// bus, sessions and tool workers are adapters around it (hooks, a ToolExecutor, Subscribe).
//
// A run emits events to one callback, on the caller's goroutine, in pi's order:
//
//	agent_start
//	turn_start
//	  message_start/message_end          for each prompt (Run only)
//	  message_start/message_end          for each steering message polled at the start
//	  message_start, message_update*, message_end     the assistant message (one LLM step)
//	  tool_execution_start, [tool_execution_update*], tool_execution_end   per tool call
//	  message_start/message_end          per toolResult message
//	turn_end                             (assistant message + its tool results)
//	turn_start                           next step: queued steering messages, then the LLM step ...
//	...
//	agent_end                            (every message the run added)
//
// Tool calls are validated with llm.ValidateArguments before BeforeToolCall and execution. Any
// failure (unknown tool, invalid arguments, blocked call, tool error or panic, truncated call)
// becomes an isError toolResult that goes back to the model; the loop goes on. An assistant
// message with StopReason error or aborted ends the run.
//
// The hot path is allocation-lean: message_update passes the provider's event and live partial
// message through (no copy per delta), a single tool call runs on the loop's goroutine, and a
// run allocates its working state once. See docs/agent-loop.md for the full contract and
// BenchmarkTurn for figures.
package loop
