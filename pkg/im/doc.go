// Package im is the platform contract and the framework the IM platforms (pkg/im/<platform>,
// webhook and console included) share: the Sender every outbound half implements and the error
// classes egress reads (ErrUnknownBot, ErrRejected, permanent and retry-after errors), the
// Platform registry entry each adapter declares, the small interfaces an adapter needs from
// the ingest role, per-platform chunking, storing inbound media in the "media" object store,
// and the single-connection holder.
//
// An adapter has two halves. The inbound half runs in the ingest role: it turns platform
// events into events.IMMessage values and hands them to a Sink (the ingest role's Ingestor,
// wrapped by pkg/app), which publishes them on IM_IN with the platform message id as
// Nats-Msg-Id. The outbound half runs in the egress role and implements Sender,
// Send(ctx, events.Outbound) (platformMsgID string, err error): ErrUnknownBot is dead-lettered
// as "unknown_bot", ErrRejected or any error whose Permanent() reports true as "rejected", any
// other is retried, and an error with RetryAfterDelay() pauses the platform first (see Error).
// Adapter packages import neither pkg/ingest nor pkg/egress: roles are never imported by what
// is below them.
//
// # Adding a platform
//
// A platform is its folder, pkg/im/<platform>, which declares an Adapter value of type Platform
// (its name, its configured bots, and constructors for its inbound half, its Sender and its
// previewers), plus one registration line in pkg/app/platforms.go. The composition root loops
// over the registry; nothing else names a platform. The adapter conformance suite
// (pkg/im/imtest) is then run against it with the platform's Features.
//
// Connections a platform allows only once (a OneBot forward WebSocket, a Telegram long poll, a
// Discord gateway session, a Slack socket) are run under Hold: exactly one ingest replica holds
// a KV lease for the connection (bucket "leases", key "im-conn.<platform>.<bot>") and runs it;
// the others wait, and one of them takes the connection over within TTL + TTL/3 when the
// holder dies. Nothing inbound is doubled across a takeover because every message is
// published with its platform message id as the dedupe id. Where the platform does not replay
// what a connection missed (a Discord gateway, a OneBot WebSocket), the holder notes the last
// message per scene (Cursors) and the next holder backfills from the platform's history API.
//
// Adapters whose platform can edit messages share one streaming previewer (RunPreviewer, with
// typing for platforms that have it) and one part sender (SendPart).
//
// Where the connection lives in ingest but egress must send through it (OneBot over a
// WebSocket), the holder also answers API calls relayed over core NATS on RPCSubject.
package im
