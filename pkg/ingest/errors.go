package ingest

import "errors"

// ErrReplayWindow means the streams' dedupe window is shorter than the webhook's replay
// tolerance needs (CheckReplayWindow): the operator must lengthen nats.inboundDuplicatesMs (and
// IM_IN's max age) or shorten im.webhook.toleranceSeconds before the webhook may serve.
var ErrReplayWindow = errors.New("ingest: dedupe window shorter than the webhook's replay tolerance")
