// Package store holds agentbus's durable state on NATS JetStream (DESIGN.md §3–§5, seed ADR
// D4): the tables of the seed's memory design mapped onto streams and buckets, with the
// concurrency rules that make one writer per session safe.
//
//	Sessions    KV sessions, key <sk>            agent_sessions: active epoch, status, model,
//	                                              inbox cursor, open turns, active leaf; every
//	                                              write a revision CAS (Update retries)
//	Leases      KV leases, key worker.<id>       one liveness lease per worker process; per-message
//	                                              TTL kept on renewal (CAS publish with Nats-TTL);
//	                                              epoch = revision at acquisition
//	            KV leases, key <sk>              one claim per session {owner, epoch}, no TTL: in
//	                                              force while the owner's worker lease lives with
//	                                              that epoch; fencing token = revision (claims.go)
//	ContextLog  AGENT_CTX agent.ctx.<sk>.<epoch>  agent_messages + agent_summaries: one record
//	                                              per commit, fenced by expected last subject
//	                                              sequence; LoadContext = summary + bounded tail
//	TurnLog     AGENT_EVENTS agent.evt.<sk>.<kind>  turn events: resume, replay, audit
//	EpochArchive object store epochs, <sk>.<epoch>  an ended epoch's inbox, context log and turn
//	                                              events; written before the epoch is trimmed
//	                                              from SESSION_IN and AGENT_CTX, read by replay
//
// The im_transcripts archive is the bbolt file of subpackage transcript.
//
// Correctness never depends on a lease alone: a worker that lost its worker lease (expired
// while it was stalled), and with it its claims, still cannot commit, because its append expects a context sequence that the new
// owner has moved past (ErrFenced). The lease decides who should work; the fence decides whose
// work counts.
//
// Streams and buckets are provisioned by natsutil.Provision from the specs in pkg/events; this
// package only binds them. See docs/storage.md for retention, inspection and replay.
package store
