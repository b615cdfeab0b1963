package egress

import (
	"errors"

	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

// Sentinels. Match with errors.Is. The platforms' error classes (im.ErrRejected,
// im.ErrUnknownBot, permanent and retry-after errors) are pkg/im's, the platform contract;
// egress adds only what is its own.
var (
	// ErrNoSender: no Sender is registered for the outbound's platform. Dead-lettered with
	// reason "no_sender".
	ErrNoSender = errors.New("egress: no sender for platform")
	// ErrConfig is returned by Run for unusable Options; the message names the field. Fix the
	// options (or the im.egress block pkg/app maps onto them): retrying cannot help.
	ErrConfig = errors.New("egress: invalid options")
)

// Dead-letter reasons egress uses (the <reason> of dlq.egress.<reason>). The DeadLetter body
// carries the full error text, the original bytes and headers.
const (
	ReasonInvalid       = events.DLQInvalid       // not a valid im.out event (bad JSON, missing field)
	ReasonRejected      = "rejected"              // the platform answered with a permanent error
	ReasonUnknownBot    = "unknown_bot"           // no configuration for the bot
	ReasonNoSender      = "no_sender"             // no Sender for the platform
	ReasonPoison        = events.DLQPoison        // the handler panicked on this message
	ReasonMaxDeliveries = events.DLQMaxDeliveries // transient failures on every one of MaxDeliveries deliveries
)

// permanentError marks an error the handler found before sending (bad event, no sender) as
// permanent, with its dead-letter reason.
type permanentError struct {
	reason string
	err    error
}

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

func permanent(reason string, err error) error { return &permanentError{reason: reason, err: err} }

// classify says whether err is permanent and, if so, the dead-letter reason.
func classify(err error) (reason string, isPermanent bool) {
	var pe *permanentError
	var panicErr middleware.RecoveredPanicError
	switch {
	case err == nil:
		return "", false
	case errors.As(err, &pe):
		return pe.reason, true
	case errors.As(err, &panicErr):
		return ReasonPoison, true
	case errors.Is(err, events.ErrInvalid):
		return ReasonInvalid, true
	case errors.Is(err, ErrNoSender):
		return ReasonNoSender, true
	case errors.Is(err, im.ErrUnknownBot):
		// Before rejected: an adapter marks its unknown bot permanent as well.
		return ReasonUnknownBot, true
	case errors.Is(err, im.ErrRejected), im.IsPermanent(err):
		return ReasonRejected, true
	}
	return "", false
}
