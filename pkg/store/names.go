package store

import "github.com/agentbus/agentbus/pkg/events"

// Stream and bucket names: the wire contract's (DESIGN.md §3), provisioned by natsutil.Provision.
const (
	bucketSessions    = events.BucketSessions
	bucketLeases      = events.BucketLeases
	streamAgentCtx    = events.StreamAgentCtx
	streamAgentEvents = events.StreamAgentEvents
	streamIMIn        = events.StreamIMIn
	streamIMSent      = events.StreamIMSent
)
