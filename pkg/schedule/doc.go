// Package schedule keeps agentbus's durable background work on JetStream: reminders
// (schedule_followup), the HEARTBEAT.md check and recurring jobs as message schedules, and the
// records of background tasks (KV tasks) that /tasks lists.
//
// # Schedules
//
// A schedule is one message on schedule.<sk>.<id> in SESSION_IN with the Nats-Schedule header
// ("@at <RFC3339>", "@every <duration>" or a six-field cron expression) and
// Nats-Schedule-Target agent.in.<sk>. The server keeps it in the stream (file storage,
// replicated like the stream), so it survives every agentbus process and the NATS server
// restarting, and the server fires it: one inbox event per firing however many turn workers
// run. The event is an inbox.scheduled whose body is the schedule message's body; the
// session's owner handles it like any other inbox event, once, in inbox order.
//
// A new message on the same subject replaces the schedule (the server tracks one schedule per
// subject; the message is also a subject rollup, so the old one is gone from the stream). That
// is how "a new reminder cancels the session's pending one" works: follow-ups use the one id
// "followup" per session. An "@at" schedule removes itself when it fires; Cancel replaces the
// schedule message with a plain marker (a rollup without Nats-Schedule, expiring after a
// minute), which ends the schedule.
//
// # Trust
//
// Only the turn worker writes schedules (and ingest none): schedule_followup runs on a tool
// worker, which validates the request and records it in KV tasks, but the schedule itself is
// written by the turn worker that made the call, for its own session and caller
// (ApplyFollowUp), so a tool worker cannot make the bot speak in a chat that did not ask. A
// fired schedule still vouches for nobody: the turn worker trusts no sender roles from it.
//
// # Task records
//
// KV tasks holds one TaskRecord per background task (key <sk>.<id>): created pending by the
// tool that queues the task, set running by the runner (Attempts counts the starts), then
// done, failed or cancelled. The runner checks the record before it runs and before it
// delivers, which is what keeps a redelivered task from delivering twice.
package schedule
