package events

import (
	"errors"
	"fmt"
)

// Sentinels. Match with errors.Is.
var (
	// ErrInvalid is wrapped by every validation failure of an event, a subject, a session key
	// or a token. The error text says exactly what is wrong, e.g.
	// "im.message event: sender.id is required".
	ErrInvalid = errors.New("invalid event")
	// ErrUnsupportedVersion is wrapped (together with ErrInvalid) when an event's v is newer
	// than this build understands.
	ErrUnsupportedVersion = errors.New("unsupported event version")
	// ErrUnknownType is wrapped (together with ErrInvalid) when Decode meets a type it does not know.
	ErrUnknownType = errors.New("unknown event type")
)

// InvalidError describes one invalid event, subject, key or token. It matches ErrInvalid with
// errors.Is, and also Err when set (ErrUnsupportedVersion, ErrUnknownType, a json error, ...).
type InvalidError struct {
	// What names the thing: "im.message event", "subject", "session key", "token", ...
	What string
	// Reason says what is wrong, naming the field: "sender.id is required".
	Reason string
	// Err is an optional underlying cause.
	Err error
}

func (e *InvalidError) Error() string {
	if e.What == "" {
		return e.Reason
	}
	return e.What + ": " + e.Reason
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// Unwrap returns the underlying cause, if any.
func (e *InvalidError) Unwrap() error { return e.Err }

func invalid(what, format string, a ...any) error {
	return &InvalidError{What: what, Reason: fmt.Sprintf(format, a...)}
}

// fieldError is what payload validators return: a path relative to the payload and a reason.
// Marshal/Unmarshal turn it into an InvalidError naming the event type.
type fieldError struct {
	path   string
	reason string
}

func (e *fieldError) Error() string {
	if e.path == "" {
		return e.reason
	}
	return e.path + " " + e.reason
}

func required(path string) error { return &fieldError{path: path, reason: "is required"} }

func badField(path, format string, a ...any) error {
	return &fieldError{path: path, reason: fmt.Sprintf(format, a...)}
}

// within prefixes the path of a nested validation error ("sender.id" -> "message.sender.id").
func within(prefix string, err error) error {
	if err == nil {
		return nil
	}
	var fe *fieldError
	if errors.As(err, &fe) {
		p := prefix
		if fe.path != "" {
			p += "." + fe.path
		}
		return &fieldError{path: p, reason: fe.reason}
	}
	return fmt.Errorf("%s: %w", prefix, err)
}
