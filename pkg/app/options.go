package app

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/egress"
	"github.com/agentbus/agentbus/pkg/ingest"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/loop"
	"github.com/agentbus/agentbus/pkg/models"
	"github.com/agentbus/agentbus/pkg/tasks"
	"github.com/agentbus/agentbus/pkg/toolworker"
	"github.com/agentbus/agentbus/pkg/turn"
)

// Roles read no YAML: the composition root maps each block of the configuration onto the
// typed Options of the role it tunes (milliseconds become time.Duration here, once), and the
// role validates the result at Run.

// withEgressTuning sets the fields of o that im.egress tunes; zero values in ec leave egress's
// defaults in charge.
func withEgressTuning(ec config.Egress, o egress.Options) egress.Options {
	o.Concurrency = ec.Concurrency
	o.MaxRetries = ec.MaxRetries
	o.MaxDeliveries = ec.MaxDeliveries
	o.AckWait = time.Duration(ec.AckWaitMs) * time.Millisecond
	if len(ec.RateLimits) > 0 {
		o.RateLimits = make(map[string]egress.RateLimit, len(ec.RateLimits))
		for k, v := range ec.RateLimits {
			o.RateLimits[k] = egress.RateLimit{PerSecond: v.PerSecond, Burst: v.Burst}
		}
	}
	return o
}

// ingestOptions maps ai.trigger and ai.dispatcher (defaults already applied by pkg/config)
// onto ingest's Options; bots are the per-bot role lists.
func ingestOptions(ai config.AI, bots map[string]ingest.BotRoles, log *slog.Logger) ingest.Options {
	t := ai.Trigger
	return ingest.Options{
		Trigger: ingest.Trigger{
			Off:                !config.Bool(t.Enabled, true),
			Prefixes:           t.Prefixes,
			PrivateNeedsPrefix: !config.Bool(t.RespondToPrivate, true),
			IgnoreMentions:     !config.Bool(t.RespondToAt, true),
			IgnorePrefixes:     t.IgnorePrefixes,
			Masters:            t.Masters,
			Trusted:            t.Trusted,
		},
		Dispatch: ingest.Dispatch{
			Dual:           ai.Dispatcher.Mode == "dual",
			AIFirst:        ai.Dispatcher.Order == "ai-first",
			AllowDualReply: ai.Dispatcher.AllowDualReply,
		},
		Bots: bots,
		Log:  log,
	}
}

// toolWorkerOptions maps what the ai: block tunes of the tool worker: the time limit of a call
// whose tool names none (ai.agent.toolTimeoutMs).
func toolWorkerOptions(ai config.AI) toolworker.Options {
	return toolworker.Options{DefaultTimeout: time.Duration(ai.Agent.ToolTimeoutMs) * time.Millisecond}
}

// turnOptions maps the ai: block (defaults already applied by pkg/config) onto the turn
// worker's Options: model routing and per-model tuning through pkg/models, the rest field by
// field. The caller adds the process's parts (stream, prompt sources, metrics, hooks).
func turnOptions(ai config.AI, reg *llm.Registry) turn.Options {
	ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
	a, s, cx, c := ai.Agent, ai.Sessions, ai.Context, ai.Agent.Compaction
	agents := make(map[string]turn.Binding, len(ai.Agents))
	for name, b := range ai.Agents {
		agents[name] = turn.Binding{Provider: b.Provider, Model: b.Model, Priority: b.Priority, HasMedia: b.Match.HasMedia}
	}
	var mcp []string
	for _, name := range slices.Sorted(maps.Keys(ai.MCPServers)) {
		if !ai.MCPServers[name].Disabled {
			mcp = append(mcp, name)
		}
	}
	harnesses := models.NewHarnesses(a) // once per model, not once per turn
	return turn.Options{
		Models: reg,
		Route: func(hasMedia []string) (*llm.Model, error) {
			_, m, err := models.Route(ai, reg, hasMedia)
			return m, err
		},
		Agents: agents,
		Harness: func(provider, modelID string) turn.Harness {
			h := harnesses.Resolve(provider, modelID)
			return turn.Harness{MaxIterations: h.MaxIterations, MaxTools: h.MaxTools, MaxSkills: h.MaxSkills,
				AlwaysTools: h.AlwaysTools, ToolExecution: h.ToolExecution, Thinking: h.Thinking,
				ModelSize: h.ModelSizeHint, SkillInstructionMaxChars: h.SkillInstructionMaxChars}
		},
		ToolTimeout:    ms(a.ToolTimeoutMs),
		TurnTimeout:    ms(a.TimeoutMs),
		PreExecTimeout: ms(a.PreExecTimeoutMs),
		Concurrency:    a.Concurrency,
		CollectWindow:  ms(a.CollectWindowMs),
		SteeringMode:   a.SteeringMode,
		FollowUpMode:   a.FollowUpMode,
		Workspace:      a.Workspace,
		PhaseTrace:     a.PhaseTrace,
		NoToneHints:    !config.Bool(a.ToneAwareness, true),
		RateLimit: turn.RateLimit{PerMinute: a.RateLimit.PerMinute, PerHour: a.RateLimit.PerHour, PerDay: a.RateLimit.PerDay,
			IncludeMasters: a.RateLimit.IncludeMasters},
		ContextTokens:   a.ContextTokens,
		MaxHistoryShare: a.MaxHistoryShare,
		Compaction: turn.Compaction{
			Disabled: !config.Bool(c.Enabled, true), NoAuto: !config.Bool(c.Auto, true),
			KeepRecentTokens: c.KeepRecentTokens, MinKeepCount: c.MinKeepCount, ReserveTokens: c.ReserveTokens,
			Model: c.Model, NoMemoryFlush: !config.Bool(c.MemoryFlush, true),
		},
		History: turn.History{
			MaxHistory: s.MaxHistory, ColdStartMaxMessages: s.ColdStartMaxMessages, ColdStartMaxAge: ms(s.ColdStartMaxAgeMs),
			IdleArchive: ms(s.SessionIdleArchiveMs), Expire: ms(s.ExpireMs),
			Legacy: turn.LegacyContext{Enabled: config.Bool(cx.Enabled, false), MaxRecentMessages: cx.MaxRecentMessages,
				SummaryThreshold: cx.SummaryThreshold, KeepAfterSummary: cx.KeepAfterSummary, MaxContextTokens: cx.MaxContextTokens},
		},
		MCPServers: mcp,
		ToolSearch: a.ToolSearch,
	}
}

// webhookOptions maps im.webhook onto the webhook adapter's options (seconds become a
// time.Duration here; zero limits keep ingest's defaults, which are pkg/config's).
func webhookOptions(wh config.Webhook) ingest.WebhookOptions {
	secrets := make(map[string]string, len(wh.Bots))
	for _, b := range wh.Bots {
		secrets[b.ID] = b.Secret
	}
	rl := wh.RateLimit
	return ingest.WebhookOptions{
		Secrets:          secrets,
		Tolerance:        time.Duration(wh.ToleranceSeconds) * time.Second,
		MaxBodyBytes:     wh.MaxBodyBytes,
		MaxInFlight:      wh.MaxInFlight,
		MaxInFlightBytes: wh.MaxInFlightBytes,
		PerBot:           ingest.RateLimit{PerSecond: rl.PerBot.PerSecond, Burst: rl.PerBot.Burst},
		PerSender:        ingest.RateLimit{PerSecond: rl.PerSender.PerSecond, Burst: rl.PerSender.Burst},
		MaxSenders:       rl.MaxSenders,
	}
}

// taskOptions maps ai.agent's background-task fields and ai.scheduler (validated by pkg/config)
// onto the turn worker's task runner (pkg/tasks).
func taskOptions(ai config.AI) (tasks.Options, error) {
	a, s := ai.Agent, ai.Scheduler
	o := tasks.Options{
		TaskTimeout:           time.Duration(a.TaskTimeoutMs) * time.Millisecond,
		SubagentTools:         a.SubagentTools,
		MaxSubagentIterations: a.MaxSubagentIterations,
		ToolExecution:         loop.ToolExecutionMode(a.ToolExecution),
		Workspace:             a.Workspace,
		Heartbeat: tasks.Heartbeat{Session: s.Heartbeat.Session, Every: s.Heartbeat.HeartbeatEvery(),
			File: s.Heartbeat.File, Prompt: s.Heartbeat.Prompt},
	}
	for _, j := range s.Jobs {
		job := tasks.Job{ID: j.ID, Session: j.Session, Cron: j.Cron, TimeZone: j.TimeZone, Prompt: j.Prompt}
		if j.Every != "" {
			d, err := time.ParseDuration(j.Every)
			if err != nil {
				return tasks.Options{}, fmt.Errorf("ai.scheduler.jobs %s: every: %w", j.ID, err)
			}
			job.Every = d
		}
		o.Jobs = append(o.Jobs, job)
	}
	return o, o.Validate()
}
