// Package toolworker is the tool-worker role: it serves the tools of a *tools.Registry to every
// turn worker on the bus (DESIGN.md §3, §5).
//
// # Registry
//
// Run announces each tool in KV "tools" (key events.EncodeToken(name), value an
// events.ToolEntry) and re-puts it every HeartbeatEvery, well inside the bucket TTL, so turn
// workers offer only tools somebody serves right now. Several workers serving one tool merge
// their ids into Workers with a revision CAS. Stale ids drop out by generation: a heartbeat that
// finds an entry last refreshed in an earlier window of 2×HeartbeatEvery starts the list afresh
// with its own id, and every live worker adds itself back within the window. Stop removes the
// worker's id (and the entry when it was the last one); Kill leaves it to the TTL, like a crash.
//
// # Calls
//
// Each tool has one durable pull consumer on TOOL_CALLS ("tool_"+token, filter
// events.ToolCallSubject(name)) shared by every worker serving it; the stream is a work queue, so
// each request goes to one worker at a time. A call is handled in this order:
//
//  1. decode; a malformed request is dead-lettered (dlq.tool-worker.invalid) with the reason
//     and, when its call id and session key can be read, answered with an error result so the
//     turn does not hang;
//  2. a result already on events.ToolResultSubject(sk, callId) → ack, nothing else (a call
//     runs at most once per call id, whatever its Nats-Msg-Id); a duplicate of a call that is
//     running on this worker waits for that run's result;
//  3. on the last allowed delivery (MaxAttempts exhausted by crashes) → error result + dead letter;
//  4. past its deadline → error result "deadline passed";
//  5. gating re-checked against the call's Caller (platform, scope, roles; the caller must match
//     the session key) → error result with the refusal;
//  6. arguments validated and coerced against the schema → error result naming the path;
//  7. non-idempotent tools: a "started" marker is created in KV "tool_markers" (key
//     token(callId), MarkerKey) naming the worker and its run's instance, and the result is
//     looked for once more (a marker is purged once its call's result is stored, step 9, so a
//     create succeeds again after a finished attempt; the look finds that attempt's result). A
//     marker an older version left in KV "delivered" (key "tool."+token(callId)) counts as
//     one, until that bucket's TTL removes it. If a marker already exists a
//     previous attempt started and may have had side effects (idempotency comes from the
//     worker's own tool definition, not from the request's Idempotent field): the worker waits
//     for that attempt's result while the attempt may still be running on a live worker. Every
//     second it asks the attempt's process directly, a request on
//     events.ToolAttemptSubject(instance): "running" keeps it waiting; "idle" (the process no
//     longer handles the call, so its result is stored if it will ever be) and "no responders"
//     (the process is gone: a killed process's NATS connection closes with it) end the wait
//     after a last look for the result (250 ms for a gone process). An unanswered probe, or a
//     marker of an older version without an instance, falls back to the marker's beats: a
//     running attempt rewrites its marker every second, so a marker that has not moved for 3 s
//     means the attempt's worker is gone. The wait also ends when the attempt's own timeout
//     has passed. If no result appeared, it answers "tool X was interrupted after it started
//     and is not idempotent; not retried automatically". Idempotent tools just run again after
//     a crash;
//  8. run with a timeout (the per-tool timeout or DefaultTimeout, never past the call's
//     deadline); a panic, an error or a timeout becomes an error result;
//  9. publish the result (waiting for the PubAck; Nats-Msg-Id "result/"+callId), then ack,
//     then purge the call's marker if it has one, leaving a purge marker with a message TTL
//     (markerPurgeTTL): KV tool_markers holds the calls in flight, not every call made.
//
// While a call is handled the worker sends in-progress acks (natsutil.InProgress: the first
// within AckWait/2, then every AckWait/3), so a slow tool is not redelivered to another
// worker; a crashed worker's calls come back after AckWait (default 1 s). So a call held by a
// killed worker is answered about AckWait after the kill: run again if idempotent, or answered
// "interrupted" one probe later. A live worker whose in-progress acks were late (a loaded
// machine) may see its call redelivered to another worker: a non-idempotent call then waits
// there for the running attempt (its process answers "running"); an idempotent one may run
// twice, which idempotent tools allow. A worker cut off from the bus for longer than AckWait
// (its NATS server died and it is reconnecting) looks gone too: a non-idempotent call it runs
// is then answered "interrupted" (which says it may or may not have taken effect) although it
// may still finish; it is never run twice.
//
// The window DESIGN.md §5 allows remains: a crash between an idempotent tool's side effect and
// the result record runs the tool again; a timed-out tool that ignores its context keeps running
// in the background after its error result was recorded.
//
// # Tools of this package
//
// UserProfileTool (user_profile, KV "profiles") and ChatHistoryTool (chat_history, served by
// the transcript archive over NATS request/reply, see HistorySearcher).
package toolworker
