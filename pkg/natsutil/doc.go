// Package natsutil connects agentbus to NATS: an embedded nats-server with JetStream for the
// single-machine default and for tests (StartEmbedded), a client from the nats: config block
// with reconnect handling (Connect), idempotent provisioning of every stream, KV bucket and
// object store of the wire contract in pkg/events (Provision), reads that must see every
// acknowledged write (GetMsg, LeaderGetMsg), a JetStream context whose plain publishes read their
// acks without encoding/json (FastPublish; app and Connect hand it to the roles), and a raw
// JetStream async-publish baseline for benchmarks (BaselinePublish).
//
// Tests in other packages use the natstest subpackage: natstest.New(t) starts a provisioned
// embedded server in t.TempDir() and cleans it up.
package natsutil
