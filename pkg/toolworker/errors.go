package toolworker

import "errors"

// Sentinel errors, matched with errors.Is.
var (
	// ErrConfig is returned by Run for unusable Options.
	ErrConfig = errors.New("toolworker: invalid options")
	// ErrInvalidProfile wraps a rejected profile key or value.
	ErrInvalidProfile = errors.New("invalid profile entry")
	// ErrProfileFull is returned when a profile already holds MaxProfileEntries keys.
	ErrProfileFull = errors.New("profile is full")
	// ErrHistoryUnavailable wraps a failed transcript search (no archiver answering, bad reply).
	ErrHistoryUnavailable = errors.New("chat history unavailable")
)
