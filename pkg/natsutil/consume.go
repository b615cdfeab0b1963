package natsutil

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Failover pull settings of a long-lived Consume (FailoverConsume).
const (
	FailoverPullExpiry    = 5 * time.Second
	FailoverPullHeartbeat = time.Second
)

// FailoverConsume returns opts with the pull expiry and heartbeat every long-lived
// jetstream.Consumer.Consume of agentbus uses: FailoverPullExpiry and FailoverPullHeartbeat
// instead of the client's defaults (a 30 s expiry, heartbeats every 15 s).
//
// A pull request lives on the consumer's leader and is not replicated. When the NATS node that
// leads the consumer dies, its pull requests die with it and the client hears nothing: it sends
// a new one only once two heartbeats are missing. With the defaults that was 30 s in which a
// consumer delivered nothing (every reply of a cluster waited at egress for 30 s after a node
// kill); with a heartbeat every second a lost pull request is sent again after 2 s, to the
// leader the cluster elects meanwhile. A pull request sent right after a reconnect, while the
// consumer has no leader yet, is lost the same way and recovered the same way.
func FailoverConsume(opts ...jetstream.PullConsumeOpt) []jetstream.PullConsumeOpt {
	return append([]jetstream.PullConsumeOpt{jetstream.PullExpiry(FailoverPullExpiry), jetstream.PullHeartbeat(FailoverPullHeartbeat)}, opts...)
}
