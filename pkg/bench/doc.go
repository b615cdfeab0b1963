// Package bench measures the whole agentbus pipeline the way a chat platform sees it: signed
// webhook POSTs in, signed callback POSTs out, with every role (ingest, turn worker, tool
// worker, egress) and an embedded NATS JetStream server in this one process, exactly as
// `agentbus up` composes them (pkg/app).
//
// The model is the faux provider configured through ai.providers (api: faux, responder: demo,
// latencyMs), so the model costs no CPU beyond streaming its deltas and waits the configured
// latency before its first event. With Config.Tool every message names the bench_echo tool, a
// trivial tool added to the tool worker through app.Options.ExtraTools, so every turn is two
// model calls around one tool call that travels TOOL_CALLS → tool worker → TOOL_RESULTS.
//
// What is measured (see Result):
//   - turns/s: replies received per second of the measured phase;
//   - latency per message: from just before the webhook POST to the moment the callback
//     server has read the reply (the first part, when egress splits a long reply). Added
//     latency subtracts the configured model latency once per model call;
//   - CPU seconds per turn: getrusage(RUSAGE_SELF) user+system over the measured phase divided
//     by turns. The load generator and the callback server run in the same process, so this
//     includes the client side of HTTP too (an upper bound for the pipeline);
//   - JetStream operations per turn: messages appended to streams (sum of every stream's last
//     sequence, KV buckets included), JetStream API requests (the server's api.total counter)
//     and all messages the server received (Varz in_msgs: publishes, acks, pulls, KV gets);
//   - memory: HeapInuse sampled while turns are in flight, divided by the number in flight at
//     the sample with the most in flight (and the same over the heap grown since the idle
//     baseline);
//   - a raw JetStream async-publish baseline (natsutil.BaselinePublish) on the same server,
//     so a reader can tell the pipeline's cost from the machine's speed.
//
// With Config.Kill two turn-worker replicas share the sessions; when half of the turns are
// done, the second one is killed (turn.Worker.Kill: no lease release, no acks, as a crashed
// process). For every session whose lease it held and that had a message waiting for its
// reply at that moment, the takeover time is the time from the kill to that reply.
//
// # Roles as processes
//
// With Options.Processes (agentbus bench --processes) every role replica runs as an OS process
// of its own, against one nats-server process or a cluster of three on loopback: the
// executable is re-executed with ChildEnv set, and ChildMain (called first by its main, or by
// a TestMain) plays the part. The load goes through the signed webhook exactly as in one
// process, spread over the ingest processes. Each child answers a control endpoint on
// loopback: POST /begin and /end bracket the measured phase, and /end returns the child's own
// CPU (getrusage), run-queue wait (Linux schedstat), model calls, heap peaks and scheduling
// latency; a NATS node also answers GET /counters with its JetStream counters (merged over a
// cluster: per stream the largest last sequence, per node the messages received). The figures
// are then the same as in one process, summed over every process (the bench's own included),
// and Result.Processes has them per process. Children die with the bench (internal/childproc).
//
// # From outside
//
// RunOutside (agentbus bench --outside) measures `agentbus up` as a process of its own, through
// the signed webhook and the callback, against a bus-less relay of the same shape (relay.go),
// in the same run, and reports each process's own CPU per turn from /proc.
//
// Load: with Rate 0 the run is a closed loop, each session sends its next message when the
// previous reply arrived (concurrency = Sessions). With Rate > 0 a pacer hands out send permits
// at Rate per second to idle sessions; when every session is waiting for a reply the pacer
// waits too (the achieved rate is reported, never the offered one).
package bench
