package hooks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/metrics"
)

// Event names (the dotted form; config.HookEvent maps the seed's aliases onto them).
const (
	MessageReceived  = "message.received"
	MessageSending   = "message.sending"
	MessageSent      = "message.sent"
	ToolBefore       = "tool.before"
	ToolAfter        = "tool.after"
	SessionNew       = "session.new"
	SessionCompact   = "session.compact"
	AgentBootstrap   = "agent.bootstrap"
	ContextTransform = "context.transform"
)

// Actions a hook answers with.
const (
	Continue = "continue"
	Block    = "block"
	Modify   = "modify"
)

// modifiable lists, per event, the data fields a modify answer may set.
var modifiable = map[string][]string{
	MessageReceived:  {"text"},
	MessageSending:   {"text"},
	ToolBefore:       {"arguments"},
	ToolAfter:        {"result"},
	AgentBootstrap:   {"systemPrompt"},
	ContextTransform: {"messages"},
}

// blockable are the events a block answer applies to.
var blockable = map[string]bool{MessageReceived: true, MessageSending: true, ToolBefore: true}

// notifications are the events whose answers are ignored.
var notifications = map[string]bool{MessageSent: true, SessionNew: true, SessionCompact: true}

// Modifiable returns the data fields a modify answer to event may set (nil: none).
func Modifiable(event string) []string { return modifiable[event] }

// IsNotification reports whether event is a notification (its answers are ignored).
func IsNotification(event string) bool { return notifications[event] }

// Sender is who sent the message the event is about.
type Sender struct {
	ID    string   `json:"id"`
	Name  string   `json:"name,omitempty"`
	Roles []string `json:"roles,omitempty"`
}

// Event is what a hook receives: the request body of HTTP and NATS hooks.
type Event struct {
	Event   string         `json:"event"`
	ID      string         `json:"id"`
	Session string         `json:"session,omitempty"`
	Turn    string         `json:"turn,omitempty"`
	Sender  *Sender        `json:"sender,omitempty"`
	Data    map[string]any `json:"data"`
}

// Result is a hook's answer. The zero value (and an empty answer) is continue.
type Result struct {
	Action string `json:"action"`
	// Reply is the text sent instead of a blocked message.received (optional).
	Reply string `json:"reply,omitempty"`
	// Result is the error text the model gets for a blocked tool.before.
	Result string `json:"result,omitempty"`
	// Data holds the fields a modify answer sets (Modifiable).
	Data map[string]any `json:"data,omitempty"`
}

// Func is an in-process hook. It may be called concurrently, from any role's goroutines; ctx
// ends at the hook's timeout. An error is handled like a failed HTTP hook.
type Func func(ctx context.Context, ev *Event) (Result, error)

// Outcome is what a chain of hooks decided for one event.
type Outcome struct {
	// Blocked: a hook answered block, or failed with onError: block (Err says so).
	Blocked bool
	// By names the hook that blocked.
	By string
	// Reply (message.received) and Result (tool.before) come from the blocking answer.
	Reply, Result string
	// Modified: some hook changed the event's data (the Event passed to Run holds the change).
	Modified bool
	// Err is the failure that blocked, when a hook with onError: block failed.
	Err error
}

// ErrHook wraps a hook's failure (transport, status, answer).
var ErrHook = errors.New("hooks: hook failed")

// ErrTimeout wraps a hook that did not answer within its timeout.
var ErrTimeout = errors.New("hooks: hook timed out")

// NotifyAttempts is how many times a notification is tried before it is given up (logged).
const NotifyAttempts = 3

// Options configure a Runner. Zero values pick the documented defaults.
type Options struct {
	// NC carries NATS hooks (nats: subject); nil fails them (handled by their onError).
	NC *nats.Conn
	// HTTPClient carries HTTP hooks (default: a client without a timeout of its own; each
	// call is bounded by its hook's timeout).
	HTTPClient *http.Client
	// Registry holds the in-process hooks (default: the package's, filled by Register).
	Registry *Registry
	// Metrics counts calls (nil: not counted).
	Metrics *metrics.Hooks
	Log     *slog.Logger
	// Role names the calling role in logs.
	Role string
}

// hook is one configured or registered hook.
type hook struct {
	name    string
	events  map[string]bool
	timeout time.Duration
	block   bool // onError: block
	call    func(ctx context.Context, h *hook, ev *Event) (Result, error)
	// transport details
	url, subject, secret string
	fn                   Func
}

// Runner calls the hooks of one role. A nil *Runner has no hooks: Has reports false, Run
// answers continue and Notify does nothing. Safe for concurrent use.
type Runner struct {
	hooks []*hook
	o     Options
	log   *slog.Logger

	bootMu sync.Mutex
	boot   map[string]bootEntry // agent.bootstrap answers by event id (Bootstrap)

	notifyWG sync.WaitGroup
	stop     chan struct{}
	stopOnce sync.Once
}

// New returns a Runner for the configured hooks (config order; already validated by
// config.Validate, which New repeats for the fields it needs).
func New(cfgs []config.Hook, o Options) (*Runner, error) {
	if o.Registry == nil {
		o.Registry = defaultRegistry
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{}
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	r := &Runner{o: o, log: o.Log, boot: map[string]bootEntry{}, stop: make(chan struct{})}
	for i, c := range cfgs {
		h := &hook{name: c.Name, events: map[string]bool{}, url: c.URL, subject: c.NATS, secret: c.Secret, block: c.OnError == "block"}
		if h.name == "" {
			return nil, fmt.Errorf("hooks: ai.hooks[%d] has no name", i)
		}
		for _, e := range c.Events {
			ev, ok := config.HookEvent(e)
			if !ok {
				return nil, fmt.Errorf("hooks: %s: unknown event %q", c.Name, e)
			}
			h.events[ev] = true
		}
		ms := c.TimeoutMs
		if ms <= 0 {
			ms = config.DefaultHookTimeoutMs
		}
		h.timeout = time.Duration(ms) * time.Millisecond
		switch {
		case c.URL != "":
			h.call = r.callHTTP
		case c.NATS != "":
			h.call = r.callNATS
		default:
			return nil, fmt.Errorf("hooks: %s: set url or nats", c.Name)
		}
		r.hooks = append(r.hooks, h)
	}
	return r, nil
}

// Has reports whether any hook (configured or registered) listens to event. Callers use it to
// skip building an event nobody reads.
func (r *Runner) Has(event string) bool {
	if r == nil {
		return false
	}
	for _, h := range r.hooks {
		if h.events[event] {
			return true
		}
	}
	return r.o.Registry.has(event)
}

// chain is the hooks for event in order: configured, then registered.
func (r *Runner) chain(event string) []*hook {
	var out []*hook
	for _, h := range r.hooks {
		if h.events[event] {
			out = append(out, h)
		}
	}
	return append(out, r.o.Registry.forEvent(event)...)
}

// Run calls the hooks of ev.Event in order and applies their answers to ev.Data (see the
// package doc). It never returns before every hook answered, failed or timed out; a ctx that
// ends stops the chain, and the outcome is then Blocked with ctx's error only if a remaining
// hook has onError: block.
func (r *Runner) Run(ctx context.Context, ev *Event) Outcome {
	var out Outcome
	if r == nil {
		return out
	}
	if ev.Data == nil {
		ev.Data = map[string]any{}
	}
	for _, h := range r.chain(ev.Event) {
		res, err := r.call(ctx, h, ev)
		if err != nil {
			if h.block {
				r.log.Warn("hook failed; blocking (onError: block)", "hook", h.name, "event", ev.Event, "id", ev.ID, "session", ev.Session, "turn", ev.Turn, "err", err)
				return Outcome{Blocked: true, By: h.name, Modified: out.Modified, Err: err}
			}
			r.log.Warn("hook failed; continuing (onError: continue)", "hook", h.name, "event", ev.Event, "id", ev.ID, "session", ev.Session, "turn", ev.Turn, "err", err)
			continue
		}
		switch res.Action {
		case Block:
			if !blockable[ev.Event] {
				r.log.Warn("hook answered block to an event that cannot be blocked; taken as continue", "hook", h.name, "event", ev.Event)
				continue
			}
			out.Blocked, out.By, out.Reply, out.Result = true, h.name, res.Reply, res.Result
			return out
		case Modify:
			for _, f := range modifiable[ev.Event] {
				v, ok := res.Data[f]
				if !ok {
					continue
				}
				if ev.Event == AgentBootstrap { // an append, not a replacement
					add, _ := v.(string)
					if add == "" {
						continue
					}
					prev, _ := ev.Data[f].(string)
					v = strings.TrimRight(prev, "\n") + "\n\n" + add
				}
				ev.Data[f] = v
				out.Modified = true
			}
		}
	}
	return out
}

// call runs one hook within its timeout and counts it.
func (r *Runner) call(ctx context.Context, h *hook, ev *Event) (Result, error) {
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	res, err := h.call(cctx, h, ev)
	outcome := metrics.HookContinue
	switch {
	case err != nil && errors.Is(cctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
		err = fmt.Errorf("%w: %s gave no answer within %s: %w", ErrTimeout, h.name, h.timeout, err)
		outcome = metrics.HookTimeout
	case err != nil:
		err = fmt.Errorf("%w: %s: %w", ErrHook, h.name, err)
		outcome = metrics.HookError
	case res.Action == "" || res.Action == Continue:
		res.Action = Continue
	case res.Action == Block:
		outcome = metrics.HookBlock
	case res.Action == Modify:
		outcome = metrics.HookModify
	default:
		err = fmt.Errorf("%w: %s answered action %q (want continue, block or modify)", ErrHook, h.name, res.Action)
		outcome = metrics.HookError
	}
	r.o.Metrics.Call(h.name, ev.Event, outcome, time.Since(start))
	return res, err
}

// Notify delivers a notification (message.sent, session.new, session.compact) to its hooks on
// a goroutine of its own: each hook is tried up to NotifyAttempts times with the same id until
// it answers. The caller does not wait; Close waits for what is under way.
func (r *Runner) Notify(ev *Event) {
	if r == nil || !r.Has(ev.Event) {
		return
	}
	if ev.Data == nil {
		ev.Data = map[string]any{}
	}
	r.notifyWG.Add(1)
	go func() {
		defer r.notifyWG.Done()
		for _, h := range r.chain(ev.Event) {
			for attempt := 1; ; attempt++ {
				_, err := r.call(context.Background(), h, ev)
				if err == nil {
					break
				}
				if attempt >= NotifyAttempts {
					r.log.Warn("hook notification given up", "hook", h.name, "event", ev.Event, "id", ev.ID, "session", ev.Session, "attempts", attempt, "err", err)
					break
				}
				select {
				case <-r.stop:
					return
				case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
				}
			}
		}
	}()
}

// Close stops retrying notifications and waits (until ctx ends) for the ones under way.
func (r *Runner) Close(ctx context.Context) error {
	if r == nil {
		return nil
	}
	r.stopOnce.Do(func() { close(r.stop) })
	done := make(chan struct{})
	go func() { r.notifyWG.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
