package store

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

// startJS starts an embedded JetStream server (file store in a temp dir) provisioned with every
// stream and bucket of the wire contract, and returns an in-process client.
func startJS(t testing.TB) jetstream.JetStream {
	t.Helper()
	return natstest.New(t).JS
}

func testKey(scene string) events.SessionKey {
	return events.SessionKey{Platform: "qq", Bot: "bot1", Scope: events.ScopeGroup, Scene: scene}
}
