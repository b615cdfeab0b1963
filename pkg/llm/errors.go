package llm

import "errors"

// Sentinel errors of the package (ErrNoProvider is in stream.go). Match with errors.Is.
var (
	// ErrToolNotFound: a tool call names a tool the context does not offer.
	ErrToolNotFound = errors.New("tool not found")
	// ErrInvalidArguments: tool-call arguments do not satisfy the tool's schema (the error is a
	// *ValidationError with the paths and the received arguments).
	ErrInvalidArguments = errors.New("invalid tool arguments")
	// ErrUnknownProvider: a provider alias that is not configured.
	ErrUnknownProvider = errors.New("unknown provider")
	// ErrUnknownModel: a model id outside a provider's allowlist.
	ErrUnknownModel = errors.New("unknown model")
	// ErrInvalidOption: a constructor option was given a value it cannot use; fix the call.
	ErrInvalidOption = errors.New("invalid option")
)
