package natsutil

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
)

func TestSpecFromConfig(t *testing.T) {
	s := SpecFromConfig(config.NATS{Replicas: 3, Storage: "memory", IMInMaxAgeMs: 1000, EventsMaxAgeMs: 60000, ToolResultsMaxAge: 5000})
	if s.Replicas != 3 || s.Storage != jetstream.MemoryStorage {
		t.Errorf("replicas/storage: %+v", s)
	}
	if s.IMInMaxAge != time.Second || s.EventsMaxAge != time.Minute || s.ToolResultsMaxAge != 5*time.Second {
		t.Errorf("ages: %+v", s)
	}
	for _, c := range s.Streams() {
		if c.Replicas != 3 || c.Storage != jetstream.MemoryStorage {
			t.Errorf("%s: replicas %d storage %v", c.Name, c.Replicas, c.Storage)
		}
		if c.MaxAge > 0 && c.Duplicates > c.MaxAge {
			t.Errorf("%s: duplicate window %s exceeds max age %s", c.Name, c.Duplicates, c.MaxAge)
		}
	}
	if got := s.IMInStream(); got.MaxAge != time.Second || got.Duplicates != time.Second {
		t.Errorf("IM_IN max age %s duplicates %s", got.MaxAge, got.Duplicates)
	}
	for _, c := range s.KeyValues() {
		if c.Replicas != 3 || c.Storage != jetstream.MemoryStorage {
			t.Errorf("kv %s: replicas %d storage %v", c.Bucket, c.Replicas, c.Storage)
		}
	}

	d := SpecFromConfig(config.NATS{})
	if d != events.DefaultSpec() || d.Replicas != 1 || d.Storage != jetstream.FileStorage {
		t.Errorf("defaults: %+v", d)
	}
}
