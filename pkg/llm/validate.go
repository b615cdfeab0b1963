package llm

import (
	"encoding/json"
	"fmt"
)

// ValidateToolCall finds the tool named by call and validates (and coerces) its arguments
// against the tool's JSON Schema. It returns the arguments to execute with.
func ValidateToolCall(tools []Tool, call Content) (map[string]any, error) {
	for i := range tools {
		if tools[i].Name == call.Name {
			return ValidateArguments(&tools[i], call.Arguments)
		}
	}
	return nil, fmt.Errorf("tool %q not found", call.Name)
}

// ValidateArguments validates args against tool.Parameters.
// TODO(issue 2): real JSON Schema validation with coercion; this placeholder only checks shape.
func ValidateArguments(tool *Tool, args map[string]any) (map[string]any, error) {
	if args == nil {
		args = map[string]any{}
	}
	if len(tool.Parameters) > 0 && !json.Valid(tool.Parameters) {
		return nil, fmt.Errorf("tool %s: parameters are not valid JSON", tool.Name)
	}
	return args, nil
}
