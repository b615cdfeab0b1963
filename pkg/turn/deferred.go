package turn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/loop"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/schedule"
	"github.com/agentbus/agentbus/pkg/skills"
	"github.com/agentbus/agentbus/pkg/tools"
)

// Names of the toolSearch orchestration tools (seed: tool_search, run_deferred_task).
const (
	ToolSearchName      = "tool_search"
	RunDeferredTaskName = "run_deferred_task"
)

// DeferredConsumer is the durable consumer of TASKS task.deferred.> shared by turn workers.
const DeferredConsumer = "deferred"

// ToolSearchCache memoizes tool_search answers (seed: ToolSearchCache, maxSize 100, ttl 60s):
// the same query by the same kind of sender against the same catalogue is answered from the
// cache. A catalogue change makes new views, so stale answers are never served after a tool
// appears or disappears. Safe for concurrent use.
type ToolSearchCache struct {
	maxSize int
	ttl     time.Duration
	mu      sync.Mutex
	m       map[searchKey]searchHit
}

type searchKey struct {
	view  *toolView
	query string
}

type searchHit struct {
	at    time.Time
	names []string
}

// NewToolSearchCache returns a cache of at most maxSize answers kept ttl (defaults 100, 60s).
func NewToolSearchCache(maxSize int, ttl time.Duration) *ToolSearchCache {
	if maxSize <= 0 {
		maxSize = 100
	}
	if ttl <= 0 {
		ttl = time.Minute
	}
	return &ToolSearchCache{maxSize: maxSize, ttl: ttl, m: map[searchKey]searchHit{}}
}

// getOrSearch returns the cached answer for k or computes, stores and returns it.
func (c *ToolSearchCache) getOrSearch(k searchKey, search func() []string) []string {
	now := time.Now()
	c.mu.Lock()
	if h, ok := c.m[k]; ok && now.Sub(h.at) < c.ttl {
		c.mu.Unlock()
		return h.names
	}
	c.mu.Unlock()
	names := search()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.maxSize { // drop the expired, then the oldest
		var oldest searchKey
		var oldestAt time.Time
		for key, h := range c.m {
			if now.Sub(h.at) >= c.ttl {
				delete(c.m, key)
			} else if oldestAt.IsZero() || h.at.Before(oldestAt) {
				oldest, oldestAt = key, h.at
			}
		}
		if len(c.m) >= c.maxSize {
			delete(c.m, oldest)
		}
	}
	c.m[k] = searchHit{at: now, names: names}
	return names
}

// callerMessage is the IMMessage shape the catalogue's permission filter looks at.
func callerMessage(env tools.Env) events.IMMessage {
	return events.IMMessage{Platform: env.Platform, Bot: env.BotID, Scene: events.Scene{Type: env.Scope, ID: env.SceneID},
		Sender: events.Sender{ID: env.SenderID, Roles: env.SenderRoles}}
}

type toolSearchArgs struct {
	Query string `json:"query" jsonschema:"what you need to do, in a few words (e.g. generate image, weather)"`
	Limit int    `json:"limit,omitempty" jsonschema:"at most this many tools (default 5)"`
}

// ToolSearchTool is tool_search: it finds tools in the worker catalogue (KV tools, as cat
// mirrors it) that the caller may use, ranked like the seed's tool selection, and answers
// with their names, descriptions and parameter schemas. Served by tool workers.
func ToolSearchTool(cat *ToolCatalog, cache *ToolSearchCache) tools.Tool {
	return tools.MustNew(ToolSearchName,
		"Find tools on the workers for a task. Answers tool names, what they do and their parameters; run one with "+RunDeferredTaskName+".",
		func(ctx context.Context, c tools.Call, a toolSearchArgs) (tools.Result, error) {
			q := strings.TrimSpace(a.Query)
			if q == "" {
				return tools.ErrorResult("tool_search: query is empty"), nil
			}
			limit := a.Limit
			if limit <= 0 || limit > 20 {
				limit = 5
			}
			v := cat.view(callerMessage(c.Env))
			names := cache.getOrSearch(searchKey{v, strings.ToLower(q)}, func() []string { return searchTools(v, q) })
			if len(names) > limit {
				names = names[:limit]
			}
			var b strings.Builder
			if len(names) == 0 {
				b.WriteString("No tool matches " + fmt.Sprintf("%q", q) + ". Tools on the workers:")
				for _, e := range v.entries {
					if !slices.Contains(orchestrationTools, e.Name) {
						b.WriteString(" " + e.Name)
					}
				}
				return tools.TextResult(b.String()), nil
			}
			fmt.Fprintf(&b, "Tools for %q (run one with %s {\"tool\": name, \"args\": {...}}):", q, RunDeferredTaskName)
			for _, n := range names {
				e := v.entries[v.index[n]]
				fmt.Fprintf(&b, "\n- %s: %s\n  parameters: %s", e.Name, e.Description, compactJSON(e.Parameters))
			}
			return tools.TextResult(b.String()), nil
		}, tools.Idempotent(), tools.WithSource("builtin"))
}

// searchTools ranks the view's tools against q (skills.Select's relevance), leaving out the
// orchestration tools themselves.
func searchTools(v *toolView, q string) []string {
	var avail []tools.Tool
	for _, t := range v.avail {
		if !slices.Contains(orchestrationTools, t.Name) {
			avail = append(avail, t)
		}
	}
	sel := skills.Select(q, nil, avail, skills.SelectOptions{MaxTools: 20, MinScore: 1})
	names := make([]string, len(sel.Tools))
	for i, t := range sel.Tools {
		names[i] = t.Name
	}
	return names
}

func compactJSON(b []byte) string {
	if len(b) == 0 {
		return "{}"
	}
	var v any
	if json.Unmarshal(b, &v) != nil {
		return string(b)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

type runDeferredArgs struct {
	Tool  string         `json:"tool" jsonschema:"the tool to run (a name tool_search found)"`
	Args  map[string]any `json:"args,omitempty" jsonschema:"the tool's arguments"`
	Label string         `json:"label,omitempty" jsonschema:"a short name for the task, shown to the user"`
}

// RunDeferredTaskTool is run_deferred_task: it checks that the caller may use the tool, records
// the task in KV tasks (pending) and queues it on TASKS as task.deferred.<id> (Nats-Msg-Id =
// the task id, which is the call id: a repeated call queues nothing new), then answers
// "delegated" at once. A turn worker runs it and posts the result to the chat as a message of
// its own. timeout is the task's time limit. Served by tool workers.
func RunDeferredTaskTool(js jetstream.JetStream, cat *ToolCatalog, tasks *schedule.Tasks, timeout time.Duration) tools.Tool {
	if timeout <= 0 {
		timeout = DefaultTaskTimeout
	}
	return tools.MustNew(RunDeferredTaskName,
		"Run a worker tool in the background (find it with "+ToolSearchName+" first). Returns at once; the result is posted to this chat as a separate message.",
		func(ctx context.Context, c tools.Call, a runDeferredArgs) (tools.Result, error) {
			sk, err := events.ParseSessionKey(c.Env.SessionKey)
			if err != nil {
				return tools.ErrorResult("run_deferred_task needs a chat session: %v", err), nil
			}
			if slices.Contains(orchestrationTools, a.Tool) {
				return tools.ErrorResult("run_deferred_task: %s is an orchestration tool; call it directly", a.Tool), nil
			}
			v := cat.view(callerMessage(c.Env))
			if _, ok := v.index[a.Tool]; !ok {
				return tools.ErrorResult("run_deferred_task: no tool %q is available to you on the workers; use %s to find one", a.Tool, ToolSearchName), nil
			}
			id := events.EncodeToken(c.ID)
			label := a.Label
			if label == "" {
				label = a.Tool
			}
			payload, err := json.Marshal(events.DeferredToolCall{Tool: a.Tool, Args: a.Args})
			if err != nil {
				return tools.ErrorResult("run_deferred_task: args: %v", err), nil
			}
			caller := events.Caller{Platform: c.Env.Platform, Bot: c.Env.BotID, Scope: c.Env.Scope, SenderID: c.Env.SenderID, Roles: c.Env.SenderRoles}
			task := events.DeferredTask{TaskID: id, Kind: events.DeferredKindTool, Session: sk.String(), Payload: payload,
				Parent: &sk, Caller: &caller, Label: label, Deadline: time.Now().Add(timeout).UnixMilli(),
				Turn: c.Env.Turn, ToolCallID: c.ID}
			if _, err := tasks.Create(ctx, events.TaskRecord{ID: id, Kind: events.TaskKindDeferred, Session: sk, Label: label, Owner: c.Env.SenderID}); err != nil {
				return tools.Result{}, fmt.Errorf("run_deferred_task: %w", err)
			}
			m, err := events.NewMsg(events.TaskDeferredSubject(id), events.New(task, events.WithSession(sk.String()), events.WithID(id)))
			if err != nil {
				return tools.ErrorResult("run_deferred_task: %v", err), nil
			}
			if _, err := js.PublishMsg(ctx, m); err != nil {
				return tools.Result{}, fmt.Errorf("run_deferred_task: queue task: %w", err)
			}
			return tools.TextResult(fmt.Sprintf("delegated: task %s (%s) runs in the background, within %s; its result will be posted to this chat as a separate message. Tell the user briefly; do not wait for it.", id, label, timeout)), nil
		}, tools.WithSource("builtin"))
}

// startDeferred runs deferred tasks from TASKS (task.deferred.>), like subagents: a task is
// acked once its result is in the session's inbox (or it was cancelled); a worker that dies
// mid-task leaves it to be redelivered, and the rerun finds the tool's result in TOOL_RESULTS
// under the same call id instead of running the tool again.
func (w *Worker) startDeferred(ctx context.Context) error {
	cons, err := natsutil.Consumer(ctx, w.js, events.StreamTasks, jetstream.ConsumerConfig{
		Durable: DeferredConsumer, FilterSubject: events.PrefixTask + "." + events.TaskKindDeferred + ".>",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: w.opts.AckWait, MaxDeliver: 20, MaxAckPending: 64,
	})
	if err != nil {
		return fmt.Errorf("create consumer %s: %w", DeferredConsumer, err)
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.runDeferred(msg)
		}()
	}, natsutil.FailoverConsume(jetstream.PullMaxMessages(8))...)
	if err != nil {
		return err
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		<-w.ctx.Done()
		cc.Stop()
	}()
	return nil
}

func (w *Worker) runDeferred(msg jetstream.Msg) {
	meta, _ := msg.Metadata()
	var seq uint64
	if meta != nil {
		seq = meta.Sequence.Stream
	}
	var ev events.Event[events.DeferredTask]
	if err := events.Unmarshal(msg.Data(), &ev); err != nil {
		w.deadLetter(msg.Subject(), seq, msg.Data(), msg.Headers(), "invalid_task", err)
		_ = msg.Term()
		return
	}
	task := ev.Data
	if task.Kind != events.DeferredKindTool {
		w.deadLetter(msg.Subject(), seq, msg.Data(), msg.Headers(), "unknown_task_kind", fmt.Errorf("deferred task kind %q has no runner", task.Kind))
		_ = msg.Term()
		return
	}
	if task.Parent == nil {
		w.deadLetter(msg.Subject(), seq, msg.Data(), msg.Headers(), "invalid_task", errors.New("a tool task names no parent session"))
		_ = msg.Term()
		return
	}
	sk, id := *task.Parent, task.TaskID
	log := w.log.With("task", id, "session", sk.String())
	// Who the task runs as and where its result goes come from the turn that queued it, not
	// from the task (taskOrigin).
	var call events.DeferredToolCall
	_ = json.Unmarshal(task.Payload, &call)
	caller, err := w.taskOrigin(w.ctx, sk, task.Turn, task.ToolCallID, RunDeferredTaskName, checkDeferredArgs(call))
	if err == nil && id != events.EncodeToken(task.ToolCallID) {
		err = fmt.Errorf("%w: task id %s is not its call's", errUnasked, id)
	}
	if errors.Is(err, errUnasked) {
		log.Warn("deferred task refused: its turn did not ask for it", "err", err)
		w.deadLetter(msg.Subject(), seq, msg.Data(), msg.Headers(), "unverified_task", err)
		_ = msg.Term()
		return
	}
	if err != nil {
		if w.ctx.Err() == nil {
			log.Warn("deferred task: its turn cannot be read yet", "err", err)
			_ = msg.NakWithDelay(5 * time.Second)
		}
		return
	}
	task.Caller = &caller
	owner := caller.SenderID
	if !w.taskStarting(sk, id, events.TaskKindDeferred, labelOr(task.Label, id), owner) {
		_ = msg.Ack() // its result was delivered (or it was cancelled) before: never twice
		return
	}
	w.progress.Add(msg)
	defer w.progress.Remove(msg)
	text, isErr, cancelled := w.deferredCall(sk, id, task, ev.Trace)
	if w.ctx.Err() != nil {
		return // stopping: redelivered to another worker, which finds the tool's result
	}
	if cancelled || w.taskCancelled(sk, id) {
		log.Info("deferred task cancelled; result not delivered")
		_ = msg.Ack()
		return
	}
	res := events.TaskResult{TaskID: id, Kind: events.DeferredKindTool, Label: task.Label, Content: []llm.Content{llm.Text(text)}, IsError: isErr}
	out := events.New(res, events.WithSession(sk.String()), events.WithTrace(ev.Trace), events.WithID("task-result-"+id))
	m, err := events.NewMsg(events.AgentInSubject(sk), out)
	if err == nil {
		_, err = w.inboxPub.Publish(w.ctx, m)
	}
	if err != nil {
		log.Error("deferred task result not delivered", "err", err)
		_ = msg.NakWithDelay(5 * time.Second)
		return
	}
	w.taskFinished(sk, id, isErr, text)
	_ = msg.Ack()
}

// deferredCall runs the task's tool call on a tool worker within the task's time limit,
// cancelled early when /tasks cancel marks the record. The call id is fixed per task, so a
// rerun after a crash reads the result the first run left instead of calling again.
func (w *Worker) deferredCall(sk events.SessionKey, id string, task events.DeferredTask, trace string) (text string, isErr, cancelled bool) {
	var call events.DeferredToolCall
	if err := json.Unmarshal(task.Payload, &call); err != nil || call.Tool == "" {
		return fmt.Sprintf("the task has no valid tool call (%v)", err), true, false
	}
	deadline := time.Now().Add(w.taskTimeout())
	if task.Deadline > 0 {
		deadline = time.UnixMilli(task.Deadline)
	}
	limit := time.Until(deadline).Round(time.Second)
	ctx, cancel := context.WithDeadline(w.ctx, deadline)
	defer cancel()
	var userCancel sync.Once
	var wasCancelled bool
	stopWatch := w.watchCancel(ctx, sk, id, func() { userCancel.Do(func() { wasCancelled = true; cancel() }) })
	defer stopWatch()
	caller := events.Caller{Platform: sk.Platform, Bot: sk.Bot, Scope: sk.Scope}
	if task.Caller != nil {
		caller = *task.Caller
	}
	busID := "task-" + id
	exec := &busExecutor{w: w, resumed: true, busID: func(string) string { return busID },
		scope: callScope{sk: sk, turn: busID, sid: sk.String(), trace: trace, caller: caller}}
	args := call.Args
	if args == nil {
		args = map[string]any{}
	}
	if _, ok := w.tools.entry(call.Tool); !ok {
		_ = w.tools.Refresh(ctx)
		if _, ok := w.tools.entry(call.Tool); !ok {
			return "no tool worker serves " + call.Tool + " right now", true, false
		}
	}
	res, err := exec.Execute(ctx, loop.ToolCallRequest{ID: "run", Name: call.Tool, Args: args})
	userCancel.Do(func() {}) // from here on a cancel no longer changes the outcome
	switch {
	case wasCancelled:
		return "", false, true
	case errors.Is(err, context.DeadlineExceeded) || (err == nil && ctx.Err() != nil && w.ctx.Err() == nil):
		return fmt.Sprintf("%s did not finish within the task's time limit (%s)", call.Tool, limit), true, false
	case err != nil:
		return call.Tool + ": " + err.Error(), true, false
	}
	text = strings.TrimSpace(llm.TextContentOf(res.Content))
	if res.IsError && time.Now().After(deadline.Add(-time.Second)) {
		// The tool worker gave up at the same deadline a moment before we did.
		return fmt.Sprintf("%s did not finish within the task's time limit (%s): %s", call.Tool, limit, text), true, false
	}
	return text, res.IsError, false
}

// watchCancel calls cancel when the task's record becomes cancelled, until ctx ends; the
// returned func stops watching.
func (w *Worker) watchCancel(ctx context.Context, sk events.SessionKey, id string, cancel func()) func() {
	wctx, stop := context.WithCancel(ctx)
	watcher, err := w.bg.tasks.Watch(wctx, sk, id)
	if err != nil {
		stop()
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-wctx.Done():
				return
			case r, ok := <-watcher:
				if !ok {
					return
				}
				if r.State == events.TaskCancelled {
					cancel()
					return
				}
			}
		}
	}()
	return func() { stop(); <-done }
}
