package toolworker

import (
	"errors"
	"fmt"

	"github.com/agentbus/agentbus/pkg/hooks"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/tools"
)

// The tool worker runs tool.before and tool.after (pkg/hooks): both sit between the checks of
// a call and the recording of its one result, so a call's hooks run once per execution and a
// redelivered call that already has a result does not call them again. Their ids are the
// session key and the call id.

func (h *Handle) hookEvent(c *call) *hooks.Event {
	tc := c.ev.Data
	return &hooks.Event{
		Session: c.ev.Meta.Session, Turn: tc.Turn,
		Sender: &hooks.Sender{ID: tc.Caller.SenderID, Roles: tc.Caller.Roles},
	}
}

// toolBefore runs tool.before: it returns the arguments to run with (validated again when a
// hook changed them), or an error whose text is the error result of a blocked call.
func (h *Handle) toolBefore(c *call, t tools.Tool, args map[string]any) (map[string]any, error) {
	if !h.opts.Hooks.Has(hooks.ToolBefore) {
		return args, nil
	}
	tc := c.ev.Data
	ev := h.hookEvent(c)
	ev.ID = hooks.ID(hooks.ToolBefore, tc.SessionKey.String(), tc.CallID)
	next, out := h.opts.Hooks.ToolBefore(h.killCtx, ev, tc.Tool, tc.CallID, args)
	if out.Blocked {
		if out.Result != "" {
			return nil, errors.New(out.Result)
		}
		return nil, fmt.Errorf("tool %s was blocked by hook %s", tc.Tool, out.By)
	}
	if !out.Modified {
		return args, nil
	}
	checked, err := t.CheckArgs(next)
	if err != nil {
		return nil, fmt.Errorf("hook changed the arguments of %s: %w", tc.Tool, err)
	}
	return checked, nil
}

// toolAfter runs tool.after on res and returns the result to record.
func (h *Handle) toolAfter(c *call, args map[string]any, res tools.Result) tools.Result {
	if !h.opts.Hooks.Has(hooks.ToolAfter) {
		return res
	}
	tc := c.ev.Data
	ev := h.hookEvent(c)
	ev.ID = hooks.ID(hooks.ToolAfter, tc.SessionKey.String(), tc.CallID)
	text, changed, out := h.opts.Hooks.ToolAfter(h.killCtx, ev, tc.Tool, tc.CallID, args, res.Text(), res.IsError)
	if out.Blocked {
		return tools.ErrorResult("the result of tool %s was withheld: hook %s failed", tc.Tool, out.By)
	}
	if changed {
		// The text replaces the text blocks; images and other blocks stay.
		content := []llm.Content{llm.Text(text)}
		for _, b := range res.Content {
			if b.Type != llm.ContentText {
				content = append(content, b)
			}
		}
		res.Content = content
	}
	return res
}
