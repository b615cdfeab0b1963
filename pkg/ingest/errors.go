package ingest

import (
	"errors"
	"fmt"

	"github.com/agentbus/agentbus/pkg/events"
)

// ErrReplayWindow means the streams' dedupe window is shorter than the webhook's replay
// tolerance needs (CheckReplayWindow): the operator must lengthen nats.inboundDuplicatesMs (and
// IM_IN's max age) or shorten im.webhook.toleranceSeconds before the webhook may serve.
var ErrReplayWindow = errors.New("ingest: dedupe window shorter than the webhook's replay tolerance")

// ErrTooLarge means a message is larger than the bus carries (the NATS server's max_payload,
// which the connection learns on connect). It wraps events.ErrInvalid: a retry cannot help, so
// adapters dead-letter it and the webhook answers 413 naming the limit, never "retry later".
var ErrTooLarge = fmt.Errorf("%w: message too large for the bus", events.ErrInvalid)
