package llmbus

import (
	"github.com/agentbus/agentbus/pkg/llm"
)

// Version is the version of the wire contract this package speaks: the "v" of every request,
// event and control message. A change that an old reader would misread gets a new version;
// new optional fields and new event types do not (readers ignore what they do not know).
const Version = 1

// API is the api value of a provider served on the bus (ai.providers.<alias>.api: bus).
const API = "bus"

// VersionHeader is the NATS header a request carries with Version, so a server can refuse a
// version it does not speak before decoding the body.
const VersionHeader = "Agentbus-Llmbus-Version"

// Event types of the wire that are not llm events.
const (
	// TypeHeartbeat: the server is alive and the request is in progress. A server sends one
	// as soon as it accepts a request and then whenever it has sent nothing for its heartbeat
	// interval; the client ignores it beyond resetting its idle timeout.
	TypeHeartbeat = "heartbeat"
	// TypeCancel is the control message a client sends to stop a stream.
	TypeCancel = "cancel"
)

// Request is the body of a request to a provider subject: everything one llm.Stream call
// passes to a provider, as JSON.
type Request struct {
	V int `json:"v"`
	// ID identifies the request in logs on both sides (unique per call).
	ID      string      `json:"id,omitempty"`
	Model   llm.Model   `json:"model"`
	Context llm.Context `json:"context"`
	Options Options     `json:"options"`
}

// Options are the llm.StreamOptions that cross the wire. HTTPClient, MaxRetryDelay and
// Secrets are the caller's process's own and are not sent.
type Options struct {
	APIKey          string            `json:"apiKey,omitempty"`
	Temperature     *float64          `json:"temperature,omitempty"`
	MaxTokens       int               `json:"maxTokens,omitempty"`
	Headers         map[string]string `json:"headers,omitempty"`
	SessionID       string            `json:"sessionId,omitempty"`
	Thinking        llm.ThinkingLevel `json:"thinking,omitempty"`
	ThinkingBudgets *Budgets          `json:"thinkingBudgets,omitempty"`
	Extra           map[string]any    `json:"extra,omitempty"`
}

// Budgets are llm.ThinkingBudgets on the wire (zero = the provider's default).
type Budgets struct {
	Minimal int `json:"minimal,omitempty"`
	Low     int `json:"low,omitempty"`
	Medium  int `json:"medium,omitempty"`
	High    int `json:"high,omitempty"`
	XHigh   int `json:"xhigh,omitempty"`
}

func optionsFrom(o *llm.StreamOptions) Options {
	w := Options{APIKey: o.APIKey, Temperature: o.Temperature, MaxTokens: o.MaxTokens, Headers: o.Headers,
		SessionID: o.SessionID, Thinking: o.Thinking, Extra: o.Extra}
	if b := o.ThinkingBudgets; b != (llm.ThinkingBudgets{}) {
		w.ThinkingBudgets = &Budgets{Minimal: b.Minimal, Low: b.Low, Medium: b.Medium, High: b.High, XHigh: b.XHigh}
	}
	return w
}

func (w Options) stream() *llm.StreamOptions {
	o := &llm.StreamOptions{APIKey: w.APIKey, Temperature: w.Temperature, MaxTokens: w.MaxTokens, Headers: w.Headers,
		SessionID: w.SessionID, Thinking: w.Thinking, Extra: w.Extra}
	if b := w.ThinkingBudgets; b != nil {
		o.ThinkingBudgets = llm.ThinkingBudgets{Minimal: b.Minimal, Low: b.Low, Medium: b.Medium, High: b.High, XHigh: b.XHigh}
	}
	return o
}

// Event is one message of a reply stream: an llm event without its Partial (the client
// rebuilds the message from the events), or a heartbeat.
//
//	start                                   the message begins
//	text_start, thinking_start              contentIndex: the new block's index (= blocks so far)
//	toolcall_start                          contentIndex, id, name
//	text_delta, thinking_delta              contentIndex, delta: text to append
//	toolcall_delta                          contentIndex, delta: raw argument JSON to append
//	text_end, thinking_end                  contentIndex, content: the block's whole text
//	toolcall_end                            contentIndex, toolCall: the finished call
//	done                                    reason, message: the final assistant message
//	error                                   reason (error|aborted), message with errorMessage
//	heartbeat                               nothing
type Event struct {
	V            int            `json:"v"`
	Seq          int            `json:"seq"`
	Type         string         `json:"type"`
	ContentIndex int            `json:"contentIndex,omitempty"`
	Delta        string         `json:"delta,omitempty"`
	Content      string         `json:"content,omitempty"`
	ID           string         `json:"id,omitempty"`
	Name         string         `json:"name,omitempty"`
	ToolCall     *llm.Content   `json:"toolCall,omitempty"`
	Reason       llm.StopReason `json:"reason,omitempty"`
	Message      *llm.Message   `json:"message,omitempty"`
}

// Control is a message from the client to the server's control subject (the reply subject of
// every event the server sends).
type Control struct {
	V    int    `json:"v"`
	Type string `json:"type"` // TypeCancel
}

// wireEvent turns an llm event into its wire form (V and Seq are set when it is sent).
func wireEvent(ev llm.Event) Event {
	w := Event{Type: string(ev.Type), ContentIndex: ev.ContentIndex}
	switch ev.Type {
	case llm.EventTextDelta, llm.EventThinkingDelta, llm.EventToolCallDelta:
		w.Delta = ev.Delta
	case llm.EventTextEnd, llm.EventThinkingEnd:
		w.Content = ev.Content
	case llm.EventToolCallStart:
		if p := ev.Partial; p != nil && ev.ContentIndex >= 0 && ev.ContentIndex < len(p.Content) {
			w.ID, w.Name = p.Content[ev.ContentIndex].ID, p.Content[ev.ContentIndex].Name
		}
	case llm.EventToolCallEnd:
		w.ToolCall = ev.ToolCall
	case llm.EventDone, llm.EventError:
		w.ContentIndex = 0
		w.Reason, w.Message = ev.Reason, ev.Message
	}
	return w
}
