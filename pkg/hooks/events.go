package hooks

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentbus/agentbus/pkg/llm"
)

// ID is the id of an event: its name and the ids of the step it belongs to, joined by ":".
// Callers pass ids that are stable across a step's retries (session id, turn id, tool call
// id, out id), so a repeated step repeats the id.
func ID(event string, parts ...string) string {
	return event + ":" + strings.Join(parts, ":")
}

// Text runs a text event (message.received, message.sending): data["text"] is text, the
// other data fields are informative. It returns the text after the hooks (text itself when
// none changed it) and the outcome.
func (r *Runner) Text(ctx context.Context, ev *Event, text string) (string, Outcome) {
	if ev.Data == nil {
		ev.Data = map[string]any{}
	}
	ev.Data["text"] = text
	out := r.Run(ctx, ev)
	if !out.Modified {
		return text, out
	}
	s, ok := ev.Data["text"].(string)
	if !ok {
		r.log.Warn("hook modified text to a non-string; ignored", "event", ev.Event, "id", ev.ID)
		out.Modified = false
		return text, out
	}
	return s, out
}

// ToolBefore runs tool.before for a call with validated args. It returns the arguments to run
// the tool with (args when no hook changed them; the caller validates changed ones again).
func (r *Runner) ToolBefore(ctx context.Context, ev *Event, tool, callID string, args map[string]any) (map[string]any, Outcome) {
	ev.Event = ToolBefore
	ev.Data = map[string]any{"tool": tool, "callId": callID, "arguments": args}
	out := r.Run(ctx, ev)
	if !out.Modified {
		return args, out
	}
	m, ok := ev.Data["arguments"].(map[string]any)
	if !ok {
		out.Modified = false
		r.log.Warn("hook modified arguments to a non-object; ignored", "event", ev.Event, "id", ev.ID)
		return args, out
	}
	return m, out
}

// ToolAfter runs tool.after for a call's result text. It returns the result text (changed:
// some hook replaced it).
func (r *Runner) ToolAfter(ctx context.Context, ev *Event, tool, callID string, args map[string]any, result string, isError bool) (string, bool, Outcome) {
	ev.Event = ToolAfter
	ev.Data = map[string]any{"tool": tool, "callId": callID, "arguments": args, "result": result, "isError": isError}
	out := r.Run(ctx, ev)
	if !out.Modified {
		return result, false, out
	}
	s, ok := ev.Data["result"].(string)
	if !ok {
		out.Modified = false
		r.log.Warn("hook modified result to a non-string; ignored", "event", ev.Event, "id", ev.ID)
		return result, false, out
	}
	return s, true, out
}

// bootEntry is what the agent.bootstrap hooks appended to one epoch's prompt.
type bootEntry struct{ suffix string }

// maxBoot bounds the agent.bootstrap memo (one entry per session epoch this process served).
const maxBoot = 4096

// Bootstrap runs agent.bootstrap for prompt and returns the prompt with what the hooks
// appended. ev.ID names the session epoch: the hooks are asked once per id in this process
// and their appendix reused for every later prompt of that id (a process that takes the
// session over asks again, with the same id). A failure under onError: continue is not
// remembered (the next turn asks again); under onError: block it is returned as an error.
func (r *Runner) Bootstrap(ctx context.Context, ev *Event, prompt string) (string, error) {
	if !r.Has(AgentBootstrap) {
		return prompt, nil
	}
	r.bootMu.Lock()
	e, ok := r.boot[ev.ID]
	r.bootMu.Unlock()
	if ok {
		return prompt + e.suffix, nil
	}
	ev.Event = AgentBootstrap
	ev.Data = map[string]any{"systemPrompt": prompt}
	out := r.Run(ctx, ev)
	if out.Blocked {
		return prompt, fmt.Errorf("agent.bootstrap hook %s: %w", out.By, out.Err)
	}
	suffix := ""
	if s, ok := ev.Data["systemPrompt"].(string); ok && out.Modified && strings.HasPrefix(s, strings.TrimRight(prompt, "\n")) {
		suffix = s[len(strings.TrimRight(prompt, "\n")):]
		prompt = strings.TrimRight(prompt, "\n") + suffix
	}
	r.bootMu.Lock()
	if len(r.boot) >= maxBoot {
		clear(r.boot)
	}
	r.boot[ev.ID] = bootEntry{suffix: suffix}
	r.bootMu.Unlock()
	return prompt, nil
}

// Transform runs context.transform for the messages of one model call and returns the list
// the model will see. A hook that blocks by failing (onError: block) returns an error, which
// fails the model step.
func (r *Runner) Transform(ctx context.Context, ev *Event, msgs []llm.Message) ([]llm.Message, error) {
	ev.Event = ContextTransform
	ev.Data = map[string]any{"messages": msgs}
	out := r.Run(ctx, ev)
	if out.Blocked {
		return nil, fmt.Errorf("context.transform hook %s: %w", out.By, out.Err)
	}
	if !out.Modified {
		return msgs, nil
	}
	raw, err := json.Marshal(ev.Data["messages"])
	if err != nil {
		return msgs, nil
	}
	var next []llm.Message
	if err := json.Unmarshal(raw, &next); err != nil {
		r.log.Warn("hook modified messages to something that is not a message list; ignored", "id", ev.ID, "err", err)
		return msgs, nil
	}
	return next, nil
}
