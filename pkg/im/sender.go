package im

import (
	"context"
	"errors"
	"time"

	"github.com/agentbus/agentbus/pkg/events"
)

// Sender delivers one outbound part to an IM platform: the outbound half of every platform,
// run by the egress role, which picks the Sender by Outbound.Platform.
//
// Contract: Send returns the platform's id of the sent message once the platform has accepted
// it (a non-empty string; use out.OutID when the platform has none). The error says what egress
// does next, through the classes of this package (errors.go):
//   - an error matching ErrUnknownBot (the outbound names a bot that is not configured, or is
//     configured unusably) is dead-lettered with reason "unknown_bot";
//   - one matching ErrRejected, or whose Permanent() reports true (Error, Permanent), is
//     dead-lettered with reason "rejected";
//   - any other error is transient and retried with backoff; one that also has
//     RetryAfterDelay() time.Duration (Error) pauses the platform for that long first.
//
// Send must honour ctx and be safe for concurrent use.
type Sender interface {
	Send(ctx context.Context, out events.Outbound) (platformMsgID string, err error)
}

// SenderFunc adapts a function to Sender.
type SenderFunc func(ctx context.Context, out events.Outbound) (string, error)

// Send calls f.
func (f SenderFunc) Send(ctx context.Context, out events.Outbound) (string, error) {
	return f(ctx, out)
}

// EventSender is an optional capability of a Sender: one that wants the whole im.out event
// (its correlation ids and headers, the console forwards it as it is) rather than the payload.
// Egress calls SendEvent instead of Send when a Sender has it; the contract is Send's.
type EventSender interface {
	SendEvent(ctx context.Context, ev *events.Event[events.Outbound]) (platformMsgID string, err error)
}

// RetryAfterOf returns the pause an error asks for (its RetryAfterDelay), 0 when none.
func RetryAfterOf(err error) time.Duration {
	var ra interface{ RetryAfterDelay() time.Duration }
	if errors.As(err, &ra) {
		return ra.RetryAfterDelay()
	}
	return 0
}

type attemptKey struct{}

// WithAttempt tells a Sender which attempt of one delivery this Send is (1 = the first): egress
// sets it, so a sender can trace a retry apart from the delivery's first try.
func WithAttempt(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, attemptKey{}, n)
}

// Attempt returns the attempt WithAttempt set (0 when ctx carries none).
func Attempt(ctx context.Context) int {
	n, _ := ctx.Value(attemptKey{}).(int)
	return n
}
