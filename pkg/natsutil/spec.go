package natsutil

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
)

// SpecFromConfig builds a Spec from the nats: config block (replicas, storage, ages, the inbound dedupe window); the rest
// keeps its defaults.
func SpecFromConfig(c config.NATS) events.Spec {
	s := events.Spec{
		Replicas:          c.Replicas,
		IMInMaxAge:        time.Duration(c.IMInMaxAgeMs) * time.Millisecond,
		EventsMaxAge:      time.Duration(c.EventsMaxAgeMs) * time.Millisecond,
		ToolResultsMaxAge: time.Duration(c.ToolResultsMaxAge) * time.Millisecond,
		EpochsMaxAge:      time.Duration(c.EpochsMaxAgeMs) * time.Millisecond,
		InboundDuplicates: time.Duration(c.InboundDuplicatesMs) * time.Millisecond,
	}
	if r := c.Region; r.Cluster != "" || len(r.Tags) > 0 {
		s.Placement = &jetstream.Placement{Cluster: r.Cluster, Tags: r.Tags}
	}
	if c.Storage == "memory" {
		s.Storage = jetstream.MemoryStorage
	}
	return s.WithDefaults()
}
