package store

// Stream and bucket names (DESIGN.md §3).
// TODO(events): switch to the pkg/events constants once they exist; these must stay equal.
const (
	bucketSessions    = "sessions"
	bucketLeases      = "leases"
	streamAgentCtx    = "AGENT_CTX"
	streamAgentEvents = "AGENT_EVENTS"
	streamIMIn        = "IM_IN"
	streamIMSent      = "IM_SENT"
)
