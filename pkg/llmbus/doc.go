// Package llmbus puts LLM providers on NATS: a provider service, in any language, answers each
// model call of agentbus (ai.providers.<alias>.api: bus, with a subject) with a stream of the
// same events pkg/llm's providers yield. pkg/llm and pkg/loop know nothing of it: the Client
// is an llm.Provider like any other, and Serve puts any llm.Provider on the bus.
//
// # Wire contract (version 1)
//
// docs/providers.md ("A provider on the bus") is the full contract, written for implementers
// in other languages; in short:
//
//   - Request: a JSON Request published to the provider's subject with the client's inbox as
//     reply subject (header VersionHeader: 1).
//   - Reply stream: JSON Events on the inbox, seq 1, 2, 3, ... without gaps; a heartbeat at
//     once and whenever the server has been quiet for its heartbeat interval; then start, the
//     block events (text/thinking/toolcall start, delta, end) and exactly one done or error,
//     last. Every event's NATS reply subject is the stream's control subject.
//   - Cancellation: the client publishes a Control{type: cancel} to the control subject and
//     drops its inbox; a server also notices a vanished client, because the NATS server
//     answers its next event with a no-responders status on the control subject.
//
// # Errors and what the caller does with them
//
// Every failure reaches the caller as the stream's terminal error event (llm.Provider's
// contract), its text classified by the same rules as the HTTP providers' errors:
//
//   - the served provider's own failure (HTTP 429, 5xx, context overflow, a bad key) passes
//     through as its text, so fallback (pkg/models.FallbackReason) and compaction
//     (llm.IsContextOverflow) act on it as if the provider were local;
//   - nobody listens on the subject: retried (WithAttempts, reported to llm.WithRetryHook as
//     RetryTransport), then "llmbus: no responders ...", an unreachable provider to fallback;
//   - nothing at all for the idle timeout: "llmbus: timed out ...", unavailable to fallback;
//   - a server that breaks the contract: "llmbus: protocol error: ...", reported, never
//     retried or fallen back from.
//
// # Caveats
//
// A request carries the whole context, images included, in one NATS message: it must fit the
// server's max_payload (1 MB by default). Core NATS delivers a stream in order but may drop
// messages for a slow consumer; the client reads into an unbounded pending queue and treats a
// seq gap as an error rather than show a reply with a hole in it.
package llmbus
