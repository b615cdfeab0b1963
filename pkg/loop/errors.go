package loop

import "errors"

var (
	// ErrNoModel is returned when a run has no model.
	ErrNoModel = errors.New("loop: no model configured")
	// ErrNoMessages is returned by Continue when the context has no messages.
	ErrNoMessages = errors.New("loop: no messages to continue from")
	// ErrContinueFromAssistant is returned by Continue when the last message is an assistant
	// message (the model would be asked to answer itself). Agent.Continue first uses queued
	// steering or follow-up messages, if any.
	ErrContinueFromAssistant = errors.New("loop: cannot continue from message role assistant")
	// ErrMaxIterations is returned, with the run's messages, when Config.MaxIterations stopped a
	// run that the model wanted to continue.
	ErrMaxIterations = errors.New("loop: max iterations reached")
	// ErrAgentBusy is returned by Agent.Prompt and Agent.Continue while a run is in progress;
	// use Steer or FollowUp to queue messages, or WaitForIdle.
	ErrAgentBusy = errors.New("loop: agent is already running; use Steer or FollowUp, or WaitForIdle")
	// ErrNoExecute is the cause when the in-process executor meets a tool without Execute.
	ErrNoExecute = errors.New("tool has no in-process Execute function")
)

// ToolError wraps an executor-side failure of one tool.
type ToolError struct {
	Tool string
	Err  error
}

func (e *ToolError) Error() string { return "tool " + e.Tool + ": " + e.Err.Error() }
func (e *ToolError) Unwrap() error { return e.Err }
