package loop

import (
	"context"
)

// ToolCallRequest is one validated tool call handed to a ToolExecutor.
type ToolCallRequest struct {
	// ID is the call id the model assigned; the result is matched to the call by it.
	ID string
	// Name is the tool name.
	Name string
	// Args are the arguments after schema validation and coercion.
	Args map[string]any
	// Tool is the tool definition from AgentContext.Tools (never nil).
	Tool *AgentTool
	// OnUpdate (never nil) reports a partial result as a tool_execution_update event. It may be
	// called from any goroutine until Execute returns; calls after that are dropped.
	OnUpdate func(partial ToolResult)
}

// ToolExecutor runs tool calls. The loop has already found the tool, validated the arguments
// and run BeforeToolCall; the executor only runs the call and returns its result. It is an
// interface so that the same loop can run tools in process (tests, `agentbus up`) or send them
// to tool workers over the bus (production).
//
// Contract:
//   - Execute must honour ctx: when it is done (Abort), return promptly; the loop reports
//     the call as it returns.
//   - A returned error becomes an isError toolResult whose text is err.Error(); so does a
//     result with IsError set. A panic is recovered by the loop and reported the same way.
//   - Execute may be called concurrently for the calls of one assistant message (parallel mode).
type ToolExecutor interface {
	Execute(ctx context.Context, call ToolCallRequest) (ToolResult, error)
}

// ToolExecutorFunc adapts a function to ToolExecutor.
type ToolExecutorFunc func(ctx context.Context, call ToolCallRequest) (ToolResult, error)

// Execute calls f.
func (f ToolExecutorFunc) Execute(ctx context.Context, call ToolCallRequest) (ToolResult, error) {
	return f(ctx, call)
}

// InProcess is the default ToolExecutor: it calls AgentTool.Execute.
var InProcess ToolExecutor = inProcess{}

type inProcess struct{}

func (inProcess) Execute(ctx context.Context, call ToolCallRequest) (ToolResult, error) {
	if call.Tool.Execute == nil {
		return ToolResult{}, &ToolError{Tool: call.Name, Err: ErrNoExecute}
	}
	return call.Tool.Execute(ctx, call.ID, call.Args, call.OnUpdate)
}
