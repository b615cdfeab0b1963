package app

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/egress"
	"github.com/agentbus/agentbus/pkg/ingest"
	"github.com/agentbus/agentbus/pkg/loop"
	"github.com/agentbus/agentbus/pkg/tasks"
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
