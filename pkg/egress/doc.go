// Package egress is the role that delivers replies: it consumes IM_OUT, sends each part to its
// IM platform at most once, records receipts on IM_SENT, dead-letters what cannot be sent,
// runs the transcript archiver and answers transcript searches (the chat_history tool).
//
// # Pipeline
//
// A watermill router reads IM_OUT through a durable pull consumer ("egress", shared by every
// replica; egress creates or updates the consumer but never creates or alters a stream).
// Parts are spread over Concurrency lanes by scene, one part per lane at a time, so a scene's
// parts go out in the order they were published while scenes are sent in parallel. Middleware,
// outermost first:
//
//   - correlation: Agentbus-Trace/Turn/Session (or W3C traceparent) into the logger and the
//     watermill correlation id; the whole delivery bounded by HandlerTimeout. The receipt
//     carries the outbound's correlation ids.
//   - dead letter: permanent failures (malformed event, platform 4xx other than 408/429,
//     unknown bot, no sender for the platform, a panic) and parts that failed transiently on
//     MaxDeliveries deliveries become an events.DeadLetter on dlq.egress.<reason>
//     (DEAD_LETTERS) and are acked; other failures are NAKed with a doubling delay. A dead
//     letter that cannot be published NAKs the part: nothing is dropped silently.
//   - in-progress: from its fetch (waiting in its lane included) to its verdict a part gets an
//     in-progress ack within AckWait/2 and then every AckWait/3 (one goroutine for all parts
//     in hand), so the short default AckWait (1 s) only decides how soon a crashed replica's
//     parts reach another one.
//   - retry (watermill middleware.Retry): MaxRetries in-process retries of transient failures
//     with exponential backoff; permanent failures are not retried.
//   - recoverer: a panic becomes an error (and a dead letter, reason "poison").
//
// The handler itself runs on one of Concurrency long-lived workers while the router's
// goroutine for the message waits for it (a fresh goroutine would grow its stack through
// net/http and JSON on every part); a panic there is a dead letter with reason "poison" too.
//
// The handler throttles per platform (a token bucket per platform, RateLimits; a 429 with
// Retry-After pauses the platform) right before the send, so skipped duplicates cost no token.
//
// # At most one send per out id
//
// The part's one delivery record is its events.Receipt on IM_SENT, on its chat's subject
// (events.IMSentSubject: im.sent.<platform>.<bot>.<scope>.<scene>; the out id in the
// Agentbus-Out-Id header, so subjects grow with chats, not parts). Before sending, the handler
// searches the chat's receipts stored since the part was (store.FindReceipt: batched direct
// gets, complete once they reached the leader's last receipt on the subject; then the batches
// of the part's receipt bucket, events.IMSentBatchSubject; it also reads the per-part subjects
// im.sent.<...>.<out> of the layout before issue 41); a hit is skipped and acked. A part an older version delivered may have no receipt but a KV delivered entry (key
// events.EncodeToken(outId), read only): it is skipped too, and its receipt written. After the
// platform's 2xx the handler hands the receipt (platform message id and time) to the group
// commit (receiptWriter, issue 40): written at once when no receipt write is in flight, else
// together with every receipt handed over meanwhile, one events.ReceiptBatch per receipt bucket
// with two or more of them (a bucket's lone part, and a part without a bucket, get a plain
// receipt on the chat's subject, Nats-Msg-Id "sent/<outId>", so a second record of the part
// within the duplicate window is dropped); only once its receipt is stored does it let the
// message be acked. Within one process, two copies of an out id are handled one after the other, never side by side. A
// started send is not cancelled by Stop, so its outcome is recorded. Every part stored before
// this process bound to its consumer is looked up, whatever its delivery count or Fresh flag: a
// recreated consumer, a new durable or a promoted standby copy of IM_OUT delivers every stored
// part "for the first time" again, and sends none of them twice. Skipped without a lookup are
// the parts this process sent (the last 16384), and a part published Fresh after the bind on
// its first delivery and attempt (nothing can have sent it; a consumer deleted under the
// process ends this exception).
//
// The one remaining window: a crash after the platform accepted the part but before the
// receipt was stored (with the group commit, up to two receipt writes: the one in flight, then
// the part's). The part is redelivered and sent again with the same id; the webhook
// body's "id" (and the Idempotency-Key header) is the out id, so a receiver can drop the repeat.
//
// # Platforms
//
// Senders are chosen by Outbound.Platform from Options.Senders: each platform's outbound half,
// an im.Sender (pkg/im is the platform contract; the composition root builds the senders from
// its registry of platforms, webhook and console included). Their errors are classified by
// pkg/im's classes: im.ErrUnknownBot is dead-lettered as "unknown_bot", im.ErrRejected or any
// permanent error as "rejected", the rest retried (pausing the platform for a Retry-After).
// A platform without a sender is dead-lettered with reason "no_sender".
//
// # Transcripts
//
// With a data dir, egress opens <dataDir>/transcripts.db, runs pkg/store/transcript's archiver
// into it (IM_IN inbound rows, IM_SENT outbound rows) and serves SearchSubject
// ("transcripts.search", a NATS micro service) from it; Search is the client. The archiver's
// consumers belong to the file (their node name is kept in <dataDir>/transcripts.node), so
// every replica with a data directory of its own keeps a complete archive.
package egress
