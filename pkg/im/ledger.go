package im

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil"
)

// Ledger remembers which platform messages of an outbound part were sent, so that a part
// that goes out as several platform messages (chunked, or text then image) is resumed after
// the messages already sent when it is retried, on any egress replica, instead of being sent
// again from the start. Entries live in KV "delivered" (whose TTL bounds them) under
// "chunk.<out id>.<i>"; egress's own entries there are out-id tokens without dots, so the
// keys cannot collide.
//
// The holder of a relayed connection records a chunk before answering the relay, so a
// reply lost between the holder and egress (the holder died right after sending) does not
// make the new holder send that chunk again. What remains is the one unavoidable window:
// the platform took the message but the process died before the record was written.
type Ledger struct {
	kv jetstream.KeyValue
}

// NewLedger binds KV delivered. A nil js gives a ledger that remembers nothing.
func NewLedger(ctx context.Context, js jetstream.JetStream) (*Ledger, error) {
	if js == nil {
		return &Ledger{}, nil
	}
	kv, err := natsutil.KeyValue(ctx, js, events.BucketDelivered)
	if err != nil {
		return nil, fmt.Errorf("im: open KV %s: %w", events.BucketDelivered, err)
	}
	return &Ledger{kv: kv}, nil
}

// ChunkKey is the ledger key of platform message i of out id outID.
func ChunkKey(outID string, i int) string {
	return "chunk." + events.EncodeToken(outID) + "." + strconv.Itoa(i)
}

// Sent returns the platform message id recorded under key, if any. A read failure counts as
// "not recorded" (the send goes ahead: at most a duplicate, never a lost message).
func (l *Ledger) Sent(ctx context.Context, key string) (string, bool) {
	if l == nil || l.kv == nil || key == "" {
		return "", false
	}
	e, err := l.kv.Get(ctx, key)
	if err != nil {
		return "", false
	}
	return string(e.Value()), true
}

// Record stores the platform message id under key.
func (l *Ledger) Record(ctx context.Context, key, platformID string) error {
	if l == nil || l.kv == nil || key == "" {
		return nil
	}
	if _, err := l.kv.Put(ctx, key, []byte(platformID)); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("im: record %s: %w", key, err)
	}
	return nil
}
