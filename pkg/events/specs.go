package events

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Stream names (DESIGN.md §3).
const (
	StreamIMIn        = "IM_IN"
	StreamSessionIn   = "SESSION_IN"
	StreamAgentEvents = "AGENT_EVENTS"
	StreamAgentCtx    = "AGENT_CTX"
	StreamToolCalls   = "TOOL_CALLS"
	StreamToolResults = "TOOL_RESULTS"
	StreamIMOut       = "IM_OUT"
	StreamIMSent      = "IM_SENT"
	StreamTasks       = "TASKS"
	StreamDeadLetters = "DEAD_LETTERS"
)

// StreamSchedules is the name DESIGN.md §3 gives the schedule store. There is no separate
// stream by that name: nats-server fires a schedule only into a subject of the stream that holds
// it (Nats-Schedule-Target must be one of the stream's own subjects), so schedules live in
// SESSION_IN on schedule.<sk>.<id> and fire straight into agent.in.<sk>, durable and in order
// with the rest of the inbox. The constant names that choice: StreamSchedules == StreamSessionIn.
const StreamSchedules = StreamSessionIn

// KV bucket and object store names.
const (
	BucketSessions  = "sessions"
	BucketLeases    = "leases"
	BucketTools     = "tools"
	BucketProfiles  = "profiles"
	BucketApprovals = "approvals"
	BucketModels    = "models"
	BucketDelivered = "delivered"
	// BucketToolMarkers holds the started markers of non-idempotent tool calls (pkg/toolworker):
	// one key per call while it runs, purged once its result is stored (issue 41; they were
	// keys tool.<callId> of BucketDelivered, kept 7 days).
	BucketToolMarkers = "tool_markers"
	// BucketPresence holds one entry per running role process (pkg/presence): who it is, where
	// it runs, which build, its adapters' connection state. Entries expire unless refreshed.
	BucketPresence = "presence"
	// BucketWebhookSeen was the replay guard of the webhook adapter (ids of accepted requests).
	// Nothing writes it any more: IM_IN's and SESSION_IN's dedupe window (Spec.InboundDuplicates,
	// at least twice the webhook's signature tolerance) refuses a replay instead. Provision no
	// longer creates it; a bucket left from an older version is harmless and may be deleted.
	BucketWebhookSeen = "webhook_seen"
	ObjectMedia       = "media"
	// ObjectEpochs is the archive of ended session epochs (pkg/store EpochArchive): one object
	// per epoch, "<sk token>.<epoch>", holding the epoch's inbox events, context log and turn
	// events, written when the epoch ends; SESSION_IN and AGENT_CTX are trimmed once it is.
	ObjectEpochs = "epochs"
)

// Spec parameterizes every stream and bucket: replication, storage and retention. The zero
// value of a duration means its default (see DefaultSpec); Provision applies defaults itself.
type Spec struct {
	// Replicas: 1 (embedded, single server) or 3 (cluster).
	Replicas int
	// Storage: jetstream.FileStorage (default) or jetstream.MemoryStorage. A stream's storage
	// cannot change after creation; Provision reports that as an error.
	Storage jetstream.StorageType

	IMInMaxAge        time.Duration // IM_IN (default 30 days): since issue 40 the messages that reach no session
	SessionInMaxAge   time.Duration // SESSION_IN; keep forever when 0 — also bounds how far ahead a schedule may fire
	EventsMaxAge      time.Duration // AGENT_EVENTS (default 30 days)
	ToolCallsMaxAge   time.Duration // TOOL_CALLS unclaimed requests (default 24 hours)
	ToolResultsMaxAge time.Duration // TOOL_RESULTS (default 7 days)
	OutMaxAge         time.Duration // IM_OUT (default 7 days); IM_SENT keeps receipts OutMaxAge + SentMargin
	DeadLetterMaxAge  time.Duration // DEAD_LETTERS (default 30 days)
	Duplicates        time.Duration // dedupe window of every stream but IM_IN and SESSION_IN (default 2 minutes)
	// InboundDuplicates is the dedupe window of IM_IN and SESSION_IN (default 11 minutes). It is
	// the webhook's replay guard: a signed request is valid while its timestamp is within the
	// tolerance either way, so for 2 × tolerance, and a replay inside the window is dropped as a
	// duplicate (IM_IN by the platform message id, SESSION_IN by the inbox event's stable id).
	// It must be at least 2 × im.webhook.toleranceSeconds (config validation and the ingest
	// role's start check it). The server keeps the ids of the window in memory.
	InboundDuplicates time.Duration

	// SessionInMaxPerSubject bounds SESSION_IN per subject: the last so many events of each
	// session's inbox are kept (default 100,000; older ones go first). It must stay far above
	// any session's backlog of unhandled events: events past the cursor are needed.
	SessionInMaxPerSubject int64
	// CtxMaxPerSubject bounds AGENT_CTX per subject (one session epoch's context log): its
	// last so many records are kept (default 100,000). Trimming keeps the last record, so
	// fenced commits are unaffected; a session that long is compacted well before.
	CtxMaxPerSubject int64
	// TasksMaxAge bounds TASKS, the background-work queue (default DefaultTasksTTL, 7 days,
	// as long as the task records are kept).
	TasksMaxAge time.Duration

	SessionsHistory uint8         // KV sessions history (default 5)
	ToolsTTL        time.Duration // KV tools entry lifetime; workers refresh well before (default 2 minutes)
	ModelsTTL       time.Duration // KV models discovery cache (default 1 hour)
	DeliveredTTL    time.Duration // KV delivered egress idempotency (default 7 days)
	MarkerTTL       time.Duration // how long KV keeps the marker of a TTL-expired key (default 1 minute)
	MediaMaxAge     time.Duration // object store media (default 30 days)
	// EpochsMaxAge bounds the object store epochs, the archive of ended epochs that replay reads
	// once SESSION_IN and AGENT_CTX are trimmed (default 90 days).
	EpochsMaxAge time.Duration
	PresenceTTL  time.Duration // KV presence entry lifetime; processes refresh every third of it (default 30 seconds)

	// Placement, when set, places every stream, bucket and object store on a cluster and on
	// servers with the given tags (nats.region; docs/regions.md). natsutil.Provision sends it
	// with every create and update; a placement change alone does not make it update an
	// existing stream (move one with the nats CLI).
	Placement *jetstream.Placement
}

// Defaults.
const (
	DefaultIMInMaxAge        = 30 * 24 * time.Hour
	DefaultEventsMaxAge      = 30 * 24 * time.Hour
	DefaultToolCallsMaxAge   = 24 * time.Hour
	DefaultToolResultsMaxAge = 7 * 24 * time.Hour
	DefaultOutMaxAge         = 7 * 24 * time.Hour
	DefaultDeadLetterMaxAge  = 30 * 24 * time.Hour
	DefaultDuplicates        = 2 * time.Minute
	// DefaultInboundDuplicates covers the default webhook tolerance (300 s) both ways plus a
	// minute of clock skew between ingest replicas.
	DefaultInboundDuplicates = 11 * time.Minute
	DefaultSessionsHistory   = 5
	DefaultToolsTTL          = 2 * time.Minute
	DefaultModelsTTL         = time.Hour
	DefaultDeliveredTTL      = 7 * 24 * time.Hour
	DefaultMarkerTTL         = time.Minute
	DefaultMediaMaxAge       = 30 * 24 * time.Hour
	DefaultEpochsMaxAge      = 90 * 24 * time.Hour
	DefaultPresenceTTL       = 30 * time.Second
	// DefaultSessionInMaxPerSubject and DefaultCtxMaxPerSubject: see Spec.
	DefaultSessionInMaxPerSubject = 100_000
	DefaultCtxMaxPerSubject       = 100_000
)

// DefaultSpec is the single-server default: 1 replica, file storage, default ages.
func DefaultSpec() Spec { return Spec{}.WithDefaults() }

// WithDefaults returns s with every zero field set to its default.
func (s Spec) WithDefaults() Spec {
	if s.Replicas <= 0 {
		s.Replicas = 1
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&s.IMInMaxAge, DefaultIMInMaxAge)
	def(&s.EventsMaxAge, DefaultEventsMaxAge)
	def(&s.ToolCallsMaxAge, DefaultToolCallsMaxAge)
	def(&s.ToolResultsMaxAge, DefaultToolResultsMaxAge)
	def(&s.OutMaxAge, DefaultOutMaxAge)
	def(&s.DeadLetterMaxAge, DefaultDeadLetterMaxAge)
	def(&s.Duplicates, DefaultDuplicates)
	def(&s.InboundDuplicates, DefaultInboundDuplicates)
	def(&s.ToolsTTL, DefaultToolsTTL)
	def(&s.ModelsTTL, DefaultModelsTTL)
	def(&s.DeliveredTTL, DefaultDeliveredTTL)
	def(&s.MarkerTTL, DefaultMarkerTTL)
	def(&s.MediaMaxAge, DefaultMediaMaxAge)
	def(&s.EpochsMaxAge, DefaultEpochsMaxAge)
	def(&s.PresenceTTL, DefaultPresenceTTL)
	if s.SessionInMaxAge < 0 {
		s.SessionInMaxAge = 0
	}
	if s.SessionInMaxPerSubject <= 0 {
		s.SessionInMaxPerSubject = DefaultSessionInMaxPerSubject
	}
	if s.CtxMaxPerSubject <= 0 {
		s.CtxMaxPerSubject = DefaultCtxMaxPerSubject
	}
	def(&s.TasksMaxAge, DefaultTasksTTL)
	if s.SessionsHistory == 0 {
		s.SessionsHistory = DefaultSessionsHistory
	}
	return s
}

// dup returns the dedupe window clamped to the stream's max age (the server rejects a window
// larger than MaxAge).
func dup(window, maxAge time.Duration) time.Duration {
	if maxAge > 0 && window > maxAge {
		return maxAge
	}
	return window
}

func (s Spec) stream(name, desc string, subjects []string, maxAge time.Duration) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:              name,
		Description:       desc,
		Subjects:          subjects,
		Retention:         jetstream.LimitsPolicy,
		MaxConsumers:      -1,
		MaxMsgs:           -1,
		MaxBytes:          -1,
		MaxAge:            maxAge,
		MaxMsgsPerSubject: -1,
		MaxMsgSize:        -1,
		Discard:           jetstream.DiscardOld,
		Storage:           s.Storage,
		Replicas:          s.Replicas,
		Duplicates:        dup(s.Duplicates, maxAge),
		AllowDirect:       true,
		// Nothing agentbus runs deletes or purges messages of a stream unless the stream's
		// spec says so below: a role that may publish on a stream cannot take its history
		// with it (the server also refuses to turn these two off again).
		DenyDelete: true,
		DenyPurge:  true,
	}
}

// IMInStream is IM_IN: the normalized inbound messages that reach no session (ignored, a refused
// command, /cancel), deduplicated on the platform message id. Since issue 40 a message that
// reaches its session is stored only inside its inbox events on SESSION_IN (one append per
// turn less); InboundMessage finds a message in either stream, and every reader of "all
// inbound messages" (the transcript archiver) reads both.
func (s Spec) IMInStream() jetstream.StreamConfig {
	s = s.WithDefaults()
	c := s.stream(StreamIMIn, "agentbus: normalized inbound IM messages", []string{all(PrefixIMIn)}, s.IMInMaxAge)
	c.Duplicates = dup(s.InboundDuplicates, s.IMInMaxAge)
	return c
}

// SessionInStream is SESSION_IN: the per-session inboxes agent.in.<sk> (since issue 40 the one
// record of every inbound message that reaches a session, inside its inbox event; deduplicated
// on the platform message id like IM_IN), plus the schedule
// holders schedule.<sk>.<id> (AllowMsgSchedules; a schedule's Nats-Schedule-Target is
// agent.in.<sk> of the same stream). Message TTLs are allowed for Nats-Schedule-TTL, rollups
// because schedules require them.
func (s Spec) SessionInStream() jetstream.StreamConfig {
	s = s.WithDefaults()
	c := s.stream(StreamSessionIn, "agentbus: per-session inbox and schedules",
		[]string{all(PrefixAgentIn), all(PrefixSchedule)}, s.SessionInMaxAge)
	c.Duplicates = dup(s.InboundDuplicates, s.SessionInMaxAge)
	// Without a max age the inbox is bounded per session (issue 41): the last
	// SessionInMaxPerSubject events of each agent.in.<sk> (a schedule holder has one).
	c.MaxMsgsPerSubject = s.SessionInMaxPerSubject
	c.AllowMsgSchedules = true
	c.AllowMsgTTL = true
	// Message schedules need roll-ups (the server turns them on for a schedule stream), and a
	// roll-up needs the purge permission. Any publisher on the stream could therefore ask for
	// Nats-Rollup: all, so only the roles that own the inbox publish here: ingest (agent.in)
	// and the turn worker (agent.in, schedule.>); the tool worker may not (BusRoles).
	c.AllowRollup = true
	c.DenyPurge = false
	return c
}

// AgentEventsStream is AGENT_EVENTS: the turn event log (resume, replay, audit).
func (s Spec) AgentEventsStream() jetstream.StreamConfig {
	s = s.WithDefaults()
	return s.stream(StreamAgentEvents, "agentbus: persisted turn events", []string{all(PrefixAgentEvt)}, s.EventsMaxAge)
}

// AgentCtxStream is AGENT_CTX: the committed context log, kept until sessions are purged.
// Commits fence with Nats-Expected-Last-Subject-Sequence on agent.ctx.<sk>.<epoch>, and a
// turn's messages may be published as one atomic batch (AllowAtomicPublish, nats-server 2.12+;
// orbit.go jetstreamext).
func (s Spec) AgentCtxStream() jetstream.StreamConfig {
	s = s.WithDefaults()
	c := s.stream(StreamAgentCtx, "agentbus: committed context log", []string{all(PrefixAgentCtx)}, 0)
	c.AllowAtomicPublish = true
	// Bounded per session epoch (issue 41): the oldest records of a log longer than
	// CtxMaxPerSubject go; the last one stays, so the commit fence holds.
	c.MaxMsgsPerSubject = s.CtxMaxPerSubject
	// The turn worker purges an ended epoch's subject once the epoch is archived (object store
	// epochs, store.EpochArchive); it is the only publisher here.
	c.DenyPurge = false
	return c
}

// ToolCallsStream is TOOL_CALLS: a work queue of tool call requests (one consumer per tool
// filter; each request is removed once a worker acks it).
func (s Spec) ToolCallsStream() jetstream.StreamConfig {
	s = s.WithDefaults()
	c := s.stream(StreamToolCalls, "agentbus: tool call requests", []string{all(PrefixToolCall)}, s.ToolCallsMaxAge)
	c.Retention = jetstream.WorkQueuePolicy
	c.DenyDelete = false // the turn worker withdraws a request no tool worker serves (a message delete)
	return c
}

// ToolResultsStream is TOOL_RESULTS: results on their session's subject tool.result.<sk> (the
// call id in HeaderCallID; tool.result.<sk>.<callId> before issue 41)
// (direct get of the last message on the subject answers "has this call run?").
func (s Spec) ToolResultsStream() jetstream.StreamConfig {
	s = s.WithDefaults()
	return s.stream(StreamToolResults, "agentbus: tool results", []string{all(PrefixToolResult)}, s.ToolResultsMaxAge)
}

// IMOutStream is IM_OUT: outbound reply parts, deduplicated on the out id.
func (s Spec) IMOutStream() jetstream.StreamConfig {
	s = s.WithDefaults()
	return s.stream(StreamIMOut, "agentbus: outbound replies", []string{all(PrefixIMOut)}, s.OutMaxAge)
}

// SentMargin is how much longer IM_SENT keeps a receipt than IM_OUT keeps the part it records.
const SentMargin = 24 * time.Hour

// IMSentStream is IM_SENT: delivery receipts. A receipt is egress's proof that its part was
// sent, needed for as long as IM_OUT may deliver the part again (a recreated consumer delivers
// every stored part): so IM_SENT keeps receipts OutMaxAge + SentMargin (8 days by default), no
// more (issue 41: each receipt is a subject of its own; it used to be kept 30 days, with IM_IN,
// which also let receipts vanish before their parts when imInMaxAgeMs was under 7 days). The
// transcript archiver must read IM_SENT within that time.
func (s Spec) IMSentStream() jetstream.StreamConfig {
	s = s.WithDefaults()
	return s.stream(StreamIMSent, "agentbus: delivery receipts", []string{all(PrefixIMSent)}, s.OutMaxAge+SentMargin)
}

// TasksStream is TASKS: a work queue of durable background work.
func (s Spec) TasksStream() jetstream.StreamConfig {
	s = s.WithDefaults()
	c := s.stream(StreamTasks, "agentbus: background tasks", []string{all(PrefixTask)}, s.TasksMaxAge)
	c.Retention = jetstream.WorkQueuePolicy
	return c
}

// DeadLettersStream is DEAD_LETTERS: dlq.<role>.<reason>. Operators work this stream down
// (`agentbus dlq retry|discard|purge`, the console's buttons: pkg/dlq), which deletes and
// purges messages, so it allows both; no role user may call the delete or purge API on it and
// roll-ups stay off, so a role that publishes dead letters still cannot erase them.
func (s Spec) DeadLettersStream() jetstream.StreamConfig {
	s = s.WithDefaults()
	c := s.stream(StreamDeadLetters, "agentbus: dead letters with the reason", []string{all(PrefixDeadLetter)}, s.DeadLetterMaxAge)
	c.DenyDelete = false
	c.DenyPurge = false
	return c
}

// Streams returns every stream config, in provisioning order.
func (s Spec) Streams() []jetstream.StreamConfig {
	return []jetstream.StreamConfig{
		s.IMInStream(), s.SessionInStream(), s.AgentEventsStream(), s.AgentCtxStream(),
		s.ToolCallsStream(), s.ToolResultsStream(), s.IMOutStream(), s.IMSentStream(),
		s.TasksStream(), s.DeadLettersStream(),
	}
}

func (s Spec) kv(bucket, desc string) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      bucket,
		Description: desc,
		History:     1,
		Storage:     s.Storage,
		Replicas:    s.Replicas,
	}
}

// SessionsKV is KV sessions: key SessionKey.Token(), value the session record; every update is
// a revision CAS; a few revisions of history help debugging.
func (s Spec) SessionsKV() jetstream.KeyValueConfig {
	s = s.WithDefaults()
	c := s.kv(BucketSessions, "agentbus: session records")
	c.History = s.SessionsHistory
	return c
}

// LeasesKV is KV leases: key SessionKey.Token(), one owner per session. No bucket TTL: each
// lease carries its own per-message TTL (LimitMarkerTTL turns on AllowMsgTTL for the bucket's
// stream), renewed by publishing to the key's subject with expected-last-subject-sequence and
// Nats-TTL, which keeps the TTL (a plain KV Update would drop it).
func (s Spec) LeasesKV() jetstream.KeyValueConfig {
	s = s.WithDefaults()
	c := s.kv(BucketLeases, "agentbus: session leases")
	c.LimitMarkerTTL = s.MarkerTTL
	return c
}

// ToolsKV is KV tools: the tool registry; entries expire unless workers refresh them.
func (s Spec) ToolsKV() jetstream.KeyValueConfig {
	s = s.WithDefaults()
	c := s.kv(BucketTools, "agentbus: tool registry")
	c.TTL = s.ToolsTTL
	c.LimitMarkerTTL = s.MarkerTTL
	return c
}

// ProfilesKV is KV profiles: user profiles.
func (s Spec) ProfilesKV() jetstream.KeyValueConfig {
	s = s.WithDefaults()
	return s.kv(BucketProfiles, "agentbus: user profiles")
}

// ApprovalsKV is KV approvals: owner approvals (<endpoint>) and pending bash confirmations
// (<endpoint>.pending).
func (s Spec) ApprovalsKV() jetstream.KeyValueConfig {
	s = s.WithDefaults()
	// No marker TTL: nothing here expires by TTL, and a bucket with delete markers must allow
	// roll-ups (KVRollup), which the tool worker, that writes its pending confirmations here,
	// could use to empty every approval.
	return s.kv(BucketApprovals, "agentbus: owner approvals")
}

// ModelsKV is KV models: the model discovery cache.
func (s Spec) ModelsKV() jetstream.KeyValueConfig {
	s = s.WithDefaults()
	c := s.kv(BucketModels, "agentbus: model discovery cache")
	c.TTL = s.ModelsTTL
	return c
}

// DeliveredKV is KV delivered: egress idempotency, key = EncodeToken(out id).
func (s Spec) DeliveredKV() jetstream.KeyValueConfig {
	s = s.WithDefaults()
	c := s.kv(BucketDelivered, "agentbus: delivered outbound parts")
	c.TTL = s.DeliveredTTL
	return c
}

// ToolMarkersKV is KV tool_markers: the started marker of each non-idempotent tool call that
// is running or ended without a result (key EncodeToken(call id), pkg/toolworker). A tool
// worker purges the marker once the call's result is stored, with a message TTL on the purge
// marker (so it allows roll-ups: KVRollup, which only the tool workers, its one writer, could
// use), so the bucket holds keys for calls in flight, not for calls made. A marker whose call
// never got a result goes with the bucket TTL, as long as TOOL_RESULTS keeps results (a
// later request of the same call id is answered "interrupted" by it meanwhile).
func (s Spec) ToolMarkersKV() jetstream.KeyValueConfig {
	s = s.WithDefaults()
	c := s.kv(BucketToolMarkers, "agentbus: started markers of non-idempotent tool calls")
	c.TTL = s.ToolResultsMaxAge
	c.LimitMarkerTTL = s.MarkerTTL
	return c
}

// TasksKV is KV tasks: background task records (TaskRecord, key TaskKey), kept
// DefaultTasksTTL so /tasks can show recent tasks; History 1, every update a revision CAS.
func (s Spec) TasksKV() jetstream.KeyValueConfig {
	s = s.WithDefaults()
	c := s.kv(BucketTasks, "agentbus: background task records")
	c.TTL = DefaultTasksTTL
	return c
}

// PresenceKV is KV presence: one entry per running role process (pkg/presence), refreshed every
// third of PresenceTTL; a process that died without deleting its entry vanishes PresenceTTL later.
func (s Spec) PresenceKV() jetstream.KeyValueConfig {
	s = s.WithDefaults()
	c := s.kv(BucketPresence, "agentbus: running role processes")
	c.TTL = s.PresenceTTL
	return c
}

// KVRollup reports whether the stream of KV bucket cfg must allow roll-ups. A KV purge
// (jetstream.KeyValue.Purge) is a subject roll-up, and a bucket with delete markers for
// TTL-expired keys (LimitMarkerTTL) must allow roll-ups; any publisher on the bucket may then
// also ask for Nats-Rollup: all and empty it. So only those buckets allow them: leases (its
// holders release with a purge that keeps a marker; turn worker, ingest and egress hold
// leases), tools (tool workers' registry, whose expired entries must be seen to vanish) and
// tool_markers (written by tool workers only, which purge a call's marker after its result).
// Every other bucket is created with roll-ups off, purges denied and deletes (of messages
// through the API; a KV Delete is a marker, not one) denied; see natsutil.Provision.
func KVRollup(cfg jetstream.KeyValueConfig) bool { return cfg.LimitMarkerTTL > 0 }

// KeyValues returns every KV bucket config.
func (s Spec) KeyValues() []jetstream.KeyValueConfig {
	return []jetstream.KeyValueConfig{
		s.SessionsKV(), s.LeasesKV(), s.ToolsKV(), s.ProfilesKV(), s.ApprovalsKV(), s.ModelsKV(), s.DeliveredKV(),
		s.TasksKV(), s.PresenceKV(), s.ToolMarkersKV(),
	}
}

// MediaObjectStore is object store media: images and files referenced by events.
func (s Spec) MediaObjectStore() jetstream.ObjectStoreConfig {
	s = s.WithDefaults()
	return jetstream.ObjectStoreConfig{
		Bucket:      ObjectMedia,
		Description: "agentbus: media referenced by events",
		TTL:         s.MediaMaxAge,
		Storage:     s.Storage,
		Replicas:    s.Replicas,
	}
}

// EpochsObjectStore is object store epochs: the archive of ended session epochs (one gzipped
// object per epoch, see store.EpochArchive), bounded by age (EpochsMaxAge). It holds the
// conversation, so only the turn worker (which writes it) and admin read it.
func (s Spec) EpochsObjectStore() jetstream.ObjectStoreConfig {
	s = s.WithDefaults()
	return jetstream.ObjectStoreConfig{
		Bucket:      ObjectEpochs,
		Description: "agentbus: archived session epochs (inbox, context log, turn events)",
		TTL:         s.EpochsMaxAge,
		Storage:     s.Storage,
		Replicas:    s.Replicas,
	}
}

// ObjectStores returns every object store config.
func (s Spec) ObjectStores() []jetstream.ObjectStoreConfig {
	return []jetstream.ObjectStoreConfig{s.MediaObjectStore(), s.EpochsObjectStore()}
}
