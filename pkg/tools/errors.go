package tools

import "errors"

// Sentinel errors, matched with errors.Is.
var (
	// ErrInvalidTool is returned when a tool definition is unusable (no name, bad schema, ...).
	ErrInvalidTool = errors.New("invalid tool")
	// ErrDuplicate is returned by Registry.Add when a tool of that name is already registered.
	ErrDuplicate = errors.New("tool already registered")
	// ErrNotFound is returned when a tool name is unknown.
	ErrNotFound = errors.New("tool not found")
	// ErrBadArguments wraps argument decoding failures of typed tools.
	ErrBadArguments = errors.New("bad tool arguments")
)
