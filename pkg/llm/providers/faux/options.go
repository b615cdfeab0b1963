package faux

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/agentbus/agentbus/pkg/llm"
)

// fileOptions is the shape of a faux provider's options block in configuration:
//
//	ai:
//	  providers:
//	    scripted:
//	      api: faux
//	      options:
//	        responder: demo        # demo | echo | none (default none: script only)
//	        latencyMs: 200         # before the first event
//	        deltaLatencyMs: 20     # before every further event
//	        deltaSize: 8           # runes per text/thinking delta
//	        toolDeltaSize: 16      # runes per tool-call argument delta
//	        responses:             # the script, used before the responder
//	          - text: "Hello!"
//	          - toolCalls: [{name: bash, arguments: {command: ls}}]
//	          - {text: "cut", stopReason: length}
//	          - {error: "prompt is too long: 300000 tokens > 200000 maximum"}
//
// Each response may also carry latencyMs / deltaLatencyMs.
type fileOptions struct {
	Responder      string         `json:"responder"`
	LatencyMs      int64          `json:"latencyMs"`
	DeltaLatencyMs int64          `json:"deltaLatencyMs"`
	DeltaSize      *int           `json:"deltaSize"`
	ToolDeltaSize  *int           `json:"toolDeltaSize"`
	Responses      []fileResponse `json:"responses"`
}

type fileResponse struct {
	Response
	LatencyMs      int64 `json:"latencyMs"`
	DeltaLatencyMs int64 `json:"deltaLatencyMs"`
}

// NewFromOptions builds a provider from a configuration options block (see fileOptions above
// for the keys). Unknown keys are an error, so a typo does not silently change a test.
func NewFromOptions(options map[string]any) (*Provider, error) {
	var fo fileOptions
	if len(options) > 0 {
		raw, err := json.Marshal(options)
		if err != nil {
			return nil, fmt.Errorf("faux options: %w", err)
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&fo); err != nil {
			return nil, fmt.Errorf("faux options: %w", err)
		}
	}
	opts := []Option{WithLatency(time.Duration(fo.LatencyMs)*time.Millisecond, time.Duration(fo.DeltaLatencyMs)*time.Millisecond)}
	switch fo.Responder {
	case "", "none":
	case "demo":
		opts = append(opts, WithResponder(Demo))
	case "echo":
		opts = append(opts, WithResponder(Echo))
	default:
		return nil, fmt.Errorf("faux options: responder %q: want demo, echo or none", fo.Responder)
	}
	if fo.DeltaSize != nil {
		opts = append(opts, WithDeltaSize(*fo.DeltaSize))
	}
	if fo.ToolDeltaSize != nil {
		opts = append(opts, WithToolDeltaSize(*fo.ToolDeltaSize))
	}
	for i, fr := range fo.Responses {
		r := fr.Response
		r.Latency = time.Duration(fr.LatencyMs) * time.Millisecond
		r.DeltaLatency = time.Duration(fr.DeltaLatencyMs) * time.Millisecond
		for j := range r.ToolCalls {
			tc := &r.ToolCalls[j]
			if tc.Type == "" {
				tc.Type = llm.ContentToolCall
			}
			if tc.Type != llm.ContentToolCall || tc.Name == "" {
				return nil, fmt.Errorf("faux options: responses[%d].toolCalls[%d]: want a toolCall with a name", i, j)
			}
		}
		opts = append(opts, WithResponses(r))
	}
	return New(opts...), nil
}

// Echo is the simplest Responder: it answers with the last user message's text.
func Echo(c *llm.Context) Response {
	if c != nil {
		for i := len(c.Messages) - 1; i >= 0; i-- {
			if c.Messages[i].Role == llm.RoleUser {
				return Response{Text: c.Messages[i].TextContent()}
			}
		}
	}
	return Response{Text: ""}
}
