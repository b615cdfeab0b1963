package llmbus

import "errors"

// Sentinel errors. Errors that reach a model call arrive inside the stream as an error event
// whose ErrorMessage starts with "llmbus: "; see the package doc for how each is classified.
var (
	// ErrInvalidOption: NewClient or Serve was given a value it cannot use; fix the call.
	ErrInvalidOption = errors.New("llmbus: invalid option")
	// ErrNoResponders: no service listens on the subject (after the client's attempts). The
	// text contains "no responders", which pkg/models' fallback treats as an unreachable
	// provider, like a refused HTTP connection.
	ErrNoResponders = errors.New("llmbus: no responders")
	// ErrIdle: the server sent nothing, not even a heartbeat, for the idle timeout.
	ErrIdle = errors.New("llmbus: timed out")
	// ErrProtocol: the server broke the wire contract (bad JSON, another version, a lost or
	// reordered event, an event for a block that is not open). Not retried: the same server
	// would do it again.
	ErrProtocol = errors.New("llmbus: protocol error")
	// ErrStopped: Stop was called; the server takes no more requests.
	ErrStopped = errors.New("llmbus: server stopped")
)
