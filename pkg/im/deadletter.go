package im

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
)

// Publisher is the part of jetstream.JetStream the dead-letter helper needs.
type Publisher interface {
	PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// maxDeadLetterBody caps the original bytes a dead letter keeps (an event refused as larger
// than the bus carries must still be recorded).
const maxDeadLetterBody = 64 << 10

// DeadLetter records an inbound platform event that could not be ingested (it does not parse,
// or the normalized message fails validation) on dlq.ingest.<reason>, with the original bytes,
// so that nothing is dropped silently. where names the source ("onebot/qq1 ws").
func DeadLetter(ctx context.Context, js Publisher, where, reason string, cause error, raw []byte) error {
	dl := events.DeadLetter{Role: "ingest", Reason: reason, Error: cause.Error(), Subject: where}
	if len(raw) > maxDeadLetterBody { // the record must fit on the bus itself
		dl.Error += fmt.Sprintf(" (body cut to its first %d of %d bytes)", maxDeadLetterBody, len(raw))
		raw = raw[:maxDeadLetterBody]
	}
	dl.SetBody(raw)
	msg, err := events.NewMsg(events.DeadLetterSubject("ingest", reason), events.New(dl))
	if err != nil {
		return fmt.Errorf("dead letter: %w", err)
	}
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("dead letter: %w", err)
	}
	return nil
}
