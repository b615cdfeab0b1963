// Package tasks is background work on both sides of TASKS (docs/tasks.md). Tool workers serve
// its spawn_task, tool_search and run_deferred_task tools, which queue subagent and deferred
// tasks on TASKS and record them in KV tasks; every turn-worker replica starts a Runner
// (runner.go), which runs the queued tasks, installs the ai.scheduler schedules and reads
// HEARTBEAT.md for the heartbeat. The package imports no role: the tool-worker process runs
// it without pkg/turn, and the turn worker hands the Runner what it needs through
// RunnerConfig (a Turns reader, a ToolClient, the stores).
package tasks

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/schedule"
	"github.com/agentbus/agentbus/pkg/skills"
	"github.com/agentbus/agentbus/pkg/toolbus"
	"github.com/agentbus/agentbus/pkg/tools"
	"github.com/agentbus/agentbus/pkg/tools/filetool"
)

// Names of the toolSearch orchestration tools (seed: tool_search, run_deferred_task).
const (
	ToolSearchName      = "tool_search"
	RunDeferredTaskName = "run_deferred_task"
	SpawnTaskName       = "spawn_task"
)

// OrchestrationTools are what the main agent keeps with ai.agent.toolSearch (seed).
var OrchestrationTools = []string{ToolSearchName, RunDeferredTaskName, SpawnTaskName, "ask_user"}

// DefaultTimeout bounds a background task when ai.agent.taskTimeoutMs is not set.
const DefaultTimeout = 10 * time.Minute

// LabelOr is label, or the start of text (what /tasks and the result message call a task).
func LabelOr(label, text string) string {
	if label != "" {
		return label
	}
	s := strings.Join(strings.Fields(text), " ")
	if r := []rune(s); len(r) > 40 {
		return string(r[:40]) + "…"
	}
	return s
}

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
	view  *toolbus.View
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

// CallerMessage is the IMMessage shape the catalogue's permission filter looks at.
func CallerMessage(env tools.Env) events.IMMessage {
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
func ToolSearchTool(cat *toolbus.Catalog, cache *ToolSearchCache) tools.Tool {
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
			v := cat.View(CallerMessage(c.Env))
			names := cache.getOrSearch(searchKey{v, strings.ToLower(q)}, func() []string { return searchTools(v, q) })
			if len(names) > limit {
				names = names[:limit]
			}
			var b strings.Builder
			if len(names) == 0 {
				b.WriteString("No tool matches " + fmt.Sprintf("%q", q) + ". Tools on the workers:")
				for _, e := range v.Entries {
					if !slices.Contains(OrchestrationTools, e.Name) {
						b.WriteString(" " + e.Name)
					}
				}
				return tools.TextResult(b.String()), nil
			}
			fmt.Fprintf(&b, "Tools for %q (run one with %s {\"tool\": name, \"args\": {...}}):", q, RunDeferredTaskName)
			for _, n := range names {
				e := v.Entries[v.Index[n]]
				fmt.Fprintf(&b, "\n- %s: %s\n  parameters: %s", e.Name, e.Description, compactJSON(e.Parameters))
			}
			return tools.TextResult(b.String()), nil
		}, tools.Idempotent(), tools.WithSource("builtin"))
}

// searchTools ranks the view's tools against q (skills.Select's relevance), leaving out the
// orchestration tools themselves.
func searchTools(v *toolbus.View, q string) []string {
	var avail []tools.Tool
	for _, t := range v.Avail {
		if !slices.Contains(OrchestrationTools, t.Name) {
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
func RunDeferredTaskTool(js jetstream.JetStream, cat *toolbus.Catalog, tasks *schedule.Tasks, timeout time.Duration) tools.Tool {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return tools.MustNew(RunDeferredTaskName,
		"Run a worker tool in the background (find it with "+ToolSearchName+" first). Returns at once; the result is posted to this chat as a separate message.",
		func(ctx context.Context, c tools.Call, a runDeferredArgs) (tools.Result, error) {
			sk, err := events.ParseSessionKey(c.Env.SessionKey)
			if err != nil {
				return tools.ErrorResult("run_deferred_task needs a chat session: %v", err), nil
			}
			if slices.Contains(OrchestrationTools, a.Tool) {
				return tools.ErrorResult("run_deferred_task: %s is an orchestration tool; call it directly", a.Tool), nil
			}
			v := cat.View(CallerMessage(c.Env))
			if _, ok := v.Index[a.Tool]; !ok {
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

// spawnArgs are spawn_task's parameters.
type spawnArgs struct {
	Task  string `json:"task" jsonschema:"what the background agent should do, self-contained"`
	Label string `json:"label,omitempty" jsonschema:"a short name for the task, shown to the user"`
	Agent string `json:"agent,omitempty" jsonschema:"name of an agent preset (*.agent.md) to run the task with"`
}

// SpawnTaskTool is spawn_task: it hands a task to a background subagent (TASKS) and returns at
// once; the result arrives later as a new message in this chat. Served by tool workers.
// presets are the *.agent.md presets (agents/): a named preset gives the subagent its system
// prompt, tools, model and iteration limit.
func SpawnTaskTool(js jetstream.JetStream, presets []filetool.AgentPreset) tools.Tool {
	desc := "Run a longer task in the background with a subagent (files, shell, web). Returns immediately; the result is posted to this chat when done."
	if len(presets) > 0 {
		desc += " Agent presets:"
		for _, p := range presets {
			desc += " " + p.Name + " (" + p.Description + ");"
		}
	}
	return tools.MustNew(SpawnTaskName, desc,
		func(ctx context.Context, c tools.Call, a spawnArgs) (tools.Result, error) {
			sk, err := events.ParseSessionKey(c.Env.SessionKey)
			if err != nil {
				return tools.ErrorResult("spawn_task needs a chat session: %v", err), nil
			}
			if a.Task == "" {
				return tools.ErrorResult("spawn_task: task is empty"), nil
			}
			task := events.SubagentTask{TaskID: events.EncodeToken(c.ID), Parent: sk, ParentTurn: c.Env.Turn, ToolCallID: c.ID, Prompt: a.Task,
				Caller: events.Caller{Platform: c.Env.Platform, Bot: c.Env.BotID, Scope: c.Env.Scope, SenderID: c.Env.SenderID, Roles: c.Env.SenderRoles}}
			if a.Agent != "" {
				i := slices.IndexFunc(presets, func(p filetool.AgentPreset) bool { return p.Name == a.Agent })
				if i < 0 {
					return tools.ErrorResult("spawn_task: no agent preset %q", a.Agent), nil
				}
				p := presets[i]
				task.Tools, task.Model, task.MaxIterations = p.Tools, p.Model, p.MaxIterations
				task.Agent, task.SystemPrompt = p.Name, p.SystemPrompt // the body is the system prompt
			}
			if tasks, err := schedule.OpenTasks(ctx, js); err == nil {
				_, _ = tasks.Create(ctx, events.TaskRecord{ID: task.TaskID, Kind: events.TaskKindSubagent, Session: sk,
					Label: LabelOr(a.Label, a.Task), Owner: c.Env.SenderID})
			}
			m, err := events.NewMsg(events.TaskSubagentSubject(task.TaskID), events.New(task, events.WithSession(sk.String())))
			if err != nil {
				return tools.ErrorResult("spawn_task: %v", err), nil
			}
			if _, err := js.PublishMsg(ctx, m); err != nil {
				return tools.Result{}, fmt.Errorf("spawn_task: queue task: %w", err)
			}
			label := a.Label
			if label == "" {
				label = task.TaskID
			}
			return tools.TextResult("delegated: background task " + label + " started; its result will be posted to this chat when it finishes. Tell the user."), nil
		}, tools.WithKeywords("background", "long", "research", "task", "subagent", "后台", "调研", "研究", "长时间", "任务", "异步"))
}
