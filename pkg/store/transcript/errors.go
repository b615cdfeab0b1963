package transcript

import "errors"

var (
	// ErrInvalidRow is returned (wrapped, with the reason) for a row that cannot be stored.
	ErrInvalidRow = errors.New("transcript: invalid row")
	// ErrInvalidQuery is returned (wrapped, with the reason) for a malformed search.
	ErrInvalidQuery = errors.New("transcript: invalid query")
	// ErrClosed is returned by calls on a closed DB.
	ErrClosed = errors.New("transcript: database closed")
)
