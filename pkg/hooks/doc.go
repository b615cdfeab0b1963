// Package hooks runs plugins at steps of the pipeline: the ai.hooks of agentbus.yml, called
// over HTTP (a signed POST) or NATS request-reply, and Go functions registered in-process
// (Register). docs/hooks.md is the contract for hook authors; this comment is the one for the
// roles that call it.
//
// # Events and where they run
//
// Each event runs in the role that owns its step, so a role needs to reach only its own hooks:
//
//	message.received   turn worker, when a turn takes its inbound message (before the model)
//	agent.bootstrap    turn worker, when it first builds a session epoch's system prompt
//	context.transform  turn worker, before every model call, after built-in compaction (L1)
//	session.new        turn worker, when /reset, /new or /clear starts a new epoch
//	session.compact    turn worker, after a compaction's summary was committed
//	tool.before        tool worker, after the arguments were validated, before the tool runs
//	tool.after         tool worker, after the tool returned, before its result is recorded
//	message.sending    egress, before a reply part is sent to its platform
//	message.sent       egress, after the part's delivery receipt was recorded
//
// # Order and answers
//
// Configured hooks run in configuration order, then in-process hooks in registration order.
// A modify answer changes the event's data (only the fields its event allows: Modifiable) and
// the next hook sees the changed data; a block answer ends the chain. A block answer to an event
// that cannot be blocked is taken as continue (and logged).
//
// # Failures
//
// A hook that fails (transport error, non-2xx, an answer that is not JSON) or does not answer
// within its timeout is logged and counted (agentbus_hook_calls_total{outcome=error|timeout})
// and handled by its onError: continue goes on as if it had answered continue; block blocks
// the step (message.received: the message is dropped without a reply; message.sending: the
// part is not sent; tool.before: the model gets an error result; for events that cannot be
// blocked by an answer, Outcome.Blocked makes the step fail: tool.after turns the result into
// an error result, context.transform and agent.bootstrap fail the model step).
//
// # Ids and delivery
//
// Every event's id is derived from the ids of the step it belongs to (the session, the turn,
// the tool call, the outbound part), never made up, so a step that runs again after a crash
// or redelivery calls its hooks with the same id: a hook can recognize a repeat. Notifications
// (message.sent, session.new, session.compact) are sent on a goroutine of their own and
// retried with the same id until a hook answers or NotifyAttempts attempts failed; the step
// does not wait for them.
//
// # Isolation
//
// A call blocks only the step that makes it (one session's turn, one tool call, one reply
// part), for at most its timeout; sessions are served concurrently by the roles, so a hanging
// hook never stalls other sessions.
package hooks
